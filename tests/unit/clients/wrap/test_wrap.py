"""``ironcurtain clients``, ``wrap`` and ``unwrap`` on the config files of real clients (in
their documented formats, with comments where the format has them): listed, wrapped with
only the entries changed, dry runs writing nothing, idempotent, restored byte for byte, a
file changed in between refused, bad files refused with their place, nothing written.
(Wrapped entries started as their client starts them: ``tests/sandbox/test_wrap_sessions.py``.)"""

from __future__ import annotations

import json
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from launcher.clients.files.jsonc import parse
from tests.support.home import Home
from tests.support.paths import IRONCURTAIN, TESTS

DATA = TESTS / "data" / "clients"


def _cli(user: Home, project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [IRONCURTAIN, *args], env=user.env, cwd=project, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip


def _project(user: Home) -> Path:
    """A project with Claude Code's and VS Code's files, and Zed's; a user-level Claude
    Desktop and Codex file."""
    project = user.root / "proj"
    (project / "project-files").mkdir(parents=True)
    (project / ".vscode").mkdir()
    (project / ".zed").mkdir()
    shutil.copy(DATA / "claude-code.mcp.json", project / ".mcp.json")
    shutil.copy(DATA / "vscode.mcp.json", project / ".vscode" / "mcp.json")
    shutil.copy(DATA / "zed.settings.json", project / ".zed" / "settings.json")
    desktop = user.home / ".config" / "Claude"
    desktop.mkdir(parents=True)
    shutil.copy(DATA / "claude_desktop_config.json", desktop / "claude_desktop_config.json")
    (user.home / ".codex").mkdir()
    shutil.copy(DATA / "codex.config.toml", user.home / ".codex" / "config.toml")
    (project / ".cursor").mkdir()
    shutil.copy(DATA / "cursor.mcp.json", project / ".cursor" / "mcp.json")
    (user.home / ".codeium" / "windsurf").mkdir(parents=True)
    shutil.copy(
        DATA / "windsurf.mcp_config.json", user.home / ".codeium" / "windsurf" / "mcp_config.json"
    )
    (user.home / ".gemini").mkdir()
    shutil.copy(DATA / "gemini.settings.json", user.home / ".gemini" / "settings.json")
    return project


def _snapshot(project: Path, user: Home) -> dict[str, bytes]:
    files = [project / ".mcp.json", project / ".vscode" / "mcp.json",
             project / ".zed" / "settings.json",
             user.home / ".config" / "Claude" / "claude_desktop_config.json",
             user.home / ".codex" / "config.toml", project / ".cursor" / "mcp.json",
             user.home / ".codeium" / "windsurf" / "mcp_config.json",
             user.home / ".gemini" / "settings.json"]  # fmt: skip
    return {str(p): p.read_bytes() for p in files}


def test_clients_lists_every_file_and_server(user: Home) -> None:
    project = _project(user)
    done = _cli(user, project, "clients")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for line in [
        f"Claude Code, GitHub Copilot CLI (project): {project}/.mcp.json",
        "  filesystem  stdio: mcp-server-filesystem ./project-files",
        "  docs        remote: https://example.com/mcp (not protected: `ironcurtain wrap` puts",
        f"VS Code (project): {project}/.vscode/mcp.json",
        "  files   stdio: mcp-server-filesystem ${workspaceFolder}",
        "Zed (project):",
        "  legacy  stdio: mcp-server-time --local-timezone UTC",
        "Claude Desktop (user):",
        "Codex CLI (user):",
        "  clock  stdio: mcp-server-time --local-timezone UTC",
        f"Cursor (project): {project}/.cursor/mcp.json",
        "  notes  stdio: mcp-server-filesystem ${workspaceFolder}",
        "Windsurf (user):",
        "  paris-clock  stdio: mcp-server-time --local-timezone Europe/Paris",
        "Gemini CLI (user):",
        "  gclock  stdio: mcp-server-time",
    ]:
        assert line in out, out


def test_clients_check_fails_while_anything_configured_is_unprotected(user: Home) -> None:
    project = _project(user)
    listed = _cli(user, project, "clients", "--check")
    assert listed.returncode == 1, listed.stderr
    assert "(not protected: `ironcurtain wrap` puts it behind ironcurtain)" in listed.stdout
    assert listed.stdout.rstrip().endswith("servers are NOT protected by ironcurtain")
    assert _cli(user, project, "clients").returncode == 0  # without --check: a listing
    wrapped = _cli(user, project, "wrap", "--all", "--no-annotate")
    assert wrapped.returncode == 0, wrapped.stderr
    after = _cli(user, project, "clients", "--check")
    # Every server now runs through ironcurtain, the two remote ones too.
    assert after.returncode == 0 and "all 12 servers run through" in after.stdout, after.stdout
    # A remote entry whose header its client fills as it connects keeps it failing, named.
    cursor = project / ".cursor" / "mcp.json"
    servers = json.loads(cursor.read_text())
    servers["mcpServers"]["tracker"] = {
        "url": "https://t.example/mcp",
        "headers": {"Authorization": "Bearer ${env:T}"},
    }
    cursor.write_text(json.dumps(servers))
    after = _cli(user, project, "clients", "--check")
    assert after.returncode == 1 and "1 of 13 servers are NOT" in after.stdout, after.stdout
    said = "remote: https://t.example/mcp (not protected: its header 'Authorization'"
    assert said in after.stdout


def test_a_dry_run_shows_the_diff_and_writes_nothing(user: Home) -> None:
    project = _project(user)
    before = _snapshot(project, user)
    done = _cli(user, project, "wrap", "--client", "claude-code", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert '-      "command": "mcp-server-filesystem",' in done.stdout
    assert '+        "--server",' in done.stdout and '+        "filesystem"' in done.stdout
    assert _snapshot(project, user) == before
    assert not (user.config / "ironcurtain").exists()


def test_wrap_changes_only_the_entries_and_is_idempotent(user: Home) -> None:
    project = _project(user)
    before = _snapshot(project, user)
    done = _cli(user, project, "wrap", "--client", "claude-code", "--client", "vscode",
                "--client", "zed", "--no-annotate")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "docs: remote, reached by ironcurtain: https://example.com/mcp" in done.stderr

    # Claude Code: each stdio entry now starts ironcurtain for that one server.
    mcp = json.loads((project / ".mcp.json").read_text())["mcpServers"]
    git = mcp["git"]
    assert git["command"].endswith("ironcurtain") and git["args"][0] == "run"
    assert git["args"][-2:] == ["--server", "git"]
    assert git["env"] == {"GITHUB_TOKEN": "ghp_not-a-real-token"}  # the secret stays here
    # The remote entry too: ironcurtain reaches its URL, the client starts ironcurtain.
    assert mcp["docs"]["type"] == "stdio" and mcp["docs"]["args"][-2:] == ["--server", "docs"]

    # The definitions moved, directories resolved and made writable, secrets referred to.
    config = json.loads((user.config / "ironcurtain" / "mcp-servers.json").read_text())
    moved = config["mcpServers"]
    assert moved["git"]["args"] == ["--repository", str(project)]
    assert moved["git"]["env"] == {
        "GIT_AUTHOR_NAME": "Ada",
        "GITHUB_TOKEN": "${GITHUB_TOKEN}",
        # As root, the server runs as another uid: git must not refuse the repository.
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "safe.directory",
        "GIT_CONFIG_VALUE_0": "*",
    }
    assert moved["git"]["sandbox"]["filesystem"]["allowWrite"] == [str(project)]
    assert moved["filesystem"]["args"] == [str(project / "project-files")]
    # VS Code's own variable: ${workspace} in the definition, the folder given by the client.
    assert moved["files"]["args"] == ["${workspace}"]
    files = parse((project / ".vscode" / "mcp.json").read_text()).value["servers"]["files"]
    assert files["args"][1:3] == ["--workspace", "${workspaceFolder}"]
    assert files["type"] == "stdio"
    # Zed, both forms.
    zed = parse((project / ".zed" / "settings.json").read_text()).value["context_servers"]
    assert zed["time"]["source"] == "custom" and zed["time"]["args"][-1] == "time"
    assert zed["legacy"]["command"]["args"][-1] == "legacy"

    # Comments and everything around the entries are as they were.
    vscode = (project / ".vscode" / "mcp.json").read_text()
    assert vscode.startswith(before[str(project / ".vscode" / "mcp.json")].decode()[:120])
    assert "/* the files of the project */" in vscode
    remote = parse(vscode).value["servers"]["remote"]
    assert remote["type"] == "stdio" and remote["args"][-2:] == ["--server", "remote"]
    assert moved["remote"]["url"] == "https://api.example.com/mcp"
    assert (project / ".zed" / "settings.json").read_text().startswith("// Zed settings\n")
    # Files of clients not named are untouched.
    after = _snapshot(project, user)
    desktop = str(user.home / ".config" / "Claude" / "claude_desktop_config.json")
    assert after[desktop] == before[desktop]

    again = _cli(user, project, "wrap", "--client", "claude-code", "--client", "vscode",
                 "--client", "zed", "--no-annotate")  # fmt: skip
    assert again.returncode == 0 and "nothing to wrap" in again.stderr
    assert _snapshot(project, user) == after


def test_a_codex_toml_file_is_wrapped_with_its_comments_kept(user: Home) -> None:
    project = _project(user)
    codex = user.home / ".codex" / "config.toml"
    before = codex.read_text()
    done = _cli(user, project, "wrap", "--client", "codex", "--no-annotate")
    assert done.returncode == 0, done.stderr
    text = codex.read_text()
    wrapped = tomllib.loads(text)["mcp_servers"]["clock"]
    assert wrapped["command"].endswith("ironcurtain")
    assert wrapped["args"][-2:] == ["--server", "clock"]
    assert wrapped["env"] == {"CLOCK_API_TOKEN": "not-a-real-token"}  # the secret stays
    assert wrapped["startup_timeout_ms"] == 20000  # the entry's other keys stay
    # Everything but the entry's command, args and env is byte for byte as it was.
    assert text.startswith('# Codex CLI\nmodel = "o4-mini"\n\n# The time server')
    config = json.loads((user.config / "ironcurtain" / "mcp-servers.json").read_text())
    moved = config["mcpServers"]["clock"]
    assert moved["args"] == ["--local-timezone", "UTC"]
    assert moved["env"] == {"TZ": "UTC", "CLOCK_API_TOKEN": "${CLOCK_API_TOKEN}"}
    again = _cli(user, project, "wrap", "--client", "codex", "--no-annotate")
    assert again.returncode == 0 and "nothing to wrap" in again.stderr
    assert _cli(user, project, "unwrap", "--client", "codex").returncode == 0
    assert codex.read_text() == before


def test_claude_code_servers_of_one_project_in_the_user_file_are_wrapped(user: Home) -> None:
    # `claude mcp add` keeps a project's servers ("local" scope) in ~/.claude.json, under
    # projects.<root>.mcpServers, beside the user's own (top-level mcpServers).
    project = user.root / "proj"
    (project / "notes").mkdir(parents=True)
    other = user.root / "other"
    other.mkdir()
    claude = user.home / ".claude.json"
    original = json.dumps(
        {
            "numStartups": 3,
            "mcpServers": {"clock": {"type": "stdio", "command": "mcp-server-time", "args": []}},
            "projects": {
                str(project): {
                    "allowedTools": [],
                    "mcpServers": {
                        "notes": {
                            "type": "stdio",
                            "command": "mcp-server-filesystem",
                            "args": [str(project / "notes")],
                            "env": {},
                        }
                    },
                },
                str(other): {"allowedTools": [], "mcpServers": {}},
            },
        },
        indent=2,
    )
    claude.write_text(original)
    listed = _cli(user, project, "clients")
    assert f"Claude Code (local: {project}): {claude}" in listed.stdout, listed.stdout
    done = _cli(user, project, "wrap", "--client", "claude-code", "--no-annotate")
    assert done.returncode == 0, done.stderr
    data = json.loads(claude.read_text())
    notes = data["projects"][str(project)]["mcpServers"]["notes"]
    assert notes["args"][-2:] == ["--server", "notes"]
    assert notes["args"][1:3] == ["--workspace", str(project)]  # started in the project
    assert data["mcpServers"]["clock"]["args"][-2:] == ["--server", "clock"]
    assert data["numStartups"] == 3 and data["projects"][str(other)]["mcpServers"] == {}
    moved = json.loads((user.config / "ironcurtain" / "mcp-servers.json").read_text())
    assert moved["mcpServers"]["notes"]["sandbox"]["filesystem"]["allowWrite"] == [
        str(project / "notes")
    ]
    assert _cli(user, project, "unwrap", "--client", "claude-code").returncode == 0
    assert claude.read_text() == original


def test_servers_that_fetch_their_package_at_start_are_left_alone(user: Home) -> None:
    # A sandbox has no network: npx of a package not installed, and uvx (which runs from
    # uv's cache in the home), could not start there; their entries keep working as they do.
    project = user.root / "proj"
    project.mkdir()
    servers = {
        "fetcher": {"command": "uvx", "args": ["mcp-server-fetch"]},
        "remote-pkg": {"command": "npx", "args": ["-y", "@example/not-installed-server"]},
        "clock": {"command": "mcp-server-time", "args": []},
    }
    original = json.dumps({"mcpServers": servers}, indent=2)
    (project / ".mcp.json").write_text(original)
    done = _cli(user, project, "wrap", "--client", "claude-code", "--no-annotate")
    assert done.returncode == 0, done.stderr
    assert "fetcher: `uvx` runs its package from uv's cache" in done.stderr
    assert "remote-pkg: " in done.stderr and "left alone" in done.stderr
    assert "npm install" in done.stderr
    mcp = json.loads((project / ".mcp.json").read_text())["mcpServers"]
    assert mcp["fetcher"] == servers["fetcher"] and mcp["remote-pkg"] == servers["remote-pkg"]
    assert mcp["clock"]["args"][-2:] == ["--server", "clock"]


def test_unwrap_restores_every_file_byte_for_byte(user: Home) -> None:
    project = _project(user)
    before = _snapshot(project, user)
    done = _cli(user, project, "wrap", "--all", "--no-annotate")
    assert done.returncode == 0, done.stderr
    after = _snapshot(project, user)
    assert all(after[path] != text for path, text in before.items()), "every file is wrapped"
    cursor = json.loads((project / ".cursor" / "mcp.json").read_text())["mcpServers"]["notes"]
    assert cursor["args"][1:3] == ["--workspace", "${workspaceFolder}"]
    gemini = parse((user.home / ".gemini" / "settings.json").read_text()).value["mcpServers"]
    assert gemini["gclock"]["args"][-1] == "gclock" and gemini["gclock"]["timeout"] == 30000
    assert (user.home / ".gemini" / "settings.json").read_text().startswith("// Gemini CLI")
    done = _cli(user, project, "unwrap", "--all")
    assert done.returncode == 0, done.stderr
    assert _snapshot(project, user) == before
    assert "nothing to unwrap" in _cli(user, project, "unwrap", "--all").stderr


def test_unwrap_of_a_file_changed_elsewhere_puts_back_only_the_entries(user: Home) -> None:
    # A client rewrites its own file as it runs (Claude Code's ~/.claude.json at every
    # start): unwrap gives the wrapped entries back and keeps the rest as it is now.
    project = _project(user)
    original = json.loads((project / ".mcp.json").read_text())["mcpServers"]
    local = ("--server", "filesystem", "--server", "git")
    done = _cli(user, project, "wrap", "--client", "claude-code", *local, "--no-annotate")
    assert done.returncode == 0, done.stderr
    edited = (project / ".mcp.json").read_text().replace('"docs"', '"documentation"')
    (project / ".mcp.json").write_text(edited)
    done = _cli(user, project, "unwrap", "--client", "claude-code")
    assert done.returncode == 0, done.stderr
    assert "put back filesystem, git in" in done.stderr
    now = json.loads((project / ".mcp.json").read_text())["mcpServers"]
    assert now["filesystem"] == original["filesystem"] and now["git"] == original["git"]
    assert now["documentation"] == original["docs"] and "docs" not in now
    assert "nothing to unwrap" in _cli(user, project, "unwrap", "--all").stderr


def test_unwrap_refuses_an_entry_that_changed_since(user: Home) -> None:
    project = _project(user)
    assert _cli(user, project, "wrap", "--client", "claude-code", "--no-annotate").returncode == 0
    wrapped = json.loads((project / ".mcp.json").read_text())
    wrapped["mcpServers"]["git"]["args"].append("--extra")
    edited = json.dumps(wrapped)
    (project / ".mcp.json").write_text(edited)
    done = _cli(user, project, "unwrap", "--client", "claude-code")
    assert done.returncode == 2
    assert "put back filesystem, docs in" in done.stderr
    assert f"{project}/.mcp.json: git changed since ironcurtain wrapped them" in done.stderr
    assert "the original is kept in " in done.stderr
    now = json.loads((project / ".mcp.json").read_text())["mcpServers"]
    assert now["git"] == wrapped["mcpServers"]["git"]  # not clobbered
    assert now["filesystem"]["command"] == "mcp-server-filesystem"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"mcpServers": {"a": {"command": "x",}', "line 1, column 39: expected ',' or '}'"),
        ('{"mcpServers": [1]}', "mcpServers is not an object of servers"),
        ("{\n  // ok\n  'single': 1\n}", "line 3, column 3: expected a key in double quotes"),
    ],
)
def test_a_bad_file_is_named_with_its_place_and_nothing_is_written(
    user: Home, text: str, says: str
) -> None:
    project = user.root / "proj"
    project.mkdir()
    (project / ".mcp.json").write_text(text)
    done = _cli(user, project, "wrap", "--client", "claude-code", "--no-annotate")
    assert done.returncode == 2
    assert f"{project}/.mcp.json: {says}" in done.stderr
    assert "Traceback" not in done.stderr
    assert (project / ".mcp.json").read_text() == text
    assert not (user.config / "ironcurtain").exists()


