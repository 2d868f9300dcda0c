"""As the agent, with the design's git server and a policy that allows writes in the
workspace: a path relative to the repository that leads out of the workspace (through a
link in the repository, ``..``, or an absolute value) is judged where git resolves it, so
the call is not allowed; the control gives the argument the role ``none`` (what a user
had to give it before such a path could work) and the same call is allowed: only the
sandbox then stands between the agent and the place outside."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.audit import audit_entries
from tests.support.cli import run_args
from tests.support.gitserver import (
    heuristic_annotation_of,
    needs_git_server,
    write_design_policy,
    write_git_config,
)
from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.sdk import session_calls

pytestmark = [needs_bwrap, needs_git_server]


def _worktree(judged: bool) -> dict[str, dict[str, Any]]:
    """``git_worktree`` as a user reviews it: a write (it adds worktrees) whose paths are
    write-paths relative to the repository; the control leaves ``worktreePath`` unjudged."""
    draft = heuristic_annotation_of("git_worktree")
    roles = {**draft["args"], "path": ["write-path"], "worktreePath": ["write-path"]}
    roles["newPath"] = ["write-path"]
    relative = {"worktreePath": "path", "newPath": "path"}
    if not judged:
        roles["worktreePath"], relative = ["none"], {"newPath": "path"}
    return {"git_worktree": {"effect": "write", "args": roles, "relativeTo": relative}}


def _world(user: Home) -> tuple[Path, Path]:
    """A repository ``proj`` in the workspace with a link ``up`` to the directory above
    the workspace; that directory's ``outside``, which the agent must not write."""
    ws = user.ws()
    proj = ws / "proj"
    git = ["git", "-C", str(proj), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "init", "-q", str(proj)], check=True)
    (proj / "README.md").write_text("the project\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "first"], check=True)
    (proj / "up").symlink_to(user.root)
    outside = user.root / "outside"
    outside.mkdir()
    subprocess.run(["chmod", "-R", "a+rwX", str(ws), str(outside)], check=True)
    return proj, outside


def _add(user: Home, judged: bool, worktree: str) -> tuple[tuple[bool, str], list[str]]:
    """One session's ``git_worktree add`` of ``worktree`` in the world's repository: its
    answer, and the policy's decisions the audit log records."""
    proj = user.ws() / "proj"
    policy = write_design_policy(user.root / "policy", str(user.ws()), _worktree(judged))
    config = write_git_config(user.root / "git.json")
    audit = user.root / "audit.jsonl"
    args = [*run_args(config, policy, user.ws(), audit), "--approval", "deny"]
    call = {"path": str(proj), "mode": "add", "worktreePath": worktree, "detach": True}
    out = session_calls(user, args, [("git__git_worktree", call)])
    return out[0], [e["policy"]["decision"] for e in audit_entries(audit) if "policy" in e]


@pytest.mark.parametrize("how", ["link", "dot-dot", "absolute"])
def test_a_worktree_added_outside_through_a_relative_path_is_not_allowed(
    user: Home, how: str
) -> None:
    _, outside = _world(user)
    value = {
        "link": "up/outside/wt",
        "dot-dot": "../../outside/wt",
        "absolute": str(outside / "wt"),
    }[how]
    answer, decisions = _add(user, True, value)
    assert answer[0] is True and answer[1].startswith("ESCALATION REQUIRED"), answer
    assert decisions == ["escalate"], decisions
    assert os.listdir(outside) == []


def test_control_unjudged_the_same_call_is_allowed_and_only_the_sandbox_stops_it(
    user: Home,
) -> None:
    _, outside = _world(user)
    answer, decisions = _add(user, False, "up/outside/wt")
    assert decisions == ["allow"], decisions
    assert answer[0] is True, answer  # git failed: the sandbox shows no "outside"
    assert os.listdir(outside) == []


def _log(user: Home, judged: bool, file_path: str) -> tuple[tuple[bool, str], list[str]]:
    """One session's ``git_log`` of ``file_path`` in the world's repository, the draft as
    it is (``judged``) or with ``filePath`` none: its answer and the policy's decisions."""
    overrides = {} if judged else {"git_log": _unjudged("git_log", "filePath")}
    policy = write_design_policy(user.root / "policy", str(user.ws()), overrides)
    config = write_git_config(user.root / "git.json")
    audit = user.root / "audit.jsonl"
    args = [*run_args(config, policy, user.ws(), audit), "--approval", "deny"]
    call = {"path": str(user.ws() / "proj"), "filePath": file_path}
    out = session_calls(user, args, [("git__git_log", call)])
    return out[0], [e["policy"]["decision"] for e in audit_entries(audit) if "policy" in e]


def _unjudged(tool: str, arg: str) -> dict[str, Any]:
    draft = heuristic_annotation_of(tool)
    return {"args": {**draft["args"], arg: ["none"]}, "relativeTo": {}}


def test_a_read_through_a_link_in_the_repository_is_judged_where_it_leads(user: Home) -> None:
    _, outside = _world(user)
    (outside / "secret.txt").write_text("SECRET\n")
    answer, decisions = _log(user, True, "up/outside/secret.txt")
    assert decisions == ["escalate"], (decisions, answer)
    assert "SECRET" not in answer[1]


def test_control_an_unjudged_read_through_the_link_is_allowed(user: Home) -> None:
    _, outside = _world(user)
    (outside / "secret.txt").write_text("SECRET\n")
    answer, decisions = _log(user, False, "up/outside/secret.txt")
    assert decisions == ["allow"], (decisions, answer)  # git itself, then the sandbox, refuse
    assert "SECRET" not in answer[1]
