"""``ironcurtain run --http`` as a test's user: started on a free port with a known bearer
token, the probe server's usual options, and a session through the ``mcp`` SDK's streamable
HTTP client."""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.support.home import Home
from tests.support.paths import IRONCURTAIN
from tests.support.probe import probe_server_config, write_raw_policy
from tests.support.ready import serving_url

TOKEN = "a-test-token-" + "x" * 20
ACCEPT = "application/json, text/event-stream"


@dataclass
class Served:
    url: str
    port: int
    proc: subprocess.Popen[str]
    stderr: list[str]


@contextmanager
def serving(user: Home, *args: str, env: dict[str, str] | None = None) -> Iterator[Served]:
    """``ironcurtain run --http 0 *args`` as ``user`` (token: ``TOKEN`` unless ``env`` says
    otherwise), once it says it is ready; stopped after."""
    proc = subprocess.Popen(
        [IRONCURTAIN, "run", *args, "--http", "0"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**user.env, "IRONCURTAIN_HTTP_TOKEN": TOKEN} if env is None else env,
        text=True,
    )
    assert proc.stderr
    url, said = serving_url(proc.stderr)
    assert url, "not ready:\n" + "".join(said)
    try:
        yield Served(url, int(url.split(":")[2].split("/")[0]), proc, said)
    finally:
        proc.terminate()
        try:
            _, rest = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, rest = proc.communicate()
        # Everything it said is in ``said`` (``Served.stderr``) once the block is over; its
        # pipe is closed.
        said.extend((rest or "").splitlines(keepends=True))


def probe_args(user: Home, **asks: str) -> list[str]:
    """The ``ironcurtain run`` options of a session with the probe server alone, every call
    allowed, approvals asked through elicitation; ``asks`` sets its ``clientRequests``."""
    server = probe_server_config(True)
    if asks:
        server["clientRequests"] = asks
    config = user.root / "probe.json"
    config.write_text(json.dumps({"mcpServers": {"probe": server}}))
    policy = write_raw_policy(user.root / "policy")
    return ["--config", str(config), "--policy-dir", str(policy), "--workspace", str(user.ws()),
            "--audit-log", str(user.root / "audit.jsonl"), "--server", "probe",
            "--approval", "elicit"]  # fmt: skip


@asynccontextmanager
async def http_session(
    url: str, token: str = TOKEN, host: str | None = None, **callbacks: Any
) -> AsyncIterator[ClientSession]:
    """An initialised ``mcp`` client session on ``url``, sending ``token`` as its bearer
    (and ``host`` as its Host: as a load balancer in front passes on the public one)."""
    headers = {"Authorization": f"Bearer {token}", **({"Host": host} if host else {})}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(url, http_client=http) as (read, write, *_),
        ClientSession(read, write, **callbacks) as session,
    ):
        await session.initialize()
        yield session
