"""The callers benchmark of scripts/bench.py: one ``ironcurtain run --http`` in gateway mode
(an identity provider on loopback), its callers speaking the stateless protocol, each with
server instances of its own (the time server). A caller calls at a steady pace (one call
every ``PACE`` seconds, as an agent between its model's turns does, not as fast as it can);
its calls' latency is measured with the caller alone, then with ``CROWD`` callers at once,
alternating the two a few times in one run. Also the trusted process's memory (RSS) with
one caller and with the crowd: what each caller adds. Returns its summary line."""

from __future__ import annotations

import json
import threading
import time

import psutil
from benchlib import STATELESS, STATELESS_META, HttpPeer, RawHttp, Scratch

from tests.support.idp import AUDIENCE, identity_provider

CROWD = 20
PACE = 0.1  # seconds between one caller's calls
ARGS: dict[str, object] = {"timezone": "UTC"}


class PacedCaller:
    """One caller on a connection of its own, calling ``get_current_time`` at a steady pace."""

    def __init__(self, port: int, token: str) -> None:
        self.port = port
        self.raw = RawHttp(port)
        self.headers = {
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": STATELESS,
            "Mcp-Method": "tools/call",
            "Mcp-Name": "get_current_time",
        }
        params = {"name": "get_current_time", "arguments": ARGS, "_meta": STATELESS_META}
        self.body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                "params": params}).encode()  # fmt: skip
        self.times: list[float] = []
        self.failed: Exception | None = None

    def call(self) -> float:
        start = time.perf_counter()
        status, _, body = self.raw.post("/mcp", self.headers, self.body)
        took = time.perf_counter() - start
        if status != 200 or b'"isError": true' in body or b'"error"' in body:
            raise RuntimeError(f"call failed: {status} {body[:200]!r}")
        return took

    def reconnect(self) -> None:
        """A new connection (the endpoint closes one idle for a few seconds)."""
        self.raw.close()
        self.raw = RawHttp(self.port)

    def paced(self, calls: int, offset: float) -> None:
        """``calls`` calls, one every ``PACE`` seconds from ``offset`` on (callers start
        out of step, as independent agents do)."""
        start = time.perf_counter() + offset
        try:
            for i in range(calls):
                wait = start + i * PACE - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                self.times.append(self.call())
        except Exception as exc:
            self.failed = exc


def _round(callers: list[PacedCaller], calls: int, in_step: bool = False) -> list[float]:
    """Every caller paced at once (``in_step``: each call of every caller in the same
    instant); the latencies of their calls."""
    for caller in callers:
        caller.times = []
        caller.reconnect()
    threads = [
        threading.Thread(target=c.paced, args=(calls, 0.05 if in_step else PACE * i / len(callers)))
        for i, c in enumerate(callers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for caller in callers:
        if caller.failed is not None:
            raise RuntimeError(f"a caller's call failed: {caller.failed}")
    return [t for c in callers for t in c.times]


def _p(times: list[float], q: float) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def bench_callers(quick: bool) -> str:
    rounds, calls = (2, 20) if quick else (3, 60)
    scratch = Scratch.make()
    env = scratch.env()
    argv = scratch.run_argv("--server", "time", "--max-clients", str(CROWD + 4))
    print(
        f"per call, {CROWD} callers at once (stateless protocol, JWTs, servers of their own) "
        f"against one alone; each calls every {PACE * 1000:.0f} ms, {rounds} rounds of "
        f"{calls} calls each, alternating"
    )
    with identity_provider() as idp:
        expires = int(time.time()) + 3600
        oidc = ["--oidc-issuer", idp.issuer, "--oidc-audience", AUDIENCE]
        first = idp.token("caller-0", exp=expires)
        peer = HttpPeer([*argv, *oidc], env, stateless=True, bearer=first)
        try:
            process = psutil.Process(peer.proc.pid)
            callers = [PacedCaller(peer.port, first)] + [
                PacedCaller(peer.port, idp.token(f"caller-{i}", exp=expires))
                for i in range(1, CROWD)
            ]
            for _ in range(5):  # the first caller's servers, and the spare, started
                callers[0].call()
            time.sleep(1.0)
            alone_rss = process.memory_info().rss
            for caller in callers[1:]:  # every caller's servers started, warmed
                caller.reconnect()
                for _ in range(5):
                    caller.call()
            time.sleep(1.0)
            crowd_rss = process.memory_info().rss
            servers = sum(
                "mcp-server-time" in " ".join(p.cmdline())
                or "mcp_server_time" in " ".join(p.cmdline())
                for p in process.children(recursive=True)
            )
            alone: list[float] = []
            crowd: list[float] = []
            burst: list[float] = []
            for _ in range(rounds):
                alone += _round(callers[:1], calls)
                crowd += _round(callers, calls)
                burst += _round(callers, calls // 2, in_step=True)
            crowd_rss = max(crowd_rss, process.memory_info().rss)
        finally:
            peer.close()
    scratch.remove()
    per_caller = (crowd_rss - alone_rss) / (CROWD - 1) / 1e6
    print(f"  {'':28} {'p50':>8} {'p99':>8}")
    print(f"  {'one caller alone':28} {_p(alone, 0.5):7.3f}  {_p(alone, 0.99):7.3f} ms")
    print(f"  {f'{CROWD} callers at once':28} {_p(crowd, 0.5):7.3f}  {_p(crowd, 0.99):7.3f} ms")
    ratio = _p(crowd, 0.99) / _p(alone, 0.99)
    print(f"  p99 ratio {ratio:.2f}x   ({len(alone)} calls alone, {len(crowd)} in the crowd)")
    print(
        f"  {f'{CROWD} in step (a burst)':28} {_p(burst, 0.5):7.3f}  {_p(burst, 0.99):7.3f} ms"
        f"   (every caller's call in the same instant: {_p(burst, 0.99) / _p(alone, 0.99):.1f}x)"
    )
    print(
        f"  trusted process RSS: {alone_rss / 1e6:.1f} MB with one caller, "
        f"{crowd_rss / 1e6:.1f} MB with {CROWD}: {per_caller:.2f} MB per caller "
        f"({servers} processes of time servers under it)"
    )
    return f"p99 {ratio:.2f}x with {CROWD} callers; {per_caller:.2f} MB per caller"
