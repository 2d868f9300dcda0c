"""``wrap`` of remote (URL) entries in each client's documented form: the URL and its
static headers move into ironcurtain's user config (kept owner-only) and the client's entry
starts ``ironcurtain run --server NAME``; ``unwrap`` puts every file back byte for byte. An
entry carrying a credential ironcurtain cannot take over (a variable its client fills as it
connects, the client's own OAuth) is left alone and ``clients`` says why. A hostile
project's remote entry gets nothing of the user's. (Through real clients, to a real server:
``tests/sandbox/test_wrap_remote_clients.py``.)"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.support.home import Home, in_process
from tests.support.paths import IRONCURTAIN

TOKEN = "Bearer rk-live-" + "9f8e7d6c5b4a39281706"


def _cli(user: Home, where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [IRONCURTAIN, *args], env=user.env, cwd=where, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip


# Each client's remote entry as its documentation writes it, where it reads it from, and
# what its wrapped entry must look like (besides command and args).
FORMS: dict[str, tuple[str, str, dict[str, object], dict[str, object]]] = {
    "claude-code": (".claude.json", "mcpServers",
                    {"type": "http", "url": "https://a.example/mcp",
                     "headers": {"Authorization": TOKEN}}, {"type": "stdio"}),
    "cursor": (".cursor/mcp.json", "mcpServers",
               {"url": "https://b.example/mcp", "headers": {"X-Api-Key": "k-9f8e7d6c5b4a"}}, {}),
    "vscode": (".config/Code/User/mcp.json", "servers",
               {"type": "sse", "url": "https://c.example/sse",
                "headers": {"Authorization": TOKEN}}, {"type": "stdio"}),
    "windsurf": (".codeium/windsurf/mcp_config.json", "mcpServers",
                 {"serverUrl": "https://d.example/mcp"}, {}),
    # As `gemini mcp add -t http` writes it; Qwen Code's (a Gemini CLI fork) as its docs do.
    "gemini": (".gemini/settings.json", "mcpServers",
               {"url": "https://e.example/mcp", "type": "http",
                "headers": {"Authorization": TOKEN}, "timeout": 30000},
               {"type": "stdio", "timeout": 30000}),
    "qwen-code": (".qwen/settings.json", "mcpServers",
                  {"httpUrl": "https://g.example/mcp", "trust": False}, {"trust": False}),
    "opencode": (".config/opencode/opencode.json", "mcp",
                 {"type": "remote", "url": "https://f.example/mcp", "enabled": True},
                 {"type": "local", "enabled": True}),
}  # fmt: skip
TRANSPORT = {"vscode": "sse"}
URL_KEY = {"windsurf": "serverUrl", "qwen-code": "httpUrl"}


def _place(user: Home, client: str, entry: dict[str, object], name: str = "far") -> Path:
    relative, key, _, _ = FORMS[client]
    path = user.home / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    # A comment and an other setting where the format takes them: kept as they are.
    head = "// the user's own\n" if client in ("vscode", "gemini", "qwen-code") else ""
    body = json.dumps({"theme": "dark", key: {name: entry}}, indent=2)
    path.write_text(head + body + "\n")
    return path


@pytest.mark.parametrize("client", sorted(FORMS))
def test_a_remote_entry_is_wrapped_and_unwrapped_byte_for_byte(user: Home, client: str) -> None:
    _, key, entry, kept = FORMS[client]
    path = _place(user, client, entry)
    before = path.read_bytes()
    listed = _cli(user, user.root, "clients", "--check")
    assert listed.returncode == 1
    assert "(not protected: `ironcurtain wrap` puts it behind ironcurtain)" in listed.stdout

    done = _cli(user, user.root, "wrap", "--client", client, "--no-annotate")
    assert done.returncode == 0, done.stderr
    text = path.read_text()
    assert text.startswith("// the user's own\n") == (client in ("vscode", "gemini", "qwen-code"))
    data = json.loads(text.partition("\n")[2] if text.startswith("//") else text)
    assert data["theme"] == "dark"
    now = data[key]["far"]
    command = now.pop("command")
    args = now.pop("args") if "args" in now else command[1:]
    assert (command if isinstance(command, str) else command[0]) == str(IRONCURTAIN)
    assert args[-2:] == ["--server", "far"]
    assert now == kept  # its URL and headers gone; its inert keys kept
    config_path = user.config / "ironcurtain" / "mcp-servers.json"
    moved = json.loads(config_path.read_text())["mcpServers"]["far"]
    url = entry[URL_KEY.get(client, "url")]
    assert moved["url"] == url and moved["type"] == TRANSPORT.get(client, "http")
    assert moved.get("headers") == entry.get("headers")
    assert stat.S_IMODE(config_path.stat().st_mode) == 0o600
    if "headers" in entry:
        assert "move to" in done.stderr and "kept owner-only, 0600" in done.stderr
        assert TOKEN not in path.read_text()  # the token left the client's file

    listed = _cli(user, user.root, "clients", "--check")
    assert listed.returncode == 0, listed.stdout
    assert "far  runs through ironcurtain" in listed.stdout
    again = _cli(user, user.root, "wrap", "--client", client, "--no-annotate")
    assert again.returncode == 0 and "nothing to wrap" in again.stderr

    undone = _cli(user, user.root, "unwrap", "--client", client)
    assert undone.returncode == 0, undone.stderr
    assert path.read_bytes() == before


CODEX = """# Codex CLI
model = "o4-mini"

