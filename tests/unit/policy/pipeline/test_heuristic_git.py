"""The heuristic draft for a real git server, reviewed against the design's table: reads
allow, writes in the workspace allow, anything that contacts a remote escalates.

The tool list is what ``@cyanheads/git-mcp-server`` 2.15.3 (npm) answered to ``tools/list``
when started over stdio and asked with the MCP python SDK's client; kept here are the parts
the annotator reads (name, description, annotations, input schema)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from policy import schema
from policy.decision import StructuralConfig
from policy.engine import PolicyEngine
from policy.models import CompiledPolicyFile, ToolAnnotationsFile
from policy.pipeline.heuristic import arguments_of, heuristic_annotation, is_flag, validate
from tests.support.paths import TESTS

LISTING = TESTS / "data" / "servers" / "cyanheads-git-mcp-server-2.15.3.json"
TOOLS: dict[str, dict[str, Any]] = {
    t["name"]: t for t in json.loads(LISTING.read_text(encoding="utf-8"))["tools"]
}

R, W, D = ["read-path"], ["write-path"], ["delete-path"]
B, REMOTE, MSG = ["branch-name"], ["git-remote-url"], ["commit-message"]
# tool -> (effect, every argument's roles but ``none``)
EXPECTED: dict[str, tuple[str, dict[str, list[str]]]] = {
    "git_add": ("write", {"path": W, "paths": W}),
    "git_blame": ("read", {"path": R, "filePath": R}),
    "git_branch": ("delete", {"path": D, "branchName": B, "newBranchName": B}),
    "git_changelog_analyze": ("read", {"path": R, "branch": B}),
    "git_checkout": ("write", {"path": W, "paths": W, "target": B}),
    "git_cherry_pick": ("write", {"path": W}),
    "git_clean": ("delete", {"path": D}),
    "git_clear_working_dir": ("delete", {}),
    "git_clone": ("write", {"path": W, "url": REMOTE, "branch": B}),
    "git_commit": ("write", {"path": W, "filesToStage": W, "message": MSG}),
    "git_diff": ("read", {"path": R, "paths": R, "source": B, "target": B}),
    "git_fetch": ("write", {"path": W, "remote": REMOTE}),
    "git_init": ("write", {"path": W, "initialBranch": B}),
    "git_log": ("read", {"path": R, "filePath": R, "branch": B}),
    "git_merge": ("write", {"path": W, "branch": B, "message": MSG}),
    "git_pull": ("write", {"path": W, "remote": REMOTE, "branch": B}),
    "git_push": ("write", {"path": W, "remote": REMOTE, "branch": B, "remoteBranch": B}),
    "git_rebase": ("write", {"path": W, "branch": B}),
    "git_reflog": ("read", {"path": R, "ref": B}),
    "git_remote": ("delete", {"path": D, "url": REMOTE}),
    "git_reset": ("delete", {"path": D, "paths": D, "target": B}),
    "git_set_working_dir": ("write", {"path": W}),
    "git_show": ("read", {"path": R, "filePath": R}),
    "git_stash": ("delete", {"path": D, "stashRef": B, "message": MSG}),
    "git_status": ("read", {"path": R}),
    "git_tag": ("delete", {"path": D, "commit": B, "message": MSG}),
    "git_worktree": ("delete", {"path": D, "worktreePath": D, "newPath": D, "branch": B}),
    "git_wrapup_instructions": ("read", {}),
}
REMOTE_CONTACTING = ("git_fetch", "git_pull", "git_push", "git_clone", "git_remote")


def _draft(name: str) -> dict[str, Any]:
    return heuristic_annotation("git", TOOLS[name])


def test_the_listing_is_the_whole_server() -> None:
    assert sorted(TOOLS) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_draft_matches_the_table(name: str) -> None:
    draft = _draft(name)
    named = {arg: roles for arg, roles in draft["args"].items() if roles != ["none"]}
    assert (draft["effect"], named) == EXPECTED[name]
    assert validate(TOOLS[name], draft) == []


@pytest.mark.parametrize("name", REMOTE_CONTACTING)
def test_an_operation_that_contacts_a_remote_is_never_a_read(name: str) -> None:
    tool = {**TOOLS[name], "annotations": {"readOnlyHint": True}}  # whatever it hints
    draft = heuristic_annotation("git", tool)
    assert draft["effect"] != "read"
    assert REMOTE in draft["args"].values()
    assert ["fetch-url"] not in draft["args"].values()


def test_a_flag_or_an_enum_never_names_a_resource() -> None:
    flags = 0
    for name, tool in TOOLS.items():
        draft = _draft(name)
        for arg, spec in arguments_of(tool).items():
            if is_flag(spec):
                flags += 1
                assert draft["args"][arg] == ["none"], (name, arg)
    assert flags > 60  # confirm, mode, bare, createBranch, noCommit, remote (a boolean)...


# -- the draft under the design's policy, through the engine -----------------------------------


def _engine(workspace: Path, overrides: dict[str, dict[str, Any]] | None = None) -> PolicyEngine:
    drafts = [_draft(name) for name in sorted(TOOLS)]
    for draft in drafts:
        draft.update((overrides or {}).get(draft["toolName"], {}))
    annotations = schema.validate(ToolAnnotationsFile, {"servers": {"git": {"tools": drafts}}})
    ws = str(workspace)
    rules = [
        {
            "name": "reads-in-workspace",
            "if": {"effect": ["read"], "paths": {"roles": ["read-path"], "within": ws}},
            "then": "allow",
            "reason": "reads in the workspace",
        },
        {
            "name": "writes-in-workspace",
            "if": {
                "effect": ["write"],
                "paths": {"roles": ["read-path", "write-path"], "within": ws},
            },
            "then": "allow",
            "reason": "writes in the workspace",
        },
        {"name": "ask", "if": {}, "then": "escalate", "reason": "everything else"},
    ]
    policy = schema.validate(CompiledPolicyFile, {"rules": rules})
    # No domain is allowed: anything that contacts a remote escalates.
    return PolicyEngine(policy, annotations, StructuralConfig(), {"git": []})


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    subprocess.run(
        ["git", "-C", str(ws), "remote", "add", "origin", "https://github.com/me/p.git"],
        check=True,
    )
    return ws


def test_the_design_table_holds_for_the_draft(workspace: Path) -> None:
    engine = _engine(workspace)
    ws = str(workspace)

    def decide(tool: str, **args: object) -> str:
        return engine.decide("git", tool, {"path": ws, **args}, cwd=ws)[0].decision

    assert decide("git_status") == "allow"
    assert decide("git_log", filePath=f"{ws}/a.txt") == "allow"
    assert decide("git_commit", message="m", filesToStage=[f"{ws}/a.txt"]) == "allow"
    assert decide("git_add", paths=[f"{ws}/a.txt"]) == "allow"
    assert decide("git_clean", force=True) == "escalate"
    assert decide("git_clear_working_dir", confirm="yes") == "escalate"
    for tool in ("git_fetch", "git_pull", "git_push"):
        assert decide(tool, remote="origin") == "escalate", tool
        assert decide(tool) == "escalate", tool  # no remote named: git's default
    assert decide("git_clone", url="https://github.com/me/p.git") == "escalate"
    assert decide("git_remote", mode="add", name="o2", url="https://github.com/x/y") == ("escalate")


def test_files_to_stage_outside_the_workspace_is_not_a_write_in_it(workspace: Path) -> None:
    outside = str(workspace.parent / "elsewhere" / "secret.txt")
    args = {"path": str(workspace), "message": "m", "filesToStage": [outside]}
    assert _engine(workspace).decide("git", "git_commit", args)[0].decision == "escalate"
    # Control: with no path role on filesToStage (the old draft) the commit was allowed.
    old = {"git_commit": {"args": {**_draft("git_commit")["args"], "filesToStage": ["none"]}}}
    assert _engine(workspace, old).decide("git", "git_commit", args)[0].decision == "allow"
