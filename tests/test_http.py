"""``ironcurtain run --http``: streamable HTTP on 127.0.0.1, bearer token, no rebinding."""

from __future__ import annotations

import asyncio
import http.client
import re
import subprocess
from collections.abc import Iterator

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.paths import IRONCURTAIN
from tests.support.sdk import call

pytestmark = needs_bwrap


@pytest.fixture
def served(user: Home) -> Iterator[tuple[str, str, int]]:
    proc = subprocess.Popen(
        [IRONCURTAIN, "run", "--server", "time", "--http", "0", "--workspace", str(user.ws())],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=user.env,
        text=True,
    )
    assert proc.stderr
    token = url = ""
    for line in proc.stderr:
        if m := re.search(r"bearer token: (\S+)", line):
            token = m.group(1)
        if m := re.search(r"ready, serving MCP on (http://\S+)", line):
            url = m.group(1)
            break
    assert token and url, "no URL or token printed"
    port = int(url.split(":")[2].split("/")[0])
    yield url, token, port
    proc.terminate()
    proc.wait(timeout=10)


def test_a_real_client_works_with_the_token(served: tuple[str, str, int]) -> None:
    url, token, _ = served
    out: list[tuple[bool, str]] = []

    async def scenario() -> None:
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(headers=headers) as client,
            streamable_http_client(url, http_client=client) as (read, write, *_),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            names = {t.name for t in (await session.list_tools()).tools}
            assert "get_current_time" in names
            out.append(await call(session, "get_current_time", {"timezone": "UTC"}))

    asyncio.run(scenario())
    assert not out[0][0] and "UTC" in out[0][1]


def _post(port: int, headers: dict[str, str]) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    body = '{"jsonrpc":"2.0","id":1,"method":"ping"}'
    conn.request("POST", "/mcp", body=body, headers={"Content-Type": "application/json", **headers})
    status = conn.getresponse().status
    conn.close()
    return status


def test_no_token_wrong_host_or_foreign_origin_is_refused(served: tuple[str, str, int]) -> None:
    _, token, port = served
    auth = {"Authorization": f"Bearer {token}"}
    assert _post(port, {}) == 401
    assert _post(port, {"Authorization": "Bearer not-the-token"}) == 401
    # DNS rebinding: a page on evil.example resolved to 127.0.0.1 sends its own Host/Origin.
    assert _post(port, {**auth, "Host": f"evil.example:{port}"}) == 421
    assert _post(port, {**auth, "Origin": "http://evil.example"}) == 403
    # With the token and the right host, a request without a session is still refused.
    assert _post(port, auth) == 400
