"""``wrap`` moves an entry only as its client starts it: a server Claude Code keeps for a project
("local") gets nothing the project's links lead to; each client's variables keep their
meaning (what the client passed as text never becomes the user's environment); values a
client would turn into text, or that JSON cannot hold, are never passed over; a planted
file stops neither ``clients`` nor ``unwrap``; and ``unwrap`` finds its records with the
home reached by another path."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.support.home import Home
from tests.support.paths import IRONCURTAIN

PY = "/usr/bin/python3"


def _cli(user: Home, cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [IRONCURTAIN, *args], env={**user.env, **env}, cwd=cwd, capture_output=True,
        text=True, stdin=subprocess.DEVNULL, timeout=60,
    )  # fmt: skip


def _config(user: Home) -> dict[str, dict[str, object]]:
    path = user.config / "ironcurtain" / "mcp-servers.json"
    return json.loads(path.read_text())["mcpServers"] if path.exists() else {}


def _binds(user: Home, name: str) -> list[str]:
    config = str(user.config / "ironcurtain" / "mcp-servers.json")
    done = _cli(user, user.root, "profile", "--config", config, name)
    assert done.returncode == 0, done.stderr
    return re.findall(r"--(?:ro-)?bind(?:-try)? (\S+) ", done.stdout)


def test_a_local_entry_is_not_led_out_of_its_project_by_the_projects_links(user: Home) -> None:
    # Two private directories of the home that no catalogue entry names (``~/.aws`` and
    # ``~/.claude`` are refused as writable roots whatever leads to them).
    private, papers = user.home / "private", user.home / "papers"
    for place in (private, papers):
        place.mkdir()
        (place / "credentials").write_text(user.secret)
    project = user.root / "proj"
    (project / "inside").mkdir(parents=True)
    (project / "data").symlink_to(private)  # planted by the repository
    (project / "cl").symlink_to(papers)
    (project / "up").symlink_to(user.home)
    entries = {
        # The user typed ./data meaning the project's directory; the project chose its target.
        "fs": {"command": PY, "args": ["-c", "pass", "./data", "--dir", "cl",
                                       f"{project}/data", "up/private"]},
        "own": {"command": PY, "args": ["-c", "pass", "./inside", str(private)]},  # control
    }  # fmt: skip
    local = {"projects": {str(project): {"mcpServers": entries}}}
    (user.home / ".claude.json").write_text(json.dumps(local, indent=2))
    done = _cli(user, project, "wrap", "--client", "claude-code", "--no-annotate")
    assert done.returncode == 0, done.stderr
    assert "outside the project" in done.stderr and "reached through a link" in done.stderr
    leaked = [
        b for b in _binds(user, "fs") if private.is_relative_to(b) or b.startswith(str(private))
    ]
    leaked += [b for b in _binds(user, "fs") if b.startswith(str(papers))]
    assert leaked == [], leaked
    own = _binds(user, "own")
    assert str(project / "inside") in own  # a directory inside the project is given
    assert str(private) in own  # what the user named outright is theirs to give


def _exact(user: Home, project: Path, name: str) -> list[object]:
    own = user.config / "ironcurtain"
    return ["run", "--workspace", str(project), "--config", str(own / "mcp-servers.json"),
            "--policy-dir", str(own / "policy"), "--server", name]  # fmt: skip


@pytest.mark.parametrize(
    "odd",
    [["--allow-unsandboxed"], None, 7],
    ids=["list", "null", "number"],
)
def test_a_value_a_client_would_turn_into_text_is_not_protected(user: Home, odd: object) -> None:
    project = user.root / "proj"
    (project / ".vscode").mkdir(parents=True)
    exact = _exact(user, project, "s")
    servers = {
        "s": {"type": "stdio", "command": IRONCURTAIN, "args": [exact[0], odd, *exact[1:]]},
        "e": {"type": "stdio", "command": IRONCURTAIN, "args": _exact(user, project, "e"),
              "env": {"X_TOKEN": {"a": odd}}},
        "ok": {"type": "stdio", "command": IRONCURTAIN, "args": _exact(user, project, "ok")},
    }  # fmt: skip
    (project / ".vscode" / "mcp.json").write_text(json.dumps({"servers": servers}))
    done = _cli(user, project, "clients")
    assert done.returncode == 0, done.stderr
    lines = {line.split()[0]: line for line in done.stdout.splitlines() if line.startswith("  ")}
    assert "runs through ironcurtain" in lines["ok"]  # the control: exactly what wrap writes
    assert "NOT protected" in lines["s"] and "not a string" in lines["s"], lines["s"]
    assert "NOT protected" in lines["e"] and "not a string" in lines["e"], lines["e"]


def test_wrap_does_not_move_an_entry_with_a_value_that_is_not_text(user: Home) -> None:
    project = user.root / "proj"
    project.mkdir()
    servers = {
        "a": {"command": PY, "args": ["-c", "pass", ["--x"]]},
        "b": {"command": PY, "args": ["-c", "pass"], "env": {"MODE": 1}},
        "c": {"command": PY, "args": ["-c", "pass"]},  # control
    }
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": servers}))
    done = _cli(user, project, "wrap", "--client", "claude-code", "--no-annotate")
    assert done.returncode == 0, done.stderr
    assert "a: its args hold" in done.stderr and "b: its env MODE is 1" in done.stderr
    assert set(_config(user)) == {"c"}


def _wrap_env(
    user: Home, client: str, where: str, key: str, env: dict[str, str]
) -> tuple[subprocess.CompletedProcess[str], dict[str, object]]:
    project = user.root / "proj"
    (project / where).parent.mkdir(parents=True, exist_ok=True)
    entry = {"command": PY, "args": ["-c", "pass"], "env": env}
    (project / where).write_text(json.dumps({key: {"s": entry}}))
    done = _cli(user, project, "wrap", "--client", client, "--no-annotate")
    return done, _config(user).get("s", {})


@pytest.mark.parametrize(
    ("client", "where", "key"),
    [("vscode", ".vscode/mcp.json", "servers"), ("cursor", ".cursor/mcp.json", "mcpServers"),
     ("zed", ".zed/settings.json", "context_servers")],
)  # fmt: skip
@pytest.mark.parametrize("given", ["${AWS_SECRET_ACCESS_KEY}", "${GITHUB_TOKEN:-x}", "a${HOME}"])
def test_what_a_client_passed_as_text_never_becomes_the_users_environment(
    user: Home, client: str, where: str, key: str, given: str
) -> None:
    # These clients pass ${NAME} to the server as those very characters; ironcurtain run
    # would fill it from the environment the client starts it with: the user's secrets.
    done, moved = _wrap_env(user, client, where, key, {"FOO": given})
    assert done.returncode == 0, done.stderr
    assert moved == {}, moved
    assert "as that very text" in done.stderr and "left alone" in done.stderr
    assert not (user.config / "ironcurtain" / "mcp-servers.json").exists()


@pytest.mark.parametrize(
    ("client", "where", "key", "given", "becomes"),
    [("vscode", ".vscode/mcp.json", "servers", "${env:DB_HOST}", "${DB_HOST}"),
     ("cursor", ".cursor/mcp.json", "mcpServers", "${env:DB_HOST}", "${DB_HOST}"),
     ("vscode", ".vscode/mcp.json", "servers", "${workspaceFolder}/db", "${workspace}/db"),
     ("gemini", ".gemini/settings.json", "mcpServers", "$DB_HOST", "${DB_HOST}"),
     ("claude-code", ".mcp.json", "mcpServers", "${DB_HOST:-h}", "${DB_HOST:-h}"),
     ("zed", ".zed/settings.json", "context_servers", "$DB_HOST", "$DB_HOST")],
)  # fmt: skip
def test_what_a_client_fills_is_filled_the_same_after_wrap(
    user: Home, client: str, where: str, key: str, given: str, becomes: str
) -> None:
    done, moved = _wrap_env(user, client, where, key, {"DB": given})
    assert done.returncode == 0, done.stderr
    assert moved.get("env") == {"DB": becomes}, (moved, done.stderr)
    if "DB_HOST}" in becomes:
        assert "receives DB_HOST" in done.stderr and given in done.stderr


@pytest.mark.parametrize("given", ["${userHome}/x", "${input:token}", "${GITHUB_TOKEN}/x"])
def test_a_user_entry_keeps_its_clients_meaning_too(user: Home, given: str) -> None:
    # The user's own Cursor entry: ${GITHUB_TOKEN} was text to Cursor, ${userHome} and
    # ${input:…} are Cursor's own values: none may become an environment read.
    (user.home / ".cursor").mkdir()
    entry = {"command": PY, "args": ["-c", "pass", given]}
    (user.home / ".cursor" / "mcp.json").write_text(json.dumps({"mcpServers": {"u": entry}}))
    done = _cli(user, user.root, "wrap", "--client", "cursor", "--no-annotate")
    assert done.returncode == 0, done.stderr
    assert "u:" in done.stderr and "left alone" in done.stderr
    assert _config(user) == {}


def test_values_json_cannot_hold_are_refused_before_anything_is_written(user: Home) -> None:
    project = user.root / "proj"
    project.mkdir()
    mine = '{"mcpServers": {"a": {"command": "%s", "args": ["-c", "pass"], "timeout": 1e999}}}'
    (user.home / ".claude.json").write_text(mine % PY)
    planted = (
        '{"mcpServers": {"b": {"command": "%s", "args": ["-c", "pass"], "description": "x\\ud800"},'
        ' "c\\udc00": {"command": "%s", "args": []}, "d": {"command": "%s", "args": []}}}'
    )
    (project / ".mcp.json").write_text(planted % (PY, PY, PY))
    before = {p: p.read_bytes() for p in (user.home / ".claude.json", project / ".mcp.json")}
    done = _cli(user, project, "wrap", "--client", "claude-code", "--no-annotate")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "a: its entry holds a number JSON cannot hold" in done.stderr
    assert "b: its entry holds a lone UTF-16 surrogate" in done.stderr
    assert (user.home / ".claude.json").read_bytes() == before[user.home / ".claude.json"]
    assert set(_config(user)) == {"d"}  # the control beside them is wrapped
    listed = _cli(user, project, "clients")
    assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr


def test_a_planted_huge_number_stops_neither_clients_nor_unwrap(user: Home) -> None:
    project = user.root / "proj"
    project.mkdir()
    mine = {"mcpServers": {"a": {"command": PY, "args": ["-c", "pass"]}}}
    original = json.dumps(mine, indent=2)
    (user.home / ".claude.json").write_text(original)
    assert _cli(user, user.root, "wrap", "--all", "--no-annotate").returncode == 0
    assert (user.home / ".claude.json").read_text() != original
    (project / ".mcp.json").write_text('{"mcpServers": {}, "x": ' + "1" * 5000 + "}")
    listed = _cli(user, project, "clients")
    assert listed.returncode == 0, listed.stderr
    assert "too long to read" in listed.stdout and "Traceback" not in listed.stderr
    undone = _cli(user, project, "unwrap", "--all")
    assert "Traceback" not in undone.stderr
    assert undone.returncode == 2 and ".mcp.json" in undone.stderr  # said
    assert (user.home / ".claude.json").read_text() == original  # and the rest done
    (user.home / ".codex").mkdir()
    (user.home / ".codex" / "config.toml").write_text("[mcp_servers.a]\nx = " + "1" * 5000)
    listed = _cli(user, project, "clients")
    assert "config.toml" in listed.stdout and "Traceback" not in listed.stderr, listed.stderr


def test_unwrap_finds_its_records_with_the_home_reached_by_a_link(user: Home) -> None:
    mine = {"mcpServers": {"a": {"command": PY, "args": ["-c", "pass"]}}}
    original = json.dumps(mine, indent=2)
    (user.home / ".claude.json").write_text(original)
    assert _cli(user, user.root, "wrap", "--client", "claude-code", "--no-annotate").returncode == 0
    link = user.root / "homelink"
    link.symlink_to(user.home)
    other = _cli(user, user.root, "unwrap", "--client", "cursor")
    assert other.returncode == 0 and "records name other files" in other.stderr, other.stderr
    done = _cli(user, user.root, "unwrap", "--client", "claude-code", HOME=str(link))
    assert done.returncode == 0, done.stderr
    assert "restored" in done.stderr, done.stderr
    assert (user.home / ".claude.json").read_text() == original
    assert os.path.islink(link)
