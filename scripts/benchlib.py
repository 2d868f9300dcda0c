"""What the benchmark scripts share: a timed MCP peer (on the tests' JSON-lines client,
tests/support/client.py), a scratch home, statistics.

Every comparison alternates A and B within one run (machine noise then hits both alike);
the ratios and the added times are what to read, never the absolute times. BENCH_STDERR=1
shows the peers' stderr (ironcurtain's start-up report among it).
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.support.client import Client  # noqa: E402  (the one JSON-lines client)
from tests.support.ready import serving_url  # noqa: E402

# What every request of the stateless era (MCP 2026-07-28) carries instead of a handshake.
STATELESS = "2026-07-28"
STATELESS_META = {
    "io.modelcontextprotocol/protocolVersion": STATELESS,
    "io.modelcontextprotocol/clientCapabilities": {},
}


class Peer:
    """A stdio MCP server spoken to in raw JSON lines (no client library in the way): its
    start (``ready``: spawn to ``initialize`` answered) and each call timed. ``stateless``:
    no ``initialize``, every request in the stateless era's form."""

    def __init__(
        self,
        argv: Sequence[str],
        env: dict[str, str],
        cwd: str | None = None,
        stateless: bool = False,
    ) -> None:
        started = time.perf_counter()
        stderr = None if os.environ.get("BENCH_STDERR") else subprocess.DEVNULL
        self.client = Client.spawn(argv, env, cwd, stderr=stderr, new_session=True)
        self.proc = self.client.proc
        self.meta = {"_meta": STATELESS_META} if stateless else {}
        if not stateless:
            self.client.initialize(client="bench")
        self.ready = time.perf_counter() - started

    def call(self, tool: str, arguments: Mapping[str, object]) -> float:
        """One tools/call; its round-trip time."""
        start = time.perf_counter()
        reply = self.client.ask("tools/call", {"name": tool, "arguments": arguments, **self.meta})
        took = time.perf_counter() - start
        if "error" in reply or reply.get("result", {}).get("isError"):
            raise RuntimeError(f"call failed: {reply}")
        return took

    def close(self) -> None:
        self.client.close(timeout=5)