def test_a_bad_toml_file_is_named_and_nothing_is_written(user: Home) -> None:
    project = user.root / "proj"
    project.mkdir()
    (user.home / ".codex").mkdir()
    bad = '[mcp_servers.clock]\ncommand = "mcp-server-time\n'
    (user.home / ".codex" / "config.toml").write_text(bad)
    done = _cli(user, project, "wrap", "--client", "codex", "--no-annotate")
    assert done.returncode == 2
    assert f"{user.home}/.codex/config.toml: not TOML: " in done.stderr
    assert "line 2" in done.stderr and "Traceback" not in done.stderr
    assert (user.home / ".codex" / "config.toml").read_text() == bad
    assert not (user.config / "ironcurtain").exists()


def test_a_name_already_defined_differently_gets_its_clients_own_definition(
    user: Home,
) -> None:
    # Common with 30 clients (the same name given another folder in two of them): each
    # client's entry starts its own definition; the one already there is never changed.
    project = _project(user)
    config = user.config / "ironcurtain" / "mcp-servers.json"
    config.parent.mkdir(parents=True)
    config.write_text('{"mcpServers": {"git": {"command": "other-git"}}}')
    done = _cli(user, project, "wrap", "--client", "claude-code", "--no-annotate")
    assert done.returncode == 0, done.stderr
    assert "git: another entry of that name is defined differently" in done.stderr
    servers = json.loads(config.read_text())["mcpServers"]
    assert servers["git"] == {"command": "other-git"}
    assert servers["git.claude-code"]["command"].endswith("mcp-server-git")
    entries = json.loads((project / ".mcp.json").read_text())["mcpServers"]
    assert entries["git"]["args"][-2:] == ["--server", "git.claude-code"]
    listed = _cli(user, project, "clients")
    line = next(x for x in listed.stdout.splitlines() if x.strip().startswith("git "))
    assert "runs through ironcurtain" in line, listed.stdout
    again = _cli(user, project, "wrap", "--client", "claude-code", "--no-annotate")
    assert json.loads(config.read_text())["mcpServers"] == servers, again.stderr


