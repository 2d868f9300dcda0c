#!/usr/bin/env python3
"""A remote server's call through ironcurtain vs the same server called directly over HTTP,
in one run (``bench.py remote``).

The server is the ``mcp`` SDK's streamable-HTTP server on loopback with one tool
(``echo``), run by this script (``bench_remote.py serve PORT``). Direct: HTTP/1.1 from a raw
kept-alive socket (no client library in the way), a session initialised once. Through
ironcurtain: ``ironcurtain run --server far`` (a ``url`` entry) spoken to over stdio in raw
JSON lines, as ``bench.py calls`` speaks to a local server; ironcurtain then reaches the
server over HTTP itself. Calls alternate A and B after a warm-up; the added time is what
ironcurtain's hop, gate and HTTP client cost.

``BENCH_REMOTE_BEFORE=/path/to/other/checkout/.venv/bin/ironcurtain`` adds another
ironcurtain (an earlier version, say) to the same alternation, to compare the two in one run.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path

from benchlib import ROOT, Peer, RawHttp, Scratch, compare

from tests.support.probe import write_raw_policy

HANDSHAKE = "2025-11-25"
# A call for the SDK client's loop: the tool, its arguments, where its time goes.
Request = tuple[str, dict[str, object], Future[float]]


def serve(port: int) -> None:
    """The remote server: one ``echo`` tool over streamable HTTP on loopback."""
    import uvicorn
    from mcp.server.mcpserver import MCPServer

    mcp = MCPServer("bench-remote")

    @mcp.tool()
    def echo(text: str) -> str:
        """Say the text back."""
        return text

    # Connections kept alive through the start of every peer (uvicorn closes an idle one after
    # 5 s by default, before the first timed call).
    app = mcp.streamable_http_app()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", timeout_keep_alive=300)


class DirectHttp:
    """The remote server spoken to over HTTP with no client library: one kept-alive socket,
    a session initialised once, each call a POST read to its answer."""

    def __init__(self, port: int) -> None:
        self.raw = RawHttp(port)
        self.headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        self._ids = 0
        init = {"protocolVersion": HANDSHAKE, "capabilities": {},
                "clientInfo": {"name": "bench", "version": "1"}}  # fmt: skip
        headers = self._post("initialize", init)
        self.headers["Mcp-Session-Id"] = headers.get("mcp-session-id", "")
        self.headers["MCP-Protocol-Version"] = HANDSHAKE
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        self.raw.post("/mcp", self.headers, json.dumps(note).encode())

    def _post(self, method: str, params: object) -> dict[str, str]:
        """One request, read to its answer (an error raised); the response's headers."""
        self._ids += 1
        body = {"jsonrpc": "2.0", "id": self._ids, "method": method, "params": params}
        status, headers, raw = self.raw.post("/mcp", self.headers, json.dumps(body).encode())
        text = raw.decode()
        if headers.get("content-type", "").startswith("application/json"):
            answers = [json.loads(text)]
        else:
            answers = [json.loads(x[6:]) for x in text.splitlines() if x.startswith("data: {")]
        for answer in answers:
            if answer.get("id") == self._ids:
                result = answer.get("result")
                if "error" in answer or (isinstance(result, dict) and result.get("isError")):
                    raise RuntimeError(f"call failed: {answer}")
                return headers
        raise RuntimeError(f"no answer: {status} {text[:200]}")

    def call(self, tool: str, arguments: dict[str, object]) -> float:
        start = time.perf_counter()
        self._post("tools/call", {"name": tool, "arguments": arguments})
        return time.perf_counter() - start

    def close(self) -> None:
        self.raw.close()


class SdkHttp:
    """The remote server through the ``mcp`` SDK's own streamable-HTTP client (what
    ironcurtain reached it with before it spoke the transport itself), on an event loop of
    its own thread; each call timed in
    that loop, so the hop between threads is not counted."""

    def __init__(self, url: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.requests: asyncio.Queue[Request | None] = asyncio.Queue()
        ready: Future[None] = Future()
        self.done = asyncio.run_coroutine_threadsafe(self._serve(url, ready), self.loop)
        ready.result(60)

    async def _serve(self, url: str, ready: Future[None]) -> None:
        from mcp import ClientSession
        from mcp.client.streamable_http import streamable_http_client

        async with (
            streamable_http_client(url) as (read, write, *_),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            ready.set_result(None)
            while (request := await self.requests.get()) is not None:
                tool, arguments, answer = request
                start = time.perf_counter()
                await session.call_tool(tool, arguments)
                answer.set_result(time.perf_counter() - start)

    def call(self, tool: str, arguments: dict[str, object]) -> float:
        answer: Future[float] = Future()
        self.loop.call_soon_threadsafe(self.requests.put_nowait, (tool, arguments, answer))
        return answer.result(60)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.requests.put_nowait, None)
        try:
            self.done.result(10)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _started(port: int) -> subprocess.Popen[bytes]:
    """The remote server, once it accepts connections."""
    proc = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "serve", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=None if os.environ.get("BENCH_STDERR") else subprocess.DEVNULL,
        cwd=ROOT,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("the remote server did not start")


def bench_remote(quick: bool) -> str:
    """Print the comparison; the summary line."""
    calls, warm = (300, 30) if quick else (2000, 200)
    scratch = Scratch.make()
    port = _free_port()
    server = _started(port)
    config = Path(scratch.root) / "remote.json"
    entry = {"url": f"http://127.0.0.1:{port}/mcp"}
    config.write_text(json.dumps({"mcpServers": {"far": entry}}))
    policy = write_raw_policy(Path(scratch.root) / "policy", {"far": {"echo": ["text"]}})
    argv = scratch.run_argv("--config", str(config), "--policy-dir", str(policy))
    before = os.environ.get("BENCH_REMOTE_BEFORE")
    peers: list[DirectHttp | SdkHttp | Peer] = []
    try:
        peers.append(DirectHttp(port))
        peers.append(Peer([*argv, "--server", "far"], scratch.env()))
        peers.append(SdkHttp(entry["url"]))
        if before:
            peers.append(Peer([before, *argv[1:], "--server", "far"], scratch.env()))
        print(f"per remote call, {calls} calls each, alternating, after {warm} warm-up calls")
        times: list[list[float]] = [[] for _ in peers]
        arguments: dict[str, object] = {"text": "hello"}
        for i in range(warm + calls):
            took = [peer.call("echo", arguments) for peer in peers]
            if i >= warm:
                for kept, one in zip(times, took, strict=True):
                    kept.append(one)
    finally:
        for peer in peers:
            peer.close()
        server.terminate()
        server.wait(10)
        scratch.remove()
    a, b, sdk = times[:3]
    label = "remote echo (direct = HTTP from a raw socket; ironcurtain over stdio, then HTTP)"
    med, p99 = compare(label, a, b)
    compare("the same direct through the mcp SDK's client (a client library's own cost)",
            a, sdk, ("raw socket", "SDK client"))  # fmt: skip
    if before:
        compare(f"the same through {before} (before) and this ironcurtain (after)",
                times[3], b, ("before", "after"))  # fmt: skip
    ratio = statistics.median(b) / statistics.median(a)
    return f"+{med * 1000:.3f} ms median, +{p99 * 1000:.3f} ms p99 ({ratio:.2f}x direct HTTP)"


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(int(sys.argv[2]))
    else:
        print(bench_remote("--quick" in sys.argv))