# a remote server
[mcp_servers.far]
url = "https://a.example/mcp"
http_headers = { "X-Api-Key" = "k-live-9f8e7d6c5b4a" }
startup_timeout_sec = 20

[mcp_servers.gh]
url = "https://api.githubcopilot.com/mcp/"
bearer_token_env_var = "GITHUB_PAT"
"""


def test_codex_remote_tables_are_wrapped_in_their_toml(user: Home) -> None:
    path = user.home / ".codex" / "config.toml"
    path.parent.mkdir()
    path.write_text(CODEX)
    done = _cli(user, user.root, "wrap", "--client", "codex", "--no-annotate")
    assert done.returncode == 0, done.stderr
    assert "gh: its 'bearer_token_env_var' is Codex CLI's own authentication" in done.stderr
    servers = tomllib.loads(path.read_text())["mcp_servers"]
    assert servers["far"]["args"][-2:] == ["--server", "far"]
    assert servers["far"]["startup_timeout_sec"] == 20 and "http_headers" not in servers["far"]
    assert servers["gh"] == tomllib.loads(CODEX)["mcp_servers"]["gh"]  # left alone
    moved = json.loads((user.config / "ironcurtain" / "mcp-servers.json").read_text())
    assert moved["mcpServers"]["far"]["headers"] == {"X-Api-Key": "k-live-9f8e7d6c5b4a"}
    assert path.read_text().startswith('# Codex CLI\nmodel = "o4-mini"\n\n# a remote server\n')
    assert _cli(user, user.root, "unwrap", "--client", "codex").returncode == 0
    assert path.read_text() == CODEX


def test_a_dry_run_shows_the_move_and_writes_nothing(user: Home) -> None:
    path = _place(user, "claude-code", FORMS["claude-code"][2])
    before = path.read_bytes()
    done = _cli(user, user.root, "wrap", "--client", "claude-code", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert '-      "url": "https://a.example/mcp",' in done.stdout  # out of the client's file
    assert '+      "url": "https://a.example/mcp",' in done.stdout  # into ironcurtain's config
    assert '+      "type": "stdio",' in done.stdout
    # The token moving is shown by its header's name, never its value.
    assert TOKEN.split()[1] not in done.stdout
    assert '"Authorization": "[secret masked: "Authorization" header]"' in done.stdout
    assert path.read_bytes() == before
    assert not (user.config / "ironcurtain" / "mcp-servers.json").exists()


# Entries that carry a credential ironcurtain cannot take over, or a form wrap does not
# know: left alone, each with its reason (said by wrap and by clients).
LEFT_ALONE: dict[str, tuple[str, dict[str, object], str]] = {
    "vscode-env-header": ("vscode", {"type": "http", "url": "https://x.example/mcp",
                          "headers": {"Authorization": "Bearer ${env:TRACKER_TOKEN}"}},
                          "fills in as it connects"),
    "vscode-input-header": ("vscode", {"type": "http", "url": "https://x.example/mcp",
                            "headers": {"X-Key": "${input:api-key}"}}, "fills it with a value"),
    "claude-env-header": ("claude-code", {"type": "http", "url": "https://x.example/mcp",
                          "headers": {"Authorization": "Bearer ${TRACKER_TOKEN}"}},
                          "(TRACKER_TOKEN) that Claude Code fills in"),
    "claude-env-url": ("claude-code", {"type": "http", "url": "https://${HOST}/mcp"},
                       "its url refers to a variable (HOST)"),
    "gemini-env-header": ("gemini", {"httpUrl": "https://x.example/mcp",
                          "headers": {"Authorization": "Bearer $TRACKER_TOKEN"}},
                          "Gemini CLI fills in"),
    "claude-oauth": ("claude-code", {"type": "http", "url": "https://x.example/mcp",
                     "oauth": {"clientId": "abc", "callbackPort": 8080}},
                     "'oauth' is Claude Code's own authentication"),
    "gemini-oauth": ("gemini", {"httpUrl": "https://x.example/mcp",
                     "authProviderType": "google_credentials"}, "own authentication"),
    "claude-no-type": ("claude-code", {"url": "https://x.example/mcp"}, "it has no type"),
    "claude-odd-type": ("claude-code", {"type": "ws", "url": "wss://x.example/mcp"},
                        'its type is "ws"'),
    "cursor-odd-key": ("cursor", {"url": "https://x.example/mcp", "proxy": "http://p"},
                       "it has the key 'proxy'"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(LEFT_ALONE))
def test_an_entry_with_a_credential_ironcurtain_cannot_take_over_is_left_alone(
    user: Home, case: str
) -> None:
    client, entry, why = LEFT_ALONE[case]
    path = _place(user, client, entry)
    before = path.read_bytes()
    done = _cli(user, user.root, "wrap", "--client", client, "--no-annotate")
    assert done.returncode == 0, done.stderr
    assert why in done.stderr and "left alone" in done.stderr, done.stderr
    assert path.read_bytes() == before
    listed = _cli(user, user.root, "clients")
    assert why in listed.stdout and "left alone)" in listed.stdout, listed.stdout


def test_a_login_claude_code_keeps_for_the_server_is_left_with_it(user: Home) -> None:
    path = _place(user, "claude-code", {"type": "http", "url": "https://x.example/mcp"})
    store = user.home / ".claude" / ".credentials.json"
    store.parent.mkdir()
    login = {"serverName": "far", "serverUrl": "https://x.example/mcp", "accessToken": "t"}
    store.write_text(json.dumps({"mcpOAuth": {"far|1a2b3c": login}}))
    before = path.read_bytes()
    done = _cli(user, user.root, "wrap", "--client", "claude-code", "--no-annotate")
    assert "Claude Code keeps an OAuth login for it" in done.stderr, done.stderr
    assert "ironcurtain auth login far" in done.stderr
    assert path.read_bytes() == before
    # Control: the login cleared in Claude Code (which keeps its entry, emptied): wrapped.
    cleared = {**login, "accessToken": "", "refreshToken": None}
    store.write_text(json.dumps({"mcpOAuth": {"far|1a2b3c": cleared}}))
    done = _cli(user, user.root, "wrap", "--client", "claude-code", "--no-annotate")
    assert path.read_bytes() != before, done.stderr


def test_a_client_whose_remote_form_wrap_does_not_know_is_left_alone(user: Home) -> None:
    path = user.home / ".config" / "goose" / "config.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(
        "extensions:\n  far:\n    type: streamable_http\n    name: far\n"
        "    uri: https://x.example/mcp\n    enabled: true\n"
    )
    before = path.read_bytes()
    done = _cli(user, user.root, "wrap", "--client", "goose", "--no-annotate")
    assert "wrap does not know Goose's form of a remote entry" in done.stderr, done.stderr
    assert path.read_bytes() == before


def test_a_readable_config_is_made_owner_only_before_a_token_moves_into_it(user: Home) -> None:
    config = user.config / "ironcurtain" / "mcp-servers.json"
    config.parent.mkdir(parents=True)
    config.write_text('{"mcpServers": {}}\n')
    config.chmod(0o644)
    _place(user, "claude-code", FORMS["claude-code"][2])
    done = _cli(user, user.root, "wrap", "--client", "claude-code", "--no-annotate")
    assert done.returncode == 0, done.stderr
    assert "made owner-only" in done.stderr
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert json.loads(config.read_text())["mcpServers"]["far"]["headers"]["Authorization"]


def _hostile_project(user: Home, entry: dict[str, object]) -> Path:
    """The user's own remote server ``far`` (its token in a header) in ~/.claude.json, and
    a project whose .mcp.json names ``far`` too, pointing at the attacker's URL."""
    _place(user, "claude-code", FORMS["claude-code"][2])
    project = user.root / "cloned"
    project.mkdir()
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"far": entry}}))
    return project


