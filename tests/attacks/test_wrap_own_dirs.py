"""A wrapped user-level server works on what its entry names: the directories the user's own
filesystem entry names, and the repository of a git entry, are that server's workspace for
the policy (reads and writes there allowed as in the session's workspace), and ``wrap`` says
so per server. Before, both were denied (``deny-read-elsewhere``) while wrap said the
directory was "writable in its sandbox".

Driven as the client would: the entry wrap wrote is started and called with the MCP SDK.
As the agent, the grant stops at the directory (``/etc/passwd``, a sibling directory, a
``..`` out of it stay denied); as a hostile project, an entry naming the home, ``/``,
``~/.ssh``, a link to the home, ``..`` or a directory holding ironcurtain's configuration
gets no workspace; each with its control."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from tests.support.home import Home, git_repo
from tests.support.marks import needs_bwrap
from tests.support.paths import BIN, IRONCURTAIN
from tests.support.sdk import call

FS = os.path.join(BIN, "mcp-server-filesystem")
GIT = os.path.join(BIN, "mcp-server-git")


def _cli(user: Home, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [IRONCURTAIN, *args], env=user.env, cwd=cwd, capture_output=True, text=True,
        stdin=subprocess.DEVNULL, timeout=600,
    )  # fmt: skip


def _definitions(user: Home) -> dict[str, Any]:
    path = user.config / "ironcurtain" / "mcp-servers.json"
    return json.loads(path.read_text())["mcpServers"]  # type: ignore[no-any-return]


def _workspace(user: Home, name: str) -> list[str]:
    fs = _definitions(user)[name].get("sandbox", {}).get("filesystem", {})
    return list(fs.get("workspace", []))


def _calls(
    user: Home, entry: dict[str, Any], calls: list[tuple[str, dict[str, Any]]]
) -> list[tuple[bool, str]]:
    """Start ``entry`` (what wrap wrote into the client's file) and make each call."""
    out: list[tuple[bool, str]] = []

    async def scenario() -> None:
        params = StdioServerParameters(
            command=entry["command"], args=entry["args"], env={**user.env, **entry.get("env", {})},
            cwd=str(user.root),
        )  # fmt: skip
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            for tool, arguments in calls:
                out.append(await call(session, tool, arguments))

    asyncio.run(scenario())
    return out


def _wrap_user_entries(user: Home, servers: dict[str, Any]) -> dict[str, Any]:
    """Wrap the user's own Claude Code entries; the entries wrap wrote."""
    (user.home / ".claude.json").write_text(json.dumps({"mcpServers": servers}))
    done = _cli(user, user.root, "wrap", "--client", "claude-code")
    assert done.returncode == 0, done.stderr
    entries: dict[str, Any] = json.loads((user.home / ".claude.json").read_text())["mcpServers"]
    entries["said"] = done.stderr
    return entries


def _project(user: Home) -> Path:
    project = user.root / "project"
    project.mkdir()
    (project / "notes.txt").write_text("my notes\n")
    (user.root / "sibling").mkdir()
    (user.root / "sibling" / "secret.txt").write_text("sibling secret\n")
    (project / "escape").symlink_to(user.home)  # a link out, as a cloned project may hold
    return project


@needs_bwrap
def test_a_user_level_filesystem_server_works_in_its_own_directory_and_nowhere_else(
    user: Home,
) -> None:
    project = _project(user)
    entries = _wrap_user_entries(user, {"files": {"command": FS, "args": [str(project)]}})
    real = os.path.realpath(project)
    assert _workspace(user, "files") == [real]
    assert (
        f"files: its workspace: {real} (writable in its sandbox; the policy allows"
        in (entries["said"])
    )
    out = _calls(
        user,
        entries["files"],
        [
            ("read_text_file", {"path": f"{project}/notes.txt"}),
            ("write_file", {"path": f"{project}/new.txt", "content": "written"}),
            ("read_text_file", {"path": "/etc/passwd"}),
            ("read_text_file", {"path": f"{user.root}/sibling/secret.txt"}),
            ("read_text_file", {"path": f"{project}/../sibling/secret.txt"}),
            ("write_file", {"path": f"{user.root}/sibling/planted.txt", "content": "x"}),
            ("read_text_file", {"path": f"{user.home}/.ssh/id_rsa"}),
            ("read_text_file", {"path": f"{project}/escape/.ssh/id_rsa"}),
            ("write_file", {"path": f"{project}/escape/planted.txt", "content": "x"}),
        ],
    )
    assert out[0] == (False, "my notes\n"), out[0]
    assert out[1][0] is False and (project / "new.txt").read_text() == "written", out[1]
    for denied in out[2:]:
        assert denied[0] and denied[1].startswith(("DENIED", "ESCALATION")), denied
    assert "sibling secret" not in json.dumps(out) and user.secret not in json.dumps(out)
    assert not (user.root / "sibling" / "planted.txt").exists()
    assert not (user.home / "planted.txt").exists()


@needs_bwrap
def test_control_without_its_workspace_the_same_server_is_denied_its_directory(
    user: Home,
) -> None:
    # What wrap wrote before: the directory writable in the sandbox, no workspace for the
    # policy. The same read is denied by the bundled policy's rule.
    project = _project(user)
    entries = _wrap_user_entries(user, {"files": {"command": FS, "args": [str(project)]}})
    config = user.config / "ironcurtain" / "mcp-servers.json"
    data = json.loads(config.read_text())
    del data["mcpServers"]["files"]["sandbox"]["filesystem"]["workspace"]
    config.write_text(json.dumps(data))
    out = _calls(user, entries["files"], [("read_text_file", {"path": f"{project}/notes.txt"})])
    assert out[0][0] and "deny-read-elsewhere" in out[0][1], out


@needs_bwrap
def test_a_user_level_git_server_works_on_its_repository(user: Home) -> None:
    repo = user.root / "repo"
    git_repo(repo)
    other = user.root / "other"
    git_repo(other)
    entries = _wrap_user_entries(
        user, {"git": {"command": GIT, "args": ["--repository", str(repo)]}}
    )
    assert _workspace(user, "git") == [os.path.realpath(repo)]
    out = _calls(
        user,
        entries["git"],
        [("git_status", {"repo_path": str(repo)}), ("git_status", {"repo_path": str(other)})],
    )
    assert out[0][0] is False and "README.md" in out[0][1], out[0]
    assert out[1][0] and out[1][1].startswith("DENIED"), out[1]


# A hostile project's .mcp.json names these: (argument, the place it would be granted). The
# project is ~/proj: `..` is the home, `../..` holds it.
HOSTILE: dict[str, Callable[[Home], Path]] = {
    "~": lambda u: u.home,
    "/": lambda u: Path("/"),
    "~/.ssh": lambda u: u.home / ".ssh",
    "./home-link": lambda u: u.home,
    "./cfg-link": lambda u: u.config,
    "..": lambda u: u.home,
    "../..": lambda u: u.root,
    # Catalogue entries: what git and the editor load from the project.
    "./.git": lambda u: u.home / "proj" / ".git",
    "./.vscode": lambda u: u.home / "proj" / ".vscode",
    "./.git/hooks": lambda u: u.home / "proj" / ".git" / "hooks",
}


def _hostile_project(user: Home, arg: str) -> Path:
    project = user.home / "proj"
    (project / "data").mkdir(parents=True)
    git_repo(project)
    (project / ".vscode").mkdir()
    (project / "home-link").symlink_to(user.home)
    (user.config / "ironcurtain").mkdir(parents=True)
    (project / "cfg-link").symlink_to(user.config)  # holds ironcurtain's configuration
    entry = {"command": FS, "args": [arg, "./data"]}
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"s": entry}}))
    return project


