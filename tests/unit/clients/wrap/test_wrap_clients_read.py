"""The clients as their current versions read: Kiro fills ``${VAR}`` in an entry's env and
Copilot CLI ``$VAR``/``${VAR}``/``${VAR:-default}`` (both only there), so such entries are
wrapped and the wrapped entries count as protected; a project's ``.mcp.json`` is read by
Claude Code and Copilot CLI both, and an entry is wrapped only where both read it alike; a
file that cannot be read is listed (with the servers ironcurtain sees in it) and stops
nothing else; an entry that could never start in a sandbox is left alone with the reason;
one name defined differently in two clients is wrapped in both. Each run through the real
command, beside its control."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.support.home import Home
from tests.support.paths import IRONCURTAIN

ENV = "/usr/bin/env"


def _cli(user: Home, project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [IRONCURTAIN, *args], env=user.env, cwd=project, capture_output=True, text=True,
        stdin=subprocess.DEVNULL, timeout=120,
    )  # fmt: skip


def _write(path: Path, data: object) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path.read_bytes()


def _project(user: Home) -> Path:
    project = user.root / "proj"
    project.mkdir(exist_ok=True)
    return project


def _config(user: Home) -> dict[str, dict[str, object]]:
    path = user.config / "ironcurtain" / "mcp-servers.json"
    return json.loads(path.read_text())["mcpServers"]  # type: ignore[no-any-return]


def _lines(listed: subprocess.CompletedProcess[str]) -> dict[str, str]:
    return {x.split()[0]: x for x in listed.stdout.splitlines() if x.startswith("  ")}


def test_kiros_env_variables_are_wrapped_and_then_count_as_protected(user: Home) -> None:
    project = _project(user)
    env = {"GITHUB_TOKEN": "${GITHUB_TOKEN}", "TZ_HINT": "${KIRO_TZ}"}
    path = user.home / ".kiro" / "settings" / "mcp.json"
    before = _write(path, {"mcpServers": {
        "clock": {"command": ENV, "args": ["true"], "env": env},
        # The control: Kiro fills only env values; in args the text stays text, which
        # ironcurtain's config cannot hold.
        "literal": {"command": ENV, "args": ["${KIRO_TZ}"]},
    }})  # fmt: skip
    done = _cli(user, project, "wrap", "--client", "kiro", "--no-annotate")
    assert done.returncode == 0, done.stderr
    assert _config(user)["clock"]["env"] == env
    assert json.loads(path.read_text())["mcpServers"]["clock"]["env"] == {
        "GITHUB_TOKEN": "${GITHUB_TOKEN}"
    }
    assert "literal: '${KIRO_TZ}': Kiro passes '${KIRO_TZ}'" in done.stderr, done.stderr
    lines = _lines(_cli(user, project, "clients"))
    assert "runs through ironcurtain" in lines["clock"], lines
    assert "NOT protected" not in lines["clock"]
    assert _cli(user, project, "unwrap", "--client", "kiro").returncode == 0
    assert path.read_bytes() == before


def test_copilot_clis_project_file_and_its_dollar_variables(user: Home) -> None:
    project = _project(user)
    env = {"LOG": "$COPILOT_LOG", "LEVEL": "${LEVEL:-info}", "NAME": "plain"}
    path = project / ".github" / "mcp.json"
    _write(path, {"mcpServers": {"s": {"type": "local", "command": ENV, "args": ["$HOME"],
                                       "tools": ["*"], "env": env}}})  # fmt: skip
    listed = _cli(user, project, "clients")
    assert f"GitHub Copilot CLI (project): {path}" in listed.stdout, listed.stdout
    done = _cli(user, project, "wrap", "--client", "copilot-cli", "--no-annotate")
    assert done.returncode == 0, done.stderr
    moved = _config(user)["s"]
    assert moved["env"] == {"LOG": "${COPILOT_LOG}", "LEVEL": "${LEVEL:-info}", "NAME": "plain"}
    assert moved["args"] == ["$HOME"]  # its args are taken as written
    assert "receives COPILOT_LOG, LEVEL from the environment" in done.stderr, done.stderr
    assert "runs through ironcurtain" in _lines(_cli(user, project, "clients"))["s"]


def test_a_file_two_clients_read_is_wrapped_only_where_both_read_an_entry_alike(
    user: Home,
) -> None:
    project = _project(user)
    path = project / ".mcp.json"
    before = _write(path, {"mcpServers": {
        "alike": {"command": ENV, "args": ["true"], "env": {"API_TOKEN": "${API_TOKEN}"}},
        # Claude Code passes "$MODE" as that text; Copilot CLI fills it.
        "unlike": {"command": ENV, "args": ["true"], "env": {"MODE": "$MODE"}},
    }})  # fmt: skip
    listed = _cli(user, project, "clients")
    assert f"Claude Code, GitHub Copilot CLI (project): {path}" in listed.stdout
    done = _cli(user, project, "wrap", "--client", "copilot-cli", "--no-annotate")
    assert done.returncode == 0, done.stderr
    assert "unlike: Claude Code and GitHub Copilot CLI both read" in done.stderr, done.stderr
    entries = json.loads(path.read_text())["mcpServers"]
    assert entries["alike"]["command"] == IRONCURTAIN
    assert entries["unlike"]["command"] == ENV
    lines = _lines(_cli(user, project, "clients"))
    assert "runs through ironcurtain" in lines["alike"], lines
    assert _cli(user, project, "unwrap", "--all").returncode == 0
    assert path.read_bytes() == before


def test_a_file_that_cannot_be_read_is_listed_and_stops_nothing_else(user: Home) -> None:
    project = _project(user)
    gemini = user.home / ".gemini" / "settings.json"
    _write(gemini, {"mcpServers": {"gclock": {"command": ENV, "args": ["true"]}}})
    broken = user.home / ".cursor" / "mcp.json"
    broken.parent.mkdir(parents=True)
    broken.write_text('{"mcpServers": {"x": ')
    # opencode fills {file:...} into its text before it parses it: one holding a comment
    # mark could read differently, so the file is not read, its servers named.
    opencode = user.home / ".config" / "opencode" / "opencode.json"
    _write(opencode, {"mcp": {"oc": {"type": "local", "command": [ENV, "{file:/a//b}"]}}})
    done = _cli(user, project, "wrap", "--all", "--no-annotate")
    assert done.returncode == 0, done.stderr
    assert f"Cursor: {broken}: line 1" in done.stderr and "(not wrapped)" in done.stderr
    assert "its servers, as ironcurtain reads the file: oc; none wrapped" in done.stderr
    assert json.loads(gemini.read_text())["mcpServers"]["gclock"]["command"] == IRONCURTAIN
    listed = _cli(user, project, "clients", "--check")
    assert listed.returncode == 1 and f"Cursor: {broken}: line 1" in listed.stdout, listed.stdout
    # The control: naming only the client whose file cannot be read is an error.
    named = _cli(user, project, "wrap", "--client", "cursor", "--no-annotate")
    assert named.returncode == 2 and f"{broken}: line 1" in named.stderr, named.stderr


def test_a_continue_secret_stops_nothing_else(user: Home) -> None:
    project = _project(user)
    continue_file = user.home / ".continue" / "config.yaml"
    continue_file.parent.mkdir(parents=True)
    continue_file.write_text(
        "name: mine\nversion: 1.0.0\nschema: v1\nmcpServers:\n"
        '  - name: gh\n    command: /usr/bin/env\n    args: ["true"]\n'
        "    env:\n      GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}\n"
        '  - name: clock\n    command: /usr/bin/env\n    args: ["true"]\n'
    )
    before = continue_file.read_bytes()
    gemini = user.home / ".gemini" / "settings.json"
    _write(gemini, {"mcpServers": {"gclock": {"command": ENV, "args": ["true"]}}})
    done = _cli(user, project, "wrap", "--all", "--no-annotate")
    assert done.returncode == 0, done.stderr
    assert "gh: Continue fills its ${{ ... }}" in done.stderr, done.stderr
    assert json.loads(gemini.read_text())["mcpServers"]["gclock"]["command"] == IRONCURTAIN
    listed = _cli(user, project, "clients", "--check")
    lines = _lines(listed)
    assert "runs through ironcurtain" in lines["clock"] and "left alone" in lines["gh"]
    assert "${{ secrets.GITHUB_TOKEN }}" in continue_file.read_text()
    assert listed.returncode == 1
    assert _cli(user, project, "unwrap", "--all").returncode == 0
    assert continue_file.read_bytes() == before


def test_entries_that_could_never_start_in_a_sandbox_are_left_alone(user: Home) -> None:
    project = _project(user)
    (project / "bin").mkdir()
    (project / "bin" / "server").write_text("#!/bin/sh\nexec true\n")
    (project / "bin" / "server").chmod(0o755)
    (project / "server.js").write_text("// a server\n")
    entries = {
        "boxed": {"command": "docker", "args": ["run", "-i", "--rm", "mcp/time"]},
        "rel": {"command": "./bin/server", "args": []},
        "script": {"command": "node", "args": ["--no-warnings", "./server.js"]},
        "fine": {"command": ENV, "args": ["true"]},
    }
    _write(user.home / ".gemini" / "settings.json", {"mcpServers": entries})
    _write(project / ".mcp.json", {"mcpServers": {f"p-{n}": e for n, e in entries.items()}})
    done = _cli(user, project, "wrap", "--all", "--no-annotate")
    assert done.returncode == 0, done.stderr
    said = done.stderr
    assert "boxed: `docker` starts the server in a container" in said, said
    assert "rel: its command ./bin/server is relative" in said
    assert "script: its script ./server.js is relative" in said
    assert "p-boxed: `docker` starts the server in a container" in said
    moved = _config(user)
    assert set(moved) == {"fine", "p-rel", "p-script", "p-fine"}, moved
    # The control: a project's entry, which its client starts in the project, gets them
    # by their full paths.
    assert moved["p-rel"]["command"] == str(project / "bin" / "server")
    assert moved["p-script"]["args"] == ["--no-warnings", str(project / "server.js")]
    lines = _lines(_cli(user, project, "clients"))
    assert "could never start in a sandbox" in lines["boxed"], lines
    assert "could never start in a sandbox" in lines["rel"]


def test_one_name_defined_differently_in_two_clients_is_wrapped_in_both(user: Home) -> None:
    project = _project(user)
    cursor = user.home / ".cursor" / "mcp.json"
    gemini = user.home / ".gemini" / "settings.json"
    before = {
        cursor: _write(cursor, {"mcpServers": {"fetch": {"command": ENV, "args": ["a"]}}}),
        gemini: _write(gemini, {"mcpServers": {"fetch": {"command": ENV, "args": ["b"]}}}),
    }
    done = _cli(user, project, "wrap", "--all", "--no-annotate")
    assert done.returncode == 0, done.stderr
    moved = _config(user)
    assert moved["fetch"]["args"] == ["a"] and moved["fetch.gemini"]["args"] == ["b"]
    assert "defined there as fetch.gemini" in done.stderr, done.stderr
    assert json.loads(gemini.read_text())["mcpServers"]["fetch"]["args"][-1] == "fetch.gemini"
    listed = _cli(user, project, "clients", "--check")
    assert listed.returncode == 0, listed.stdout
    again = _cli(user, project, "wrap", "--all", "--no-annotate")
    assert "nothing to wrap" in again.stderr and _config(user) == moved
    assert _cli(user, project, "unwrap", "--all").returncode == 0
    assert {p: p.read_bytes() for p in before} == before
