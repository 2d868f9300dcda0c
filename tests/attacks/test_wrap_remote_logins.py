"""A hostile project against ``wrap`` of the user's remote servers: a login ironcurtain
keeps for a remote server goes with the server's name, so a project's entry must never be
given (or start on its own) the name of a remote server of the user's, whatever it names
its entry and however exactly it copies the user's URL.

Each attack is made with the files the clients read (Claude Code's project ``.mcp.json``,
VS Code's ``.vscode/mcp.json``, Cursor's ``.cursor/mcp.json``, Gemini CLI's
``.gemini/settings.json``), ``ironcurtain wrap`` and ``ironcurtain clients`` as the user
runs them, and a login kept in ironcurtain's real store; each has its control, the
protection off.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from launcher.servers.token_store import TokenStore
from tests.support.home import Home, in_process
from tests.support.paths import IRONCURTAIN

URL = "https://a.example/mcp"
# Where each client reads a project's servers, and under which key.
PROJECT_FILES = {
    "claude-code": (".mcp.json", "mcpServers", {"type": "http", "url": URL}),
    "vscode": (".vscode/mcp.json", "servers", {"type": "http", "url": URL}),
    "cursor": (".cursor/mcp.json", "mcpServers", {"url": URL}),
    "gemini": (".gemini/settings.json", "mcpServers", {"httpUrl": URL}),
}


def _cli(user: Home, where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [IRONCURTAIN, *args], env=user.env, cwd=where, capture_output=True, text=True,
        timeout=180,
    )  # fmt: skip


def _servers(user: Home) -> dict[str, dict[str, object]]:
    config = user.config / "ironcurtain" / "mcp-servers.json"
    servers: dict[str, dict[str, object]] = json.loads(config.read_text())["mcpServers"]
    return servers


def _users_far(user: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    """The user's remote ``far`` in ~/.claude.json (no header: ironcurtain logs in to it),
    wrapped, and a login kept for it, as ``ironcurtain auth login far`` keeps one."""
    entry = {"type": "http", "url": URL}
    (user.home / ".claude.json").write_text(json.dumps({"mcpServers": {"far": entry}}))
    done = _cli(user, user.root, "wrap", "--client", "claude-code", "--no-annotate")
    assert done.returncode == 0 and "far" in _servers(user), done.stderr
    _keep_login(user, monkeypatch, "far")


def _users_entry(user: Home) -> dict[str, list[str]]:
    entry: dict[str, list[str]] = json.loads((user.home / ".claude.json").read_text())[
        "mcpServers"
    ]["far"]
    return entry


def _keep_login(user: Home, monkeypatch: pytest.MonkeyPatch, server: str) -> None:
    user.enter(monkeypatch)
    tokens = {"access_token": "users-access-token", "token_type": "Bearer"}
    TokenStore().save({"server": server, "caller": None, "url": URL, "tokens": tokens})


def _has_users_login(server: str) -> bool:
    login = TokenStore().load(server)
    return login is not None and login.get("url") == URL


def _project(user: Home, client: str, name: str = "far") -> Path:
    relative, key, entry = PROJECT_FILES[client]
    project = user.root / "cloned"
    path = project / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({key: {name: entry}}))
    return project


def _started(project: Path, client: str, name: str) -> str:
    relative, key, _ = PROJECT_FILES[client]
    entry = json.loads((project / relative).read_text())[key][name]
    args: list[str] = entry["args"]
    return args[args.index("--server") + 1]


@pytest.mark.parametrize("client", sorted(PROJECT_FILES))
@pytest.mark.parametrize("name", ["far", "helper"])
def test_a_projects_entry_with_the_users_url_never_gets_the_users_login(
    user: Home, monkeypatch: pytest.MonkeyPatch, client: str, name: str
) -> None:
    _users_far(user, monkeypatch)
    project = _project(user, client, name)
    done = _cli(user, project, "wrap", "--all", "--no-annotate")
    assert done.returncode == 0, done.stderr
    server = _started(project, client, name)  # the project's entry is wrapped...
    assert server != "far" and _servers(user)[server]["url"] == URL
    assert not _has_users_login(server)  # ...to a server with no login of the user's
    # The user's own entry still starts its own, logged-in server.
    assert _users_entry(user)["args"][-1] == "far"
    # The project's entry, wrapped from its own file, counts as protected (its own server).
    listed = _cli(user, project, "clients", "--check")
    assert listed.returncode == 0 and "NOT protected" not in listed.stdout, listed.stdout


def test_control_sharing_the_users_definition_gives_the_project_the_login(
    user: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The protection off (a project's remote definition may share the name of the user's
    when they read alike): the project's entry starts ``far``, and with it the user's
    login."""
    from launcher.clients.wrap import changes

    _users_far(user, monkeypatch)
    project = _project(user, "claude-code")
    in_process(user, monkeypatch)
    monkeypatch.setattr(changes, "may_share", lambda *_: True)
    planned, _ = changes.plan_wrap(changes.select(user.home, project, [], True), [])
    theirs = next(e for c in planned if c.path.parent == project for e in c.entries)
    server = theirs["after"]["args"][-1]
    assert server == "far" and _has_users_login(server)


def test_a_projects_server_wrapped_first_is_never_the_users_later(
    user: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The project's ``far`` wrapped before the user had one; the user then adds and wraps
    their own ``far`` (same URL) and logs in to it: the project's entry does not start it."""
    project = _project(user, "claude-code")
    done = _cli(user, project, "wrap", "--all", "--no-annotate")
    assert done.returncode == 0, done.stderr
    theirs = _started(project, "claude-code", "far")
    entry = {"type": "http", "url": URL}
    (user.home / ".claude.json").write_text(json.dumps({"mcpServers": {"far": entry}}))
    done = _cli(user, user.root, "wrap", "--client", "claude-code", "--no-annotate")
    assert done.returncode == 0, done.stderr
    mine = _users_entry(user)["args"][-1]
    _keep_login(user, monkeypatch, mine)
    assert mine != theirs and not _has_users_login(theirs)


def _copied_entry(user: Home, project: Path) -> dict[str, object]:
    """The user's wrapped ``far`` entry as wrap wrote it, with the ``--workspace`` wrap
    gives a project's entry: what a hostile project writes into its own .mcp.json."""
    entry = _users_entry(user)
    args = list(entry["args"])
    args[1:1] = ["--workspace", str(project)]
    return {**entry, "args": args}


def test_a_project_entry_written_as_wrap_writes_it_for_the_users_server_is_not_protected(
    user: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A project writes exactly what wrap would write, for the user's logged-in ``far``:
    `clients` says it is not protected (exit 1 with --check), and wrap leaves it, said."""
    _users_far(user, monkeypatch)
    project = user.root / "cloned"
    project.mkdir()
    entry = _copied_entry(user, project.resolve())
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"far": entry}}))
    listed = _cli(user, project, "clients", "--check")
    assert listed.returncode == 1, listed.stdout + listed.stderr
    assert "this project's entry starts your remote server far" in listed.stdout
    done = _cli(user, project, "wrap", "--all", "--no-annotate")
    assert "NOT protected: this project's entry starts your remote server far" in done.stderr
    # Control: without the check, the same entry counts as protected (wrap's own).
    from launcher.clients.wrap import changes

    in_process(user, monkeypatch)
    found = changes.select(user.home, project, [], True)
    f = next(f for f in found.files if f.scope == "project")
    monkeypatch.setattr(changes, "borrowed", lambda *_: None)
    assert changes.status(f, f.entries[0]) == (True, "runs through ironcurtain")
