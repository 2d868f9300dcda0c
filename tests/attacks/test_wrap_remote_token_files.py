"""Where a remote server's token goes when ``wrap`` moves it out of the client's file:
ironcurtain's user config, owner-only; never a file wrap may not write (its mode is not
touched either), and a wrap stopped between its writes leaves the token where it was (in
the client's file, and perhaps already in ironcurtain's config), never nowhere: wrapping
again finishes the move under the same name.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from tests.support.home import Home, in_process
from tests.support.paths import IRONCURTAIN

TOKEN = "Bearer rk-live-" + "0a1b2c3d4e5f60718293"
ENTRY = {"type": "http", "url": "https://a.example/mcp", "headers": {"Authorization": TOKEN}}


def _cli(user: Home, where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [IRONCURTAIN, *args], env=user.env, cwd=where, capture_output=True, text=True,
        timeout=180,
    )  # fmt: skip


def _claude(user: Home) -> Path:
    path = user.home / ".claude.json"
    path.write_text(json.dumps({"mcpServers": {"far": ENTRY}}))
    return path


@pytest.mark.skipif(os.geteuid() != 0, reason="making a file of another uid needs root")
def test_a_config_linked_to_another_users_file_is_neither_written_nor_chmoded(
    user: Home,
) -> None:
    """ironcurtain's user config is a link to a file another uid owns, readable by all:
    wrap refuses it (exit 2, named), and leaves its mode as it was."""
    shared = user.root / "shared" / "mcp-servers.json"
    shared.parent.mkdir()
    shared.write_text('{"mcpServers": {}}\n')
    os.chown(shared, 65534, 65534)
    shared.chmod(0o644)
    config = user.config / "ironcurtain" / "mcp-servers.json"
    config.parent.mkdir(parents=True)
    config.symlink_to(shared)
    client = _claude(user)
    before = client.read_bytes()
    done = _cli(user, user.root, "wrap", "--client", "claude-code", "--no-annotate")
    assert done.returncode == 2, done.stderr
    assert "which uid 65534 owns, not you" in done.stderr and "Traceback" not in done.stderr
    assert stat.S_IMODE(shared.stat().st_mode) == 0o644  # not touched
    assert shared.read_text() == '{"mcpServers": {}}\n' and client.read_bytes() == before


def test_control_a_linked_config_of_the_users_own_is_made_owner_only(user: Home) -> None:
    """The same link to a file of the user's own (a dotfiles checkout): wrap may write it,
    and makes it owner-only before the token goes in."""
    shared = user.root / "dotfiles" / "mcp-servers.json"
    shared.parent.mkdir()
    shared.write_text('{"mcpServers": {}}\n')
    shared.chmod(0o644)
    config = user.config / "ironcurtain" / "mcp-servers.json"
    config.parent.mkdir(parents=True)
    config.symlink_to(shared)
    _claude(user)
    done = _cli(user, user.root, "wrap", "--client", "claude-code", "--no-annotate")
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(shared.stat().st_mode) == 0o600 and config.is_symlink()
    assert json.loads(shared.read_text())["mcpServers"]["far"]["headers"] == ENTRY["headers"]


def test_a_wrap_stopped_between_its_writes_loses_no_token_and_finishes_later(
    user: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    from launcher.clients.wrap import apply, backups, changes

    client = _claude(user)
    before = client.read_bytes()
    in_process(user, monkeypatch)
    user.enter(monkeypatch)
    planned, config = changes.plan_wrap(changes.select(user.home, None, ["claude-code"], False), [])

    def stopped(_: object) -> str:
        raise KeyboardInterrupt  # the user's ^C, after ironcurtain's config was written

    monkeypatch.setattr(backups, "backup", stopped)
    with pytest.raises(KeyboardInterrupt):
        apply.apply_wrap(planned, config)
    written = json.loads(config.path.read_text())["mcpServers"]
    assert written["far"]["headers"] == ENTRY["headers"]  # the token: in the config...
    assert client.read_bytes() == before  # ...and still in the client's file, as it was
    assert stat.S_IMODE(config.path.stat().st_mode) == 0o600
    monkeypatch.undo()
    done = _cli(user, user.root, "wrap", "--client", "claude-code", "--no-annotate")
    assert done.returncode == 0, done.stderr
    entry = json.loads(client.read_text())["mcpServers"]["far"]
    assert entry["args"][-1] == "far" and TOKEN not in client.read_text()
    assert list(json.loads(config.path.read_text())["mcpServers"]) == ["far"]  # one, reused


KEYED = "https://a.example/mcp?api_key=" + "k3y-5ecret-0a1b2c3d"


def _keyed(user: Home) -> Path:
    """The user's remote entry whose key is in its URL's query, and an ironcurtain config
    others may read."""
    path = user.home / ".claude.json"
    path.write_text(json.dumps({"mcpServers": {"far": {"type": "http", "url": KEYED}}}))
    config = user.config / "ironcurtain" / "mcp-servers.json"
    config.parent.mkdir(parents=True)
    config.write_text('{"mcpServers": {}}\n')
    config.chmod(0o644)
    return config


def test_a_key_in_a_urls_query_is_masked_and_kept_owner_only(user: Home) -> None:
    config = _keyed(user)
    shown = _cli(user, user.root, "wrap", "--client", "claude-code", "--dry-run")
    assert shown.returncode == 0, shown.stderr
    assert "k3y-5ecret" not in shown.stdout + shown.stderr
    assert '[secret masked: "api_key" in its URL]' in shown.stdout
    done = _cli(user, user.root, "wrap", "--client", "claude-code", "--no-annotate")
    assert done.returncode == 0, done.stderr
    assert "k3y-5ecret" not in done.stdout + done.stderr
    assert json.loads(config.read_text())["mcpServers"]["far"]["url"] == KEYED
    assert stat.S_IMODE(config.stat().st_mode) == 0o600


def test_control_a_urls_query_counted_as_no_credential_is_shown_and_left_readable(
    user: Home, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The protection off (a URL's query not counted as a credential): the dry run prints
    the key, and the key lands in a config others may read."""
    from launcher.cli import clients as cli
    from launcher.clients.wrap import remote_entries

    config = _keyed(user)
    in_process(user, monkeypatch)
    user.enter(monkeypatch)
    monkeypatch.chdir(user.root)
    monkeypatch.setattr(remote_entries, "_secrets", lambda _: [])
    cli.wrap(client=["claude-code"], dry_run=True)
    assert "k3y-5ecret" in capsys.readouterr().out
    cli.wrap(client=["claude-code"], annotate=False)
    assert stat.S_IMODE(config.stat().st_mode) == 0o644
    assert json.loads(config.read_text())["mcpServers"]["far"]["url"] == KEYED


@pytest.mark.parametrize("rotated", [True, False], ids=["rotated", "as-wrapped"])
def test_unwrap_after_a_token_rotated_in_ironcurtains_config_says_so(
    user: Home, rotated: bool
) -> None:
    """The user rotates the token where wrap moved it; unwrap puts the client's file back
    as it was (the old token), keeps the new one where it is, and says so."""
    client = _claude(user)
    before = client.read_bytes()
    done = _cli(user, user.root, "wrap", "--client", "claude-code", "--no-annotate")
    assert done.returncode == 0, done.stderr
    config = user.config / "ironcurtain" / "mcp-servers.json"
    servers = json.loads(config.read_text())
    new = "Bearer rk-live-" + "ffeeddccbbaa99887766"
    if rotated:
        servers["mcpServers"]["far"]["headers"]["Authorization"] = new
        config.write_text(json.dumps(servers))
    done = _cli(user, user.root, "unwrap", "--client", "claude-code")
    assert done.returncode == 0, done.stderr
    assert client.read_bytes() == before
    said = "far in " + str(config) + " has changed since"
    assert (said in done.stderr) == rotated, done.stderr
    assert (new in config.read_text()) == rotated and new not in done.stderr