def test_wrap_names_what_to_wrap(user: Home) -> None:
    project = _project(user)
    done = _cli(user, project, "wrap")
    assert done.returncode == 2 and "--client NAME" in done.stderr
    done = _cli(user, project, "wrap", "--client", "notepad")
    assert done.returncode == 2 and "--client notepad: no such client" in done.stderr
    done = _cli(user, project, "wrap", "--client", "claude-code", "--server", "gti")
    assert done.returncode == 2
    assert "--server gti: no such server in the clients chosen (they have: docs, " in done.stderr


@pytest.mark.parametrize("command", ["/usr/bin/env true", "/usr/bin/env"])
def test_a_command_line_a_client_splits_is_left_alone(user: Home, command: str) -> None:
    # Mistral Vibe splits a string command into words: moved as one program's path, the
    # server would no longer start.
    (user.home / ".vibe").mkdir()
    toml = f'[[mcp_servers]]\nname = "s"\ntransport = "stdio"\ncommand = "{command}"\n'
    (user.home / ".vibe" / "config.toml").write_text(toml)
    done = _cli(user, user.root, "wrap", "--client", "mistral-vibe", "--no-annotate")
    split = " " in command
    assert ("splits its command" in done.stdout + done.stderr) is split, done.stdout
    assert ((user.home / ".vibe" / "config.toml").read_text() == toml) is split
