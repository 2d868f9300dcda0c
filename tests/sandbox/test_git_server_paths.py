"""The design's git server (``@cyanheads/git-mcp-server``) through a session, with its
heuristic draft and the design's policy (reads and writes in the workspace allowed,
everything else asked; approvals denied): paths relative to the repository reach git as
the server expects them, a flag stays a flag, and a relative path that leaves the workspace
is judged where git would resolve it."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

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


def _project(ws: Path) -> Path:
    """A repository ``proj`` inside the workspace, one commit: README.md, src/a.py (the
    workspace's own README.md says something else)."""
    proj = ws / "proj"
    (proj / "src").mkdir(parents=True)
    (proj / "README.md").write_text("the project\n")
    (proj / "src" / "a.py").write_text("a = 1\n")
    (ws / "README.md").write_text("the workspace\n")
    git = ["git", "-C", str(proj), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "init", "-q", str(proj)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "first"], check=True)
    # The server runs as another user than the owner (root's sessions drop to nobody).
    subprocess.run(["chmod", "-R", "a+rwX", str(ws)], check=True)
    return proj


def _session(user: Home, overrides: dict[str, dict[str, Any]] | None = None) -> list[str]:
    ws = user.ws()
    config = write_git_config(user.root / "git.json")
    policy = write_design_policy(user.root / "policy", str(ws), overrides)
    return [*run_args(config, policy, ws, user.root / "audit.jsonl"), "--approval", "deny"]


def test_git_show_reads_a_file_of_the_repository_it_names(user: Home) -> None:
    args = _session(user)
    proj = str(_project(user.ws()))
    out = session_calls(
        user,
        args,
        [
            ("git__git_show", {"path": proj, "object": "HEAD", "filePath": "README.md"}),
            ("git__git_show", {"path": proj, "object": "HEAD", "filePath": "src/a.py"}),
            ("git__git_log", {"path": proj, "filePath": "src/a.py"}),
        ],
    )
    assert out[0][0] is False and "the project" in out[0][1], out[0]
    assert out[1][0] is False and "a = 1" in out[1][1], out[1]
    assert out[2][0] is False and "first" in out[2][1], out[2]


def test_git_add_stages_paths_relative_to_the_repository(user: Home) -> None:
    args = _session(user)
    proj = _project(user.ws())
    (proj / "new.txt").write_text("new\n")
    (proj / "-n").write_text("a name like an option\n")
    out = session_calls(
        user,
        args,
        [
            ("git__git_add", {"path": str(proj), "paths": ["new.txt", "-n"]}),
            ("git__git_status", {"path": str(proj)}),
        ],
    )
    assert out[0][0] is False, out[0]
    staged = subprocess.run(
        ["git", "-C", str(proj), "diff", "--cached", "--name-only"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert staged == ["-n", "new.txt"]


def test_an_enum_confirmation_reaches_the_server_as_given(user: Home) -> None:
    # Everything allowed, so that the call reaches the server.
    clear = heuristic_annotation_of("git_clear_working_dir")
    args = _session(user)
    proj = str(_project(user.ws()))
    policy = Path(args[args.index("--policy-dir") + 1])
    compiled = policy / "compiled-policy.json"
    compiled.write_text('{"rules": [{"name": "all", "if": {}, "then": "allow", "reason": "t"}]}')
    out = session_calls(
        user,
        args,
        [
            ("git__git_set_working_dir", {"path": proj}),
            ("git__git_clear_working_dir", {"confirm": "yes"}),
        ],
    )
    assert clear["args"]["confirm"] == ["none"]
    assert out[1][0] is False, out[1]
    assert "/yes" not in out[1][1]


def test_control_the_same_path_made_absolute_is_refused_by_git(user: Home) -> None:
    # Without relativeTo the path is made absolute against the workspace, as before:
    # git looks for <workspace>/README.md inside the commit and finds nothing.
    show = heuristic_annotation_of("git_show")
    args = _session(user, {"git_show": {**show, "relativeTo": {}}})
    proj = str(_project(user.ws()))
    out = session_calls(
        user, args, [("git__git_show", {"path": proj, "object": "HEAD", "filePath": "README.md"})]
    )
    assert out[0][0] is True and "the project" not in out[0][1], out[0]
