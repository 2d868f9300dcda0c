"""A server's own workspace directories (``sandbox.filesystem.workspace``): the bundled
policy's rules written for ``${workspace}`` apply in each of them for that server only,
each must be one of its ``allowWrite`` directories (judged whole as every writable root),
and containment stays by whole path components."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import ironcurtain
from tests.support.home import Home


def _config(user: Home, fs: dict[str, Any], other: bool = True) -> Path:
    servers: dict[str, Any] = {
        "filesystem": {"command": "mcp-server-filesystem", "args": ["/nonexistent"],
                       "sandbox": {"filesystem": fs}},
    }  # fmt: skip
    if other:  # the same program, without the grant
        servers["plain"] = {"command": "mcp-server-filesystem", "args": ["/nonexistent"]}
    config = user.root / "servers.json"
    config.write_text(json.dumps({"mcpServers": servers}))
    return config


def _policy(user: Home) -> Path:
    """The bundled policy, with the filesystem server's annotations under "plain" too."""
    from policy.loader import bundled_policy_dir

    policy = user.root / "policy"
    policy.mkdir(exist_ok=True)
    bundled = bundled_policy_dir()
    annotations = json.loads((bundled / "tool-annotations.json").read_text())
    plain = json.loads(json.dumps(annotations["servers"]["filesystem"]).replace(
        '"filesystem"', '"plain"'))  # fmt: skip
    annotations["servers"]["plain"] = plain
    (policy / "tool-annotations.json").write_text(json.dumps(annotations))
    (policy / "compiled-policy.json").write_text((bundled / "compiled-policy.json").read_text())
    return policy


def _decide(user: Home, config: Path, server: str, tool: str, args: dict[str, Any]) -> str:
    done = ironcurtain(
        user, "check", server, tool, "--args", json.dumps(args), "--config", str(config),
        "--policy-dir", str(_policy(user)),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def dirs(user: Home) -> tuple[Path, Path]:
    a, b = user.root / "proj", user.root / "notes"
    for d in (a, b, user.root / "proj-evil"):
        d.mkdir()
        (d / "f.txt").write_text("x")
    return a, b


def test_reads_writes_and_moves_in_each_of_its_directories_are_allowed(
    user: Home, dirs: tuple[Path, Path]
) -> None:
    a, b = dirs
    config = _config(user, {"allowWrite": [str(a), str(b)], "workspace": [str(a), str(b)]})
    assert "allow-read-in-workspace" in _decide(
        user, config, "filesystem", "read_text_file", {"path": f"{a}/f.txt"}
    )
    assert "allow-write-in-workspace" in _decide(
        user, config, "filesystem", "write_file", {"path": f"{b}/g.txt", "content": "y"}
    )
    # A move from one of its directories to the other stays within its workspace.
    moved = {"source": f"{a}/f.txt", "destination": f"{b}/f.txt"}
    assert "allow-move-within-workspace" in _decide(user, config, "filesystem", "move_file", moved)


def test_the_grant_stops_at_the_directory_and_at_the_server(
    user: Home, dirs: tuple[Path, Path]
) -> None:
    a, _ = dirs
    config = _config(user, {"allowWrite": [str(a)], "workspace": [str(a)]})
    for path in (f"{a}-evil/f.txt", f"{a}/../proj-evil/f.txt", "/etc/passwd"):
        said = _decide(user, config, "filesystem", "read_text_file", {"path": path})
        assert "allow" not in said.split("\n")[0], (path, said)
    # Another server of the same session does not get it.
    said = _decide(user, config, "plain", "read_text_file", {"path": f"{a}/f.txt"})
    assert "deny-read-elsewhere" in said, said


def test_control_allow_write_alone_leaves_writes_there_escalated(
    user: Home, dirs: tuple[Path, Path]
) -> None:
    a, _ = dirs
    config = _config(user, {"allowWrite": [str(a)]})
    said = _decide(user, config, "filesystem", "write_file", {"path": f"{a}/g", "content": "y"})
    assert "escalate-write-elsewhere" in said, said


def test_a_workspace_that_is_not_writable_is_a_config_error(
    user: Home, dirs: tuple[Path, Path]
) -> None:
    a, b = dirs
    config = _config(user, {"allowWrite": [str(a)], "workspace": [str(a), str(b)]}, other=False)
    done = ironcurtain(user, "check", "filesystem", "read_text_file", "--args", "{}",
                       "--config", str(config))  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "$.mcpServers.filesystem.sandbox.filesystem.workspace[1]" in done.stderr
    assert "is not one of its allowWrite directories" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_home_as_a_workspace_is_refused_as_a_writable_root(user: Home) -> None:
    config = _config(user, {"allowWrite": ["~"], "workspace": ["~"]}, other=False)
    done = ironcurtain(user, "check", "filesystem", "read_text_file", "--args", "{}",
                       "--config", str(config))  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "allowWrite[0]" in done.stderr and "home directory" in done.stderr, done.stderr
