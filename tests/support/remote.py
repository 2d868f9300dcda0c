"""A remote MCP server on loopback (tests/servers/remote_server.py) in a subprocess, and the
config and policy of a session that reaches it by its ``url``."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.home import Home
from tests.support.paths import TESTS
from tests.support.probe import write_raw_policy

REMOTE = TESTS / "servers" / "remote_server.py"
DENY_WIPE = {"name": "no-wipe", "if": {"tool": ["wipe"]}, "then": "deny", "reason": "no wiping"}


@dataclass
class Remote:
    """A running remote server: where it listens and what reached it."""

    port: int
    record: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def calls(self) -> list[dict[str, Any]]:
        """Every tool call that reached it."""
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def remote_server(where: Path, *flags: str) -> Iterator[Remote]:
    """The remote server listening on a free loopback port until the block ends."""
    port = free_port()
    record = where / f"remote-calls-{port}.jsonl"
    proc = subprocess.Popen(
        [sys.executable, str(REMOTE), str(port), str(record), *flags],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                err = proc.stderr.read().decode() if proc.stderr else ""
                raise RuntimeError(f"the remote server did not start: {err}")
            time.sleep(0.05)
        yield Remote(port, record)
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


def remote_args(
    user: Home,
    servers: Mapping[str, Mapping[str, Any]],
    tools: Mapping[str, Mapping[str, Sequence[str]]],
    rules: Sequence[Mapping[str, Any]] = (),
) -> list[str]:
    """``ironcurtain run`` options for ``servers`` (config entries by name) under a policy
    that runs ``rules`` first, then allows every call of ``tools``."""
    config = user.root / "remote.json"
    config.write_text(json.dumps({"mcpServers": dict(servers)}))
    policy = write_raw_policy(user.root / "policy", tools, first=rules)
    return ["--config", str(config), "--policy-dir", str(policy), "--workspace", str(user.ws()),
            "--audit-log", str(user.root / "audit.jsonl")]  # fmt: skip


REMOTE_TOOLS = {"echo": ["text"], "wipe": ["target"], "leak": []}
