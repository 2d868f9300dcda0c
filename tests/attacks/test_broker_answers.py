"""What the secret's host answers, attacked: an answer the broker could not check for the
value (a content coding sent under two headers, a transfer coding other than chunked, which
the broker would take off and pass on unlabelled), an answer to a WebSocket upgrade the host
switches protocols on anyway, a body after an answer that has none (HEAD, 204, 304). The
host is a real TLS server on loopback with its own CA that says the request's credential
back; the hostile server is the one that reads the answers, and may decompress what it
gets. The promise: the value never reaches the server in any form it can undo. Each control
shows the same answer carrying the value to a server that is not brokered."""

from __future__ import annotations

import asyncio
import gzip
import re
import ssl
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from launcher.servers import broker
from tests.attacks.test_broker_keepalive import (
    AUTH,
    HOST,
    SENTINEL,
    VALUE,
    KeptAlive,
    answers,
    exchange,
)

Answer = Callable[[bytes], bytes]


def _credential(request: bytes) -> bytes:
    found = re.search(rb"(?im)^authorization:\s*bearer\s+(\S+)", request)
    return b"auth=" + (found.group(1) if found else b"-")


@dataclass
class Scripted(KeptAlive):
    """A TLS host answering each request with ``answer(request)``, then ending the
    connection when ``close`` (or when the request asks)."""

    answer: Answer = _credential
    close: bool = False

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.streams.append(b"")
        try:
            while True:
                request = await reader.readuntil(b"\r\n\r\n")
                self.streams[-1] += request
                self.requests.append(request)
                writer.write(self.answer(request))
                await writer.drain()
                if self.close or re.search(rb"(?im)^connection:\s*close", request):
                    break
            # Whatever else the server sends on the connection, kept (after an upgrade).
            async with asyncio.timeout(5):
                while more := await reader.read(65536):
                    self.streams[-1] += more
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError, TimeoutError):
            pass
        finally:
            writer.close()


def _chunks(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data)


def gzip_twice_labelled(request: bytes) -> bytes:
    """The credential gzipped, labelled by two Content-Encoding headers, the last saying
    ``identity`` (a reader that keeps the last sees none; the server's reader sees both)."""
    body = gzip.compress(_credential(request))
    head = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Encoding: identity\r\n"
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body


def gzip_transfer_coded(request: bytes) -> bytes:
    """The credential gzipped as a transfer coding, then chunked."""
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
    return head + _chunks(gzip.compress(_credential(request)))


def deflate_under_one_header(request: bytes) -> bytes:
    body = zlib.compress(_credential(request))
    head = b"HTTP/1.1 200 OK\r\nContent-Encoding: identity, deflate\r\n"
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body


CODED: dict[str, Answer] = {
    "gzip under two Content-Encoding headers": gzip_twice_labelled,
    "gzip as a transfer coding": gzip_transfer_coded,
    "deflate after identity in one header": deflate_under_one_header,
}


def _undone(seen: bytes) -> bytes:
    """What the server reads, and everything it can decompress out of it."""
    out = seen
    for start in range(len(seen)):
        for wbits in (31, 15):  # gzip, zlib
            try:
                out += zlib.decompressobj(wbits).decompress(seen[start:])
            except zlib.error:
                continue
    return out


def _get(*more: str) -> bytes:
    lines = ["GET /me HTTP/1.1", f"Host: {HOST}", AUTH, *more, "Connection: close", "", ""]
    return "\r\n".join(lines).encode()


@pytest.mark.parametrize("name", list(CODED))
def test_an_answer_the_broker_cannot_read_whole_is_refused(tmp_path: Path, name: str) -> None:
    run = exchange(tmp_path, [_get()], host=Scripted(answer=CODED[name]))
    assert f"Bearer {VALUE}".encode() in run.host.requests[0]  # the host had the value
    assert VALUE.encode() not in _undone(run.seen)
    assert [r for r in run.refusals if "which the broker cannot check" in r.reason]
    assert all(VALUE not in r.reason for r in run.refusals)
    assert run.seen.startswith(b"HTTP/1.1 502 ")


@pytest.mark.parametrize("name", list(CODED))
def test_control_the_answer_carries_the_value_to_an_unbrokered_server(
    tmp_path: Path, name: str
) -> None:
    run = exchange(tmp_path, [_get()], brokered=False, host=Scripted(answer=CODED[name]))
    assert VALUE.encode() in _undone(run.seen)


def switching(request: bytes) -> bytes:
    """Protocols switched whatever the request asked, then the credential said back in what
    follows (as a WebSocket host would in its frames), and the connection ended."""
    return b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n" + _credential(request)


