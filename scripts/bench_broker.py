"""The brokered-secrets benchmarks of scripts/bench.py, each returning its summary line.

broker     a request to a secret's host through the egress proxy's broker (TLS opened
           by the proxy with the session CA's certificate and made again to the host,
           the sentinel swapped for the value, the answer read for the value) against
           the same request through the plain CONNECT tunnel (TLS end to end), both on a
           kept-alive connection, alternating, same run; and a new host's first
           connection (CONNECT, TLS, one request) the two ways. The host is an HTTPS
           server on loopback with its own CA, in a process of its own; the proxies run
           in another (as in ironcurtain's process); the client is a blocking socket.
arguments  scanning 1 KiB of a tool call's arguments for credentials (every detector,
           and one configured secret's forms), in process, against no scan."""

from __future__ import annotations

import asyncio
import multiprocessing
import re
import socket
import ssl
import statistics
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from benchlib import alternate, compare, ms

from launcher.host.session_ca import SessionCA
from launcher.plan.secrets_plan import Brokered, new_sentinel
from launcher.servers.broker import Broker
from launcher.servers.egress_proxy import EgressProxy
from policy.egress import EgressRules
from tests.support.tls_upstream import make_authority

VALUE = "s3cr3t-Value-for-the-api-7f3a9c1e5d2b"
PAGE = b'{"login": "octocat", "id": 1, "plan": {"name": "free"}}' * 8


def _serve_host(chain: str, sender: Connection) -> None:
    """The host's process: an HTTPS API on loopback, its port sent back."""

    async def main() -> None:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(chain)
        server = await asyncio.start_server(_host, "127.0.0.1", 0, ssl=tls)
        sender.send(server.sockets[0].getsockname()[1])
        await asyncio.Event().wait()

    asyncio.run(main())


async def _host(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Each request answered with ``PAGE``, the connection kept alive."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
            if length:
                await reader.readexactly(int(length.group(1)))
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(PAGE), PAGE))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
        pass
    finally:
        writer.close()


def _serve_proxies(
    directory: str, names: list[str], port: int, sentinel: str, ca_file: str, sender: Connection
) -> None:
    """The trusted process's part: two egress proxies for the same server, one brokering
    the secret for every name, one a plain tunnel; the session CA's certificate sent back."""

    async def main() -> None:
        allowed = [f"{name}:{port}" for name in names]
        rules = EgressRules.from_config(allowed, [], dict.fromkeys(names, "127.0.0.1"))
        hosts = tuple((name, None) for name in names)
        ca = SessionCA("bench")
        broker = Broker([Brokered("API_TOKEN", sentinel, VALUE, hosts)], ca)
        broker.upstream.load_verify_locations(ca_file)
        for way, which in (("brokered", broker), ("plain", None)):
            proxy = EgressProxy("bench", rules, f"{directory}/{way}.sock", _ignore, which)
            await proxy.start()
        sender.send(ca.pem())
        await asyncio.Event().wait()

    asyncio.run(main())


class _Setup:
    """The host and the proxies, each in a process of its own (as they are: a remote host,
    ironcurtain's process), and how the client trusts each way."""

    def __init__(self, directory: Path, names: list[str]) -> None:
        self.names = names
        self.sentinel = new_sentinel()
        ca_file, chain = make_authority(directory, names)
        forked = multiprocessing.get_context("fork")
        receiver, sender = forked.Pipe(duplex=False)
        self.children = [forked.Process(target=_serve_host, args=(str(chain), sender))]
        self.children[0].start()
        self.port = receiver.recv()
        args = (str(directory), names, self.port, self.sentinel, str(ca_file), sender)
        self.children.append(forked.Process(target=_serve_proxies, args=args))
        self.children[1].start()
        session_ca = receiver.recv()
        self.sockets = {way: f"{directory}/{way}.sock" for way in ("brokered", "plain")}
        self.trust = {
            "brokered": ssl.create_default_context(cadata=session_ca.decode()),
            "plain": ssl.create_default_context(cafile=str(ca_file)),
        }

    def connect(self, way: str, name: str) -> _Client:
        return _Client(self, way, name)

    def close(self) -> None:
        for child in self.children:
            child.terminate()
            child.join(10)


def _ignore(refusal: object) -> None:
    print(f"  refused: {refusal}")


