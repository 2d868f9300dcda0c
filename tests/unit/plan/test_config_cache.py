"""The validated config kept across starts (launcher.plan.config over policy.cache): read back
exactly, warnings included, never trusted past the bytes it was made from. (A hostile
server forging an entry: ``tests/attacks/test_cache_forgery.py``.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.plan.config import load_config
from launcher.plan.config_schema import ServerConfig
from launcher.shared.dirs import bundled_config
from launcher.shared.user_errors import ConfigError

# Every field the file can hold, in both spellings where it has two, with unknown keys at
# several depths (each one warned about on a hit as on a miss).
CONFIG = {
    "mcpServers": {
        "full": {
            "command": "mcp-server-time",
            "args": ["--local-timezone", "${TZ_FOR_TEST:-UTC}"],
            "env": {"A": "1"},
            "cwd": "${workspace}",
            "description": "every field",
            "disabled": False,
            "timeout": 5,
            "sandbox": {
                "filesystem": {
                    "allowRead": ["~/src"],
                    "deny_read": ["${workspace}/.env"],
                    "allowWrite": ["${workspace}"],
                    "denyWrite": ["${workspace}/.git"],
                },
                "network": {
                    "allowedDomains": ["example.com"],
                    "deniedDomains": ["bad.example.com"],
                    "hosts": {"db.internal": "[::1]"},
                },
                "limits": {"memory": "8G", "openFiles": False, "cpuSeconds": 60, "fileSize": None},
            },
            "restart": {"maxRestarts": 2, "backoffSeconds": 0.5},
            "clientRequests": {"elicitation": "deny", "sampling": "allow"},
            "maskSecrets": False,
            "scanArguments": {"skip": ["jwt", "configured-secret"]},
            "comand": "typo",
        },
        "bare": {"command": "x", "sandbox": False, "restart": True, "scanArguments": False},
        "no-limits": {"command": "x", "sandbox": {"network": False, "limits": False}},
    },
    "version": 2,
}


def _load(path: Path, cache: Path | None) -> tuple[dict[str, ServerConfig], tuple[str, ...], str]:
    loaded = load_config(path, "test", "/ws", env={"HOME": "/home/u"}, cache=cache)
    return loaded.servers, loaded.warnings, loaded.key


def _entries(cache: Path) -> list[Path]:
    return sorted(cache.glob("config-*.json"))


@pytest.mark.parametrize("which", ["every field", "bundled"])
def test_a_cached_config_is_the_validated_one(tmp_path: Path, which: str) -> None:
    if which == "bundled":
        path = bundled_config()
    else:
        path = tmp_path / "mcp-servers.json"
        path.write_text(json.dumps(CONFIG))
    cache = tmp_path / "cache"
    fresh = _load(path, None)
    assert _load(path, cache) == fresh  # a miss: validated, then written
    assert len(_entries(cache)) == 1
    assert _load(path, cache) == fresh  # a hit: read back
    if which == "every field":
        assert len(fresh[1]) == 2  # comand, version


def test_a_start_that_hits_imports_no_pydantic(tmp_path: Path) -> None:
    path = tmp_path / "mcp-servers.json"
    path.write_text(json.dumps(CONFIG))
    program = (
        "import sys; from pathlib import Path; from launcher.plan.config import load_config; "
        f"load_config(Path({str(path)!r}), 't', '/ws', cache=Path({str(tmp_path / 'c')!r})); "
        "print('pydantic' in sys.modules)"
    )
    runs = [subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)]
    runs.append(subprocess.run([sys.executable, "-c", program], capture_output=True, text=True))
    assert [r.stdout.strip() for r in runs] == ["True", "False"], [r.stderr for r in runs]


def test_a_changed_file_is_validated_again(tmp_path: Path) -> None:
    path, cache = tmp_path / "mcp-servers.json", tmp_path / "cache"
    path.write_text(json.dumps({"mcpServers": {"a": {"command": "x"}}}))
    _load(path, cache)
    path.write_text(json.dumps({"mcpServers": {"a": {"command": "x", "timeout": -1}}}))
    with pytest.raises(ConfigError, match="timeout"):
        _load(path, cache)


def test_a_cached_entry_is_expanded_at_each_start(tmp_path: Path) -> None:
    path, cache = tmp_path / "mcp-servers.json", tmp_path / "cache"
    path.write_text(json.dumps({"mcpServers": {"a": {"command": "x", "args": ["${V}"]}}}))
    for value in ("one", "two"):
        loaded = load_config(path, "t", "/ws", env={"V": value}, cache=cache)
        assert loaded.servers["a"].args == [value]
    assert len(_entries(cache)) == 1


@pytest.mark.parametrize("entry", ["[]", "not json", '{"d": "Path", "f": {}}', '{"l": [1, 2]}'])
def test_an_entry_that_is_not_what_was_written_is_a_miss(tmp_path: Path, entry: str) -> None:
    path, cache = tmp_path / "mcp-servers.json", tmp_path / "cache"
    path.write_text(json.dumps(CONFIG))
    fresh = _load(path, cache)
    (written,) = _entries(cache)
    written.write_text(entry)
    assert _load(path, cache) == fresh