def test_an_upgrade_neither_reaches_the_host_nor_opens_a_raw_pipe(tmp_path: Path) -> None:
    upgrade = _get("Upgrade: websocket", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==")
    upgrade = upgrade.replace(b"Connection: close", b"Connection: Upgrade")
    after = f"frame {SENTINEL} after the upgrade".encode()
    run = exchange(tmp_path, [upgrade + after], host=Scripted(answer=switching, close=True))
    (request,) = run.host.requests
    assert b"upgrade" not in request.lower()  # the broker asked for no switch
    assert f"Bearer {VALUE}".encode() in request
    # What the host said after the switch went back devalued; nothing the server wrote
    # after it went anywhere (it was never read as a request, so never had its sentinel
    # swapped, and never passed on raw).
    said = b"".join(answers(run.seen))
    assert VALUE.encode() not in run.seen and b"auth=" + SENTINEL.encode() in said
    assert run.host.streams[0] == request


def test_control_a_plain_tunnel_passes_the_upgrade_and_what_follows(tmp_path: Path) -> None:
    upgrade = _get("Upgrade: websocket").replace(b"Connection: close", b"Connection: Upgrade")
    after = f"frame {SENTINEL} after the upgrade".encode()
    run = exchange(
        tmp_path, [upgrade + after], brokered=False, host=Scripted(answer=switching, close=True)
    )
    assert b"upgrade: websocket" in run.host.requests[0].lower()
    assert VALUE.encode() in run.seen and VALUE.encode() in run.host.streams[0]


def with_a_stray_body(request: bytes) -> bytes:
    """An answer that has no body (to HEAD; a 204) followed by one anyway, holding the
    credential: a reader that skips it reads it as the next answer."""
    status = b"200 OK" if request.startswith(b"HEAD ") else b"204 No Content"
    stray = _credential(request)
    return b"HTTP/1.1 %s\r\nContent-Length: %d\r\n\r\n%s" % (status, len(stray), stray)


@pytest.mark.parametrize("method", ["HEAD", "DELETE"])
def test_a_body_after_an_answer_without_one_reaches_the_server_devalued(
    tmp_path: Path, method: str
) -> None:
    first = _get().replace(b"GET ", f"{method} ".encode()).replace(b"Connection: close\r\n", b"")
    run = exchange(tmp_path, [first + _get()], host=Scripted(answer=with_a_stray_body))
    assert f"Bearer {VALUE}".encode() in run.host.requests[0]
    assert VALUE.encode() not in run.seen


def test_control_the_stray_body_carries_the_value_to_an_unbrokered_server(
    tmp_path: Path,
) -> None:
    first = _get().replace(b"GET ", b"HEAD ").replace(b"Connection: close\r\n", b"")
    run = exchange(
        tmp_path, [first + _get()], brokered=False, host=Scripted(answer=with_a_stray_body)
    )
    assert VALUE.encode() in run.seen


@dataclass
class Slow(KeptAlive):
    """A host that works on each request longer than a request's head may take to come."""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.streams.append(b"")
        try:
            request = await reader.readuntil(b"\r\n\r\n")
            self.requests.append(request)
            await asyncio.sleep(3)
            body = _credential(request)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
        finally:
            writer.close()


def test_a_host_that_works_long_on_a_request_is_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As a plain tunnel waits: the limit on a request's head coming is no limit on the
    # host's work (here made shorter than that work).
    monkeypatch.setattr(broker, "HEAD_TIMEOUT", 1.0)
    run = exchange(tmp_path, [_get()], host=Slow())
    said = b"".join(answers(run.seen))
    assert said.startswith(b"HTTP/1.1 200 ") and b"auth=" + SENTINEL.encode() in said
    assert not run.refusals and VALUE.encode() not in run.seen


def chunked_with_trailer(request: bytes) -> bytes:
    """The credential said back chunked, and again in a trailer after the last chunk."""
    said = _credential(request)
    trailer = b"X-Echo: " + said + b"\r\n"
    return (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        + _chunks(said)[:-2]
        + trailer
        + b"\r\n"
    )


def chunked_plain(request: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + _chunks(_credential(request))


@pytest.mark.parametrize("answer", [chunked_plain, chunked_with_trailer], ids=["plain", "trailer"])
def test_chunked_answers_on_a_kept_connection_each_reach_the_server_whole(
    tmp_path: Path, answer: Answer
) -> None:
    first = _get().replace(b"Connection: close\r\n", b"")
    run = exchange(tmp_path, [first, first, _get()], host=Scripted(answer=answer))
    said = answers(run.seen)
    assert len(said) == 3 and all(a.startswith(b"HTTP/1.1 200 ") for a in said), run.seen
    assert all(a.endswith(b"auth=" + SENTINEL.encode()) for a in said), said
    assert VALUE.encode() not in run.seen and len(run.host.streams) == 1