class _Client:
    """A server's HTTPS client inside the sandbox: CONNECT, TLS, then requests."""

    def __init__(self, setup: _Setup, way: str, name: str) -> None:
        raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        raw.connect(setup.sockets[way])
        raw.sendall(f"CONNECT {name}:{setup.port} HTTP/1.1\r\n\r\n".encode())
        answer = b""
        while not answer.endswith(b"\r\n\r\n"):
            answer += raw.recv(1)
        assert b" 200 " in answer, answer
        self.sock = setup.trust[way].wrap_socket(raw, server_hostname=name)
        token = setup.sentinel if way == "brokered" else VALUE
        self.request = (
            f"GET /user HTTP/1.1\r\nHost: {name}\r\nAuthorization: Bearer {token}\r\n"
            "Accept: application/json\r\nUser-Agent: bench\r\n\r\n"
        ).encode()
        self.buffer = b""

    def call(self) -> float:
        """One request's round trip, its answer read whole, in seconds."""
        start = time.perf_counter()
        self.sock.sendall(self.request)
        head = self._until(b"\r\n\r\n")
        if b"chunked" in head.lower():
            while (size := int(self._until(b"\r\n").strip(), 16)) != 0:
                self._exactly(size + 2)
            self._until(b"\r\n")
        else:
            length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
            self._exactly(int(length.group(1)) if length else 0)
        return time.perf_counter() - start

    def _until(self, end: bytes) -> bytes:
        while end not in self.buffer:
            self._more()
        data, _, self.buffer = self.buffer.partition(end)
        return data + end

    def _exactly(self, size: int) -> bytes:
        while len(self.buffer) < size:
            self._more()
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data

    def _more(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("the proxy ended the connection")
        self.buffer += data

    def close(self) -> None:
        self.sock.close()


def bench_broker(quick: bool) -> str:
    calls, warm = (300, 30) if quick else (2000, 200)
    firsts = 30 if quick else 150
    names = ["api.bench.test"] + [f"h{i}.bench.test" for i in range(2 * (firsts + 5))]
    with tempfile.TemporaryDirectory(prefix="bench-broker-") as directory:
        setup = _Setup(Path(directory), names)
        try:
            print(f"a brokered request vs the plain tunnel, kept alive, {calls} each, alternating")
            brokered, plain = setup.connect("brokered", names[0]), setup.connect("plain", names[0])
            a, b = alternate(plain.call, brokered.call, calls, warm)
            brokered.close()
            plain.close()
            med, _ = compare("GET /user, 440 B answer", a, b, ("plain tunnel", "brokered"))
            ratio = statistics.median(b) / statistics.median(a)
            print(f"a new host's first connection (CONNECT, TLS, one request), {firsts} each")
            fresh = iter(names[1:])
            first = _first_connections(setup, fresh, firsts)
        finally:
            setup.close()
    return (
        f"{ratio:.2f}x per request kept alive ({med * 1000:+.3f} ms); "
        f"first connection {first * 1000:+.2f} ms"
    )


def _first_connections(setup: _Setup, fresh: Any, count: int) -> float:
    """The median added time of a new host's first connection, brokered over plain."""

    def once(way: str) -> float:
        start = time.perf_counter()
        client = setup.connect(way, next(fresh))
        client.call()
        elapsed = time.perf_counter() - start
        client.close()
        return elapsed

    for _ in range(2):  # warm-up: imports, the first contexts
        once("plain")
        once("brokered")
    a, b = alternate(lambda: once("plain"), lambda: once("brokered"), count, 0)
    med, _ = compare("first connection", a, b, ("plain tunnel", "brokered"))
    return med


def bench_arguments(quick: bool) -> str:
    """Scanning 1 KiB of arguments (every detector and one configured secret's forms),
    in process, against the call with no scan: the added time is the scan's."""
    from policy.argument_scan import ArgumentScan, scan_arguments

    rounds = 2000 if quick else 20000
    scan = ArgumentScan.of([("API_TOKEN", VALUE)])
    line = "Some notes on the release: fixed the parser, 12 tests added, docs/ updated.\n"
    arguments: dict[str, object] = {
        "path": "/workspace/notes/release.md",
        "content": (line * 14)[:950],
        "labels": ["docs", "release"],
    }
    size = len(str(arguments))
    assert not scan_arguments(arguments, scan)
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        scan_arguments(arguments, scan)
        times.append(time.perf_counter() - start)
    scan_time = statistics.median(times)
    print(f"argument scanning, {size} B of arguments, {rounds} scans in process")
    print(f"  median {ms(scan_time)} (p99 {ms(sorted(times)[int(len(times) * 0.99)])})")
    return f"+{scan_time * 1000:.4f} ms for {size} B of arguments"
