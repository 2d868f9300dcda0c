"""What the benchmark scripts share: a timed MCP peer (on the tests' JSON-lines client,
tests/support/client.py), a scratch home, statistics.

Every comparison alternates A and B within one run (machine noise then hits both alike);
the ratios and the added times are what to read, never the absolute times. BENCH_STDERR=1
shows the peers' stderr (ironcurtain's start-up report among it).
"""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.support.client import Client  # noqa: E402  (the one JSON-lines client)
from tests.support.ready import serving_url  # noqa: E402


class Peer:
    """A stdio MCP server spoken to in raw JSON lines (no client library in the way): its
    start (``ready``: spawn to ``initialize`` answered) and each call timed."""

    def __init__(self, argv: Sequence[str], env: dict[str, str], cwd: str | None = None) -> None:
        started = time.perf_counter()
        stderr = None if os.environ.get("BENCH_STDERR") else subprocess.DEVNULL
        self.client = Client.spawn(argv, env, cwd, stderr=stderr, new_session=True)
        self.proc = self.client.proc
        self.client.initialize(client="bench")
        self.ready = time.perf_counter() - started

    def call(self, tool: str, arguments: dict[str, object]) -> float:
        """One tools/call; its round-trip time."""
        start = time.perf_counter()
        reply = self.client.call(tool, arguments)
        took = time.perf_counter() - start
        if "error" in reply or reply.get("result", {}).get("isError"):
            raise RuntimeError(f"call failed: {reply}")
        return took

    def close(self) -> None:
        self.client.close(timeout=5)


class HttpPeer:
    """``ironcurtain run --http 0`` spoken to over one kept-alive connection (stdlib
    ``http.client``, no client library in the way): each call is a POST whose answer comes
    on that request's event stream."""

    TOKEN = "bench-token-" + "0" * 24

    def __init__(self, argv: Sequence[str], env: dict[str, str]) -> None:
        import http.client
        import json

        self._json = json
        stderr = subprocess.PIPE
        self.proc = subprocess.Popen(
            [*argv, "--http", "0"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env={**env, "IRONCURTAIN_HTTP_TOKEN": self.TOKEN},
            text=True,
            start_new_session=True,
        )
        assert self.proc.stderr is not None
        url, said = serving_url(self.proc.stderr, echo=bool(os.environ.get("BENCH_STDERR")))
        if not url:
            raise RuntimeError("ironcurtain --http did not start:\n" + "".join(said))
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.conn.connect()
        self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.headers = {
            "Authorization": f"Bearer {self.TOKEN}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        self._ids = 0
        init = {"protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "bench", "version": "1"}}  # fmt: skip
        self._post("initialize", init)
        self.headers["Mcp-Session-Id"] = self.session
        self.headers["MCP-Protocol-Version"] = "2025-11-25"
        self._post(None, None, notify="notifications/initialized")

    def _post(
        self, method: str | None, params: object, notify: str | None = None
    ) -> dict[str, object]:
        if notify is not None:
            body = {"jsonrpc": "2.0", "method": notify}
        else:
            self._ids += 1
            body = {"jsonrpc": "2.0", "id": self._ids, "method": method, "params": params}
        self.conn.request("POST", "/mcp", self._json.dumps(body), self.headers)
        response = self.conn.getresponse()
        self.session = response.getheader("mcp-session-id") or ""
        text = response.read().decode()
        if notify is not None:
            return {}
        for line in text.splitlines():
            if line.startswith("data: {"):
                message = self._json.loads(line[6:])
                if message.get("id") == self._ids:
                    return dict(message)
        raise RuntimeError(f"no answer: {response.status} {text[:200]}")

    def call(self, tool: str, arguments: dict[str, object]) -> float:
        start = time.perf_counter()
        reply = self._post("tools/call", {"name": tool, "arguments": arguments})
        took = time.perf_counter() - start
        if "error" in reply or reply.get("result", {}).get("isError"):  # type: ignore[union-attr]
            raise RuntimeError(f"call failed: {reply}")
        return took

    def close(self) -> None:
        self.conn.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@dataclass
class Scratch:
    """A throw-away home for one benchmark run: workspace, state, config, audit log."""

    root: str

    @classmethod
    def make(cls) -> Scratch:
        scratch = cls(tempfile.mkdtemp(prefix="ironcurtain-bench-"))
        os.makedirs(scratch.ws)
        return scratch

    @property
    def ws(self) -> str:
        return os.path.join(self.root, "ws")

    def env(self) -> dict[str, str]:
        return {
            "PATH": f"{BIN}:/usr/local/bin:/usr/bin:/bin",
            "HOME": os.path.expanduser("~"),
            "LANG": "C.UTF-8",
            "XDG_STATE_HOME": os.path.join(self.root, "state"),
            "XDG_CONFIG_HOME": os.path.join(self.root, "config"),
        }

    def run_argv(self, *extra: str) -> list[str]:
        """``ironcurtain run`` on this scratch home, its circuit breaker out of the way (the
        same call thousands of times is the benchmark here, not a stuck agent)."""
        return [
            os.path.join(BIN, "ironcurtain"),
            "run",
            "--workspace",
            self.ws,
            "--audit-log",
            os.path.join(self.root, "audit.jsonl"),
            "--max-identical-calls",
            "1000000000",
            *extra,
        ]

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(x: float, width: int = 8, digits: int = 3) -> str:
    return f"{x * 1000:{width}.{digits}f} ms"


def print_medians(
    times: dict[str, list[float]],
    base: str,
    indent: str = "  ",
    width: int = 14,
    digits: int = 1,
    with_min: bool = False,
) -> float:
    """One line per variant: median, added over ``base``'s median, ratio (and the minimum);
    returns ``base``'s median."""
    reference = statistics.median(times[base])
    for name, values in times.items():
        med = statistics.median(values)
        line = (
            f"{indent}{name:{width}} {ms(med, 8, digits)}  added {ms(med - reference, 8, digits)}"
            f"  ratio {med / reference:.2f}x"
        )
        print(line + (f"  (min {ms(min(values), 8, digits)})" if with_min else ""))
    return reference


def compare(label: str, base: Sequence[float], other: Sequence[float]) -> tuple[float, float]:
    """Print one A/B line pair; return (median added, p99 added) in seconds."""
    med_a, med_b = statistics.median(base), statistics.median(other)
    p99_a, p99_b = pct(base, 0.99), pct(other, 0.99)
    print(f"  {label}")
    print(f"    {'':14} {'median':>11} {'p99':>11}")
    print(f"    {'direct':14} {ms(med_a)} {ms(p99_a)}")
    print(f"    {'ironcurtain':14} {ms(med_b)} {ms(p99_b)}")
    print(
        f"    added: median {ms(med_b - med_a)}, p99 {ms(p99_b - p99_a)}; "
        f"ratio {med_b / med_a:.2f}x"
    )
    return med_b - med_a, p99_b - p99_a