@pytest.mark.parametrize("scope", ["project", "user"])
@pytest.mark.parametrize("arg", list(HOSTILE))
def test_an_entry_never_makes_wrap_grant_a_home_its_holders_or_ironcurtains_places(
    user: Home, arg: str, scope: str
) -> None:
    project = _hostile_project(user, arg)
    if scope == "user":  # the same arguments in the user's own file, absolute
        named = arg if arg.startswith(("/", "~")) else str(project / arg)
        servers = {"s": {"command": FS, "args": [named, str(project / "data")]}}
        (user.home / ".claude.json").write_text(json.dumps({"mcpServers": servers}))
        (project / ".mcp.json").unlink()
    done = _cli(user, project, "wrap", "--client", "claude-code", "--no-annotate")
    assert done.returncode == 0, done.stderr
    assert "not given to its sandbox" in done.stderr, done.stderr
    target = os.path.realpath(HOSTILE[arg](user))
    fs = _definitions(user)["s"].get("sandbox", {}).get("filesystem", {})
    granted = [*fs.get("workspace", []), *fs.get("allowWrite", [])]
    assert not any(Path(target).is_relative_to(g) for g in granted), granted
    # The control: the project's own data directory is granted (the workspace of the user's
    # own entry; a project's entry has the project for its workspace).
    data = os.path.realpath(project / "data")
    assert data in fs.get("allowWrite", [])
    assert (data in fs.get("workspace", [])) == (scope == "user")


@needs_bwrap
@pytest.mark.parametrize("swapped", [True, False], ids=["link-to-ssh", "control"])
def test_a_directory_swapped_for_a_link_after_wrap_grants_nothing(
    user: Home, swapped: bool
) -> None:
    # The directory the user's entry named is replaced, after wrap, by a link to ~/.ssh:
    # the server's workspace (and writable root) would follow it to the keys.
    project = _project(user)
    entries = _wrap_user_entries(user, {"files": {"command": FS, "args": [str(project)]}})
    if swapped:
        project.rename(user.root / "moved-away")
        project.symlink_to(user.home / ".ssh")
    entry = entries["files"]
    done = subprocess.run(
        [entry["command"], *entry["args"]], env=user.env, cwd=user.root, capture_output=True,
        text=True, stdin=subprocess.DEVNULL, timeout=120,
    )  # fmt: skip
    if swapped:
        assert done.returncode == 2, done.stderr
        assert f"{project} is a link to {user.home / '.ssh'}" in done.stderr, done.stderr
    else:
        assert done.returncode == 0, done.stderr
    assert user.secret not in done.stdout + done.stderr