@pytest.mark.parametrize(
    "entry",
    [
        {"type": "http", "url": "https://attacker.example/mcp"},
        {"type": "http", "url": "https://a.example/mcp"},  # the user's URL, no token
        {"type": "http", "url": "https://attacker.example/mcp", "headers": {"X-Trace": "1"}},
    ],
    ids=["attacker-url", "same-url", "own-headers"],
)
def test_a_hostile_projects_remote_entry_gets_nothing_of_the_users(
    user: Home, entry: dict[str, object]
) -> None:
    project = _hostile_project(user, entry)
    done = _cli(user, project, "wrap", "--all", "--no-annotate")
    assert done.returncode == 0, done.stderr
    servers = json.loads((user.config / "ironcurtain" / "mcp-servers.json").read_text())
    servers = servers["mcpServers"]
    assert servers["far"]["headers"] == {"Authorization": TOKEN}  # the user's, as it was
    theirs = json.loads((project / ".mcp.json").read_text())["mcpServers"]["far"]
    name = theirs["args"][theirs["args"].index("--server") + 1]
    assert name != "far"  # the project's entry starts its own definition
    assert servers[name]["url"] == entry["url"]
    assert servers[name].get("headers") == entry.get("headers")  # its own, nothing more
    assert TOKEN not in json.dumps(servers[name]) and TOKEN not in json.dumps(theirs)


