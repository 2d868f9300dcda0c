"""A restriction written so that validation reads something else is never dropped without a
word: a key of a sandbox given under both its spellings (``deny_read`` and ``denyRead``:
one of them would be dropped) and a misspelt ``sandbox`` itself (``Sandbox``, ``sandbx``:
every restriction in it would be), or a key of ``sandbox`` written beside ``command`` are
errors (exit 2, naming the place), and the server that would have read what they hide never
starts. CONTROL: each spelling alone starts it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import ironcurtain
from tests.support.home import Home
from tests.support.marks import needs_bwrap


def _server(user: Home, ws: Path) -> dict[str, Any]:
    """A server that marks that it started."""
    return {"command": sys.executable, "args": ["-c", f"open({str(ws / 'started')!r}, 'w')"]}


def _run(user: Home, ws: Path, server: dict[str, Any]) -> tuple[int, str]:
    config = user.root / "mcp-servers.json"
    config.write_text(json.dumps({"mcpServers": {"a": server}}))
    done = ironcurtain(user, "run", "--config", str(config), "--workspace", str(ws))
    return done.returncode, done.stderr


@pytest.mark.parametrize(
    ("filesystem", "where", "says"),
    [
        (
            {"deny_read": ["PRIVATE"], "denyRead": []},
            "$.mcpServers.a.sandbox.filesystem.deny_read",
            '"deny_read" is given twice, also as "denyRead"',
        ),
        (
            {"allowWrite": ["WS"], "allow_write": ["WS", "PRIVATE"]},
            "$.mcpServers.a.sandbox.filesystem.allow_write",
            '"allow_write" is given twice, also as "allowWrite"',
        ),
    ],
    ids=["deny-read-both-spellings", "allow-write-both-spellings"],
)
def test_a_key_under_both_spellings_starts_nothing(
    user: Home, filesystem: dict[str, list[str]], where: str, says: str
) -> None:
    ws = user.ws()
    private = str(user.root / "private")
    fs = {k: [{"PRIVATE": private, "WS": str(ws)}[p] for p in v] for k, v in filesystem.items()}
    fs.setdefault("allowWrite", [str(ws)])
    code, stderr = _run(user, ws, {**_server(user, ws), "sandbox": {"filesystem": fs}})
    assert code == 2, stderr
    assert f"{where}: {says}" in stderr and "Traceback" not in stderr
    assert not (ws / "started").exists()


@pytest.mark.parametrize("key", ["Sandbox", "sandbx", "sand_box", "clientRequest", "maskSecret"])
def test_a_misspelt_sandbox_starts_nothing(user: Home, key: str) -> None:
    ws = user.ws()
    value: object = {"filesystem": {"allowWrite": [str(ws)], "denyRead": [str(user.root)]}}
    if key != "Sandbox" and not key.startswith("sand"):
        value = {"sampling": "deny"} if key == "clientRequest" else False
    code, stderr = _run(user, ws, {**_server(user, ws), key: value})
    assert code == 2, stderr
    assert f'$.mcpServers.a.{key}: unknown key "{key}": did you mean' in stderr
    assert not (ws / "started").exists()


@pytest.mark.parametrize(
    ("key", "place"),
    [("denyRead", "sandbox.filesystem.denyRead"), ("network", "sandbox.network")],
)
def test_a_sandbox_key_written_beside_command_starts_nothing(
    user: Home, key: str, place: str
) -> None:
    """``denyRead`` one level too high (beside ``command``, as a flat config might have it)
    is not an unknown key of another client: the restriction would be dropped."""
    ws = user.ws()
    value: object = [str(user.root)] if key == "denyRead" else {"allowedDomains": []}
    code, stderr = _run(user, ws, {**_server(user, ws), key: value})
    assert code == 2, stderr
    assert f'$.mcpServers.a.{key}: unknown key "{key}": did you mean "{place}"?' in stderr
    assert not (ws / "started").exists()


@needs_bwrap
def test_control_each_spelling_alone_starts_the_server(user: Home) -> None:
    ws = user.ws()
    for fs in ({"allow_write": [str(ws)]}, {"allowWrite": [str(ws)]}):
        (ws / "started").unlink(missing_ok=True)
        _run(user, ws, {**_server(user, ws), "sandbox": {"filesystem": fs}})
        assert (ws / "started").exists(), fs