class HttpPeer:
    """``ironcurtain run --http 0`` spoken to as :class:`Peer` speaks JSON lines, with no
    client library in the way: one kept-alive socket, each call a POST written whole and
    its response read to the end of the request's event stream. :meth:`call_stdlib` makes
    the same call through Python's ``http.client`` instead, whose own work (0.2 ms of CPU a
    call here, against 0.09 ms for the raw socket) would be counted as the server's."""

    TOKEN = "bench-token-" + "0" * 24

    def __init__(
        self,
        argv: Sequence[str],
        env: dict[str, str],
        stateless: bool = False,
        bearer: str | None = None,
    ) -> None:
        """``bearer``: what each request sends as its bearer token (else ``TOKEN``, which
        the session is given)."""
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
        self.port = int(url.rsplit(":", 1)[1].split("/")[0])
        self.raw = RawHttp(self.port)
        self._stdlib: http.client.HTTPConnection | None = None
        self.headers = {
            "Authorization": f"Bearer {bearer or self.TOKEN}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        self._ids = 0
        self.stateless = stateless
        if stateless:  # no session: every POST says its version, method and tool
            self.headers["MCP-Protocol-Version"] = STATELESS
            self.headers["Mcp-Method"] = "tools/call"
            return
        init = {"protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "bench", "version": "1"}}  # fmt: skip
        _, headers = self._post("initialize", init)
        self.headers["Mcp-Session-Id"] = headers.get("mcp-session-id", "")
        self.headers["MCP-Protocol-Version"] = "2025-11-25"
        self._post(None, None, notify="notifications/initialized")

    def _post(
        self, method: str | None, params: object, notify: str | None = None, stdlib: bool = False
    ) -> tuple[dict[str, object], dict[str, str]]:
        """The answer to one request (or nothing, for a notification), and the response's
        headers (names in lower case)."""
        body: dict[str, object]
        if notify is not None:
            body = {"jsonrpc": "2.0", "method": notify}
        else:
            self._ids += 1
            body = {"jsonrpc": "2.0", "id": self._ids, "method": method, "params": params}
        data = json.dumps(body).encode()
        if stdlib:
            status, headers, raw = self._post_stdlib(data)
        else:
            status, headers, raw = self.raw.post("/mcp", self.headers, data)
        text = raw.decode()
        if notify is not None:
            return {}, headers
        if headers.get("content-type", "").startswith("application/json"):
            return dict(json.loads(text)), headers
        for line in text.splitlines():
            if line.startswith("data: {"):
                message = json.loads(line[6:])
                if message.get("id") == self._ids:
                    return dict(message), headers
        raise RuntimeError(f"no answer: {status} {text[:200]}")

    def _post_stdlib(self, data: bytes) -> tuple[int, dict[str, str], bytes]:
        if self._stdlib is None:
            self._stdlib = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            self._stdlib.connect()
            assert self._stdlib.sock is not None
            self._stdlib.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._stdlib.request("POST", "/mcp", data, self.headers)
        response = self._stdlib.getresponse()
        headers = {k.lower(): v for k, v in response.getheaders()}
        return response.status, headers, response.read()

    def call(self, tool: str, arguments: Mapping[str, object], stdlib: bool = False) -> float:
        """One tools/call; its round-trip time."""
        params: dict[str, object] = {"name": tool, "arguments": arguments}
        if self.stateless:
            params["_meta"] = STATELESS_META
            self.headers["Mcp-Name"] = tool
        start = time.perf_counter()
        reply, _ = self._post("tools/call", params, stdlib=stdlib)
        took = time.perf_counter() - start
        result = reply.get("result")
        if "error" in reply or (isinstance(result, dict) and result.get("isError")):
            raise RuntimeError(f"call failed: {reply}")
        return took

    def call_stdlib(self, tool: str, arguments: Mapping[str, object]) -> float:
        """The same through ``http.client``."""
        return self.call(tool, arguments, stdlib=True)

    def close(self) -> None:
        self.raw.close()
        if self._stdlib is not None:
            self._stdlib.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class RawHttp:
    """HTTP/1.1 on one kept-alive socket with as little work as a client can do: a request
    written in one piece; a response read whole (its head, then a ``Content-Length`` body
    or every chunk up to the last)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buffer = b""

    def post(
        self, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        """Status, headers (names in lower case) and body of one POST."""
        lines = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{self.port}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        lines.append(f"Content-Length: {len(body)}")
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        head = self._until(b"\r\n\r\n").decode("latin-1").split("\r\n")
        status = int(head[0].split(" ", 2)[1])
        fields: dict[str, str] = {}
        for line in head[1:]:
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
        if fields.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self._until(b"\r\n").split(b";")[0], 16)
                chunks.append(self._exactly(size))
                self._exactly(2)  # the CRLF after each chunk (after the last one too)
                if size == 0:
                    return status, fields, b"".join(chunks)
        return status, fields, self._exactly(int(fields.get("content-length", "0")))

    def _until(self, mark: bytes) -> bytes:
        while mark not in self._buffer:
            self._fill()
        found, self._buffer = self._buffer.split(mark, 1)
        return found

    def _exactly(self, count: int) -> bytes:
        while len(self._buffer) < count:
            self._fill()
        found, self._buffer = self._buffer[:count], self._buffer[count:]
        return found

    def _fill(self) -> None:
        data = self.sock.recv(1 << 16)
        if not data:
            raise EOFError("the server closed the connection")
        self._buffer += data

    def close(self) -> None:
        self.sock.close()


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

    def run_argv(self, *extra: str, workspace: str | None = None) -> list[str]:
        """``ironcurtain run`` on this scratch home (``workspace``: another than its own),
        its circuit breaker out of the way (the same call thousands of times is the
        benchmark here, not a stuck agent)."""
        return [
            os.path.join(BIN, "ironcurtain"),
            "run",
            "--workspace",
            workspace or self.ws,
            "--audit-log",
            os.path.join(self.root, "audit.jsonl"),
            "--max-identical-calls",
            "1000000000",
            *extra,
        ]

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def cpu_seconds(pid: int) -> float:
    """Seconds of CPU the threads of ``pid`` have used so far (their schedstat: far steadier
    than latency on a loaded machine)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/schedstat") as handle:
            total += int(handle.read().split()[0])
    return total / 1e9


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


def compare(
    label: str,
    base: Sequence[float],
    other: Sequence[float],
    names: tuple[str, str] = ("direct", "ironcurtain"),
) -> tuple[float, float]:
    """Print one A/B line pair; return (median added, p99 added) in seconds."""
    med_a, med_b = statistics.median(base), statistics.median(other)
    p99_a, p99_b = pct(base, 0.99), pct(other, 0.99)
    print(f"  {label}")
    print(f"    {'':14} {'median':>11} {'p99':>11}")
    print(f"    {names[0]:14} {ms(med_a)} {ms(p99_a)}")
    print(f"    {names[1]:14} {ms(med_b)} {ms(p99_b)}")
    print(
        f"    added: median {ms(med_b - med_a)}, p99 {ms(p99_b - p99_a)}; "
        f"ratio {med_b / med_a:.2f}x"
    )
    return med_b - med_a, p99_b - p99_a


def alternate(
    first: Callable[[], float], second: Callable[[], float], calls: int, warm: int
) -> tuple[list[float], list[float]]:
    """Each one's round-trip times, called by turns after ``warm`` turns uncounted."""
    a: list[float] = []
    b: list[float] = []
    for i in range(warm + calls):
        x, y = first(), second()
        if i >= warm:
            a.append(x)
            b.append(y)
    return a, b