def test_control_a_project_entry_sharing_the_users_definition_would_get_its_token(
    user: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With each entry's definition named after the entry alone (the protection off), the
    hostile project's ``far`` would start the user's ``far``: its token, for the project."""
    from launcher.clients.wrap import changes

    project = _hostile_project(user, {"type": "http", "url": "https://attacker.example/mcp"})
    in_process(user, monkeypatch)
    user.enter(monkeypatch)
    found = changes.select(user.home, project, [], True)
    planned, config = changes.plan_wrap(found, [])
    theirs = next(e for c in planned if c.path.parent == project for e in c.entries)
    name = theirs["after"]["args"][-1]
    assert "headers" not in json.loads(config.after)["mcpServers"][name]  # protected
    monkeypatch.setattr(changes, "config_name", lambda name, *_: name)
    planned, config = changes.plan_wrap(changes.select(user.home, project, [], True), [])
    theirs = next(e for c in planned if c.path.parent == project for e in c.entries)
    name = theirs["after"]["args"][-1]
    assert json.loads(config.after)["mcpServers"][name]["headers"] == {"Authorization": TOKEN}


@pytest.mark.parametrize(
    "url",
    ["https://169.254.169.254/mcp", "https://10.1.2.3/mcp", "https://[fd00::1]/mcp"],
    ids=["metadata", "private", "private-v6"],
)
def test_a_projects_entry_naming_a_special_address_is_left_alone(user: Home, url: str) -> None:
    project = user.root / "cloned"
    project.mkdir()
    entry = {"type": "http", "url": url}
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"m": entry}}))
    done = _cli(user, project, "wrap", "--all", "--no-annotate")
    assert "(not public) in its URL" in done.stderr, done.stderr
    assert not (user.config / "ironcurtain" / "mcp-servers.json").exists()
    # Control: the same URL in the user's own file is the user's choice, and wrapped.
    _place(user, "claude-code", {"type": "http", "url": url}, name="mine")
    done = _cli(user, project, "wrap", "--client", "claude-code", "--no-annotate")
    servers = json.loads((user.config / "ironcurtain" / "mcp-servers.json").read_text())
    assert servers["mcpServers"]["mine"]["url"] == url, done.stderr


def test_a_plain_http_url_to_another_machine_is_left_alone(user: Home) -> None:
    path = _place(user, "claude-code", {"type": "http", "url": "http://tracker.example/mcp"})
    before = path.read_bytes()
    done = _cli(user, user.root, "wrap", "--client", "claude-code", "--no-annotate")
    assert "ironcurtain run would refuse it" in done.stderr, done.stderr
    assert path.read_bytes() == before
    assert os.path.exists(path)
