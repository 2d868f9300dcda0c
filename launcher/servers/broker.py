"""Brokered secrets in the egress proxy: a server holds a sentinel, and the proxy puts the
value in its place only in a request to one of the secret's hosts, over TLS the proxy opens
itself (a certificate of the server's session CA) and makes again to the real host, which
is verified against this machine's trust store.

The value goes in request headers (an ``Authorization: Bearer``, inside ``Basic``
credentials decoded and encoded again, any other header) and, where the secret says so,
the body. A sentinel anywhere else (the URL, a body the secret does not allow, a request to
another host, a plain-HTTP request) is refused. A brokered connection carries as many
requests as the server sends (HTTP/1.1 persistent connections on both sides), each read,
checked and swapped on its own and sent to the host only once the answer before it is
whole, so no request rides on another's framing. A chunked request body is read out of its
chunks (bounded), checked, and sent on with a length. What the host answers has the value
replaced by the sentinel again, in its head and its body (sent on chunked: the sentinel
and the value differ in length)."""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import functools
import json
import re
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import NamedTuple
from urllib.parse import quote, quote_plus

from launcher.host.session_ca import SessionCA
from launcher.plan.secrets_plan import SENTINEL_PREFIX, Brokered
from policy.urls import split_host_port

HEAD_LIMIT = 64 * 1024
HEAD_TIMEOUT = 15.0
# How long a kept-alive brokered connection may wait for its next request.
IDLE_TIMEOUT = 60.0
# How long the host may take to begin its answer (an API may work minutes on one request,
# as it does through a plain tunnel, which waits as long as the server does).
ANSWER_TIMEOUT = 600.0
# The largest body a brokered request may have (chunked or not): it is read whole, checked,
# then sent.
BODY_LIMIT = 16 * 1024 * 1024
# Not sent on: hop-by-hop; ``Expect`` (the broker has the whole body before it sends the
# head, and answers a client's ``100-continue`` itself); ``Accept-Encoding`` (the answer is
# asked for as ``identity``: a compressed one could hide the value from the broker).
_HOP = {"proxy-connection", "proxy-authorization", "connection", "keep-alive", "upgrade", "te"}
_HOP |= {"expect", "accept-encoding"}
# Not said back to the server: the connection to the host is the broker's own.
_HOP_OUT = (b"connection", b"keep-alive")
# Methods a request may be sent again with, when a kept connection closed before its answer.
_IDEMPOTENT = (b"GET ", b"HEAD ", b"OPTIONS ", b"PUT ", b"DELETE ")
_FRAMING = (b"content-length", b"transfer-encoding", b"connection", b"keep-alive")
_BASIC = re.compile(r"(\s*basic\s+)(\S+)(\s*)", re.IGNORECASE)
# A header name is a token; its value holds no control character but a tab. Anything else
# (a bare LF, a folded line, a space before the colon) is a line a lenient host may split or
# join differently than the broker read it: a second Host, a Transfer-Encoding it never saw.
_LINES = re.compile(r"(?:[!#$%&'*+.^_`|~0-9A-Za-z-]+:[^\x00-\x08\x0a-\x1f\x7f]*\r\n)*\r\n")
_NAMES = re.compile(r"^[^:]*", re.MULTILINE)
_CONTINUE = re.compile(rb"(?im)^expect[ \t]*:[ \t]*100-continue[ \t]*\r?$")
_INTERIM = re.compile(rb"HTTP/1\.\d 1(?!01)\d\d[ \r]")
# A chunk's size line: hex digits alone, then any extension of printable characters.
_CHUNK = re.compile(rb"([0-9A-Fa-f]{1,16})(;[\x20-\x7e\t]*)?\r\n")

Upstream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class Head(NamedTuple):
    """A brokered request's head as it is sent on, and how its body is framed."""

    out: bytes  # without a Content-Length (the relay puts the body's own)
    length: int | None  # its Content-Length (None: none given)
    chunked: bool  # its body comes in chunks
    close: bool  # the server asked for the connection to end after this request


class BrokerRefusal(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class Broker:
    """One server's brokered secrets, its session CA, and how upstreams are verified."""

    def __init__(self, secrets: Sequence[Brokered], ca: SessionCA) -> None:
        self.secrets = tuple(secrets)
        self.ca = ca
        # Every host the proxy opens TLS for, named in one certificate: a host's first
        # connection does not wait for a certificate of its own to be made.
        self.names = tuple(sorted({name for s in self.secrets for name, _ in s.hosts}))
        # This machine's trust store (OpenSSL's: SSL_CERT_FILE / SSL_CERT_DIR in
        # ironcurtain's own environment add to or replace it).
        self.upstream = ssl.create_default_context()
        self.upstream.set_alpn_protocols(["http/1.1"])

    def terminates(self, host: str, port: int) -> bool:
        return any(s.goes_to(host, port) for s in self.secrets)

    def carried(self, data: bytes) -> Brokered | None:
        """The secret whose sentinel ``data`` holds (None: none)."""
        if SENTINEL_PREFIX.encode() not in data:
            return None
        return next((s for s in self.secrets if s.sentinel.encode() in data), None)

    async def relay(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        host: str,
        port: int,
        upstream: Upstream,
        reopen: Callable[[], Awaitable[Upstream]],
    ) -> None:
        """The requests of a CONNECT to ``host``: TLS opened on both sides, each request
        checked and its sentinels swapped, sent to the host once the answer before it is
        whole, its answer relayed; until either side ends the connection. A host that
        closed a kept connection is connected to again (``reopen``), and a request it
        closed without answering on one is sent again there when sending twice is safe."""
        await writer.start_tls(self.ca.server_context(*self.names))
        link = _Link(upstream, reopen, host, self._secure)
        try:
            await link.secure()
            timeout = HEAD_TIMEOUT
            while (head := await _next_head(reader, timeout)) is not None:
                request = rewrite_head(head, self.secrets, host, port)
                body = await _request_body(reader, writer, head, request)
                new_body = rewrite_body(body, self.secrets, host, port)
                out = request.out
                if request.length is not None or request.chunked:
                    out = _with_length(out, len(new_body))
                mask = _Devalue(self.secrets, _basic_forms(out, self.secrets))
                for again in (False, True):
                    up_reader = await link.send(out + new_body, fresh=again)
                    try:
                        keep = await self._answer(up_reader, writer, head, mask, request.close)
                    except _Unanswered:
                        if again or not link.reused or not head.startswith(_IDEMPOTENT):
                            raise BrokerRefusal(502, f"{host} closed without answering") from None
                        continue
                    break
                if not keep:
                    return
                link.reused = True
                timeout = IDLE_TIMEOUT
        finally:
            link.close()

    async def _secure(self, upstream: Upstream, host: str) -> Upstream:
        """``upstream`` with TLS opened to ``host``, its certificate verified."""
        try:
            await upstream[1].start_tls(self.upstream, server_hostname=host)
        except ssl.SSLError as exc:
            why = getattr(exc, "verify_message", None) or exc.reason or str(exc)
            raise BrokerRefusal(502, f"{host}'s certificate did not verify: {why}") from None
        return upstream

    async def _answer(
        self,
        up_reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        request: bytes,
        mask: _Devalue,
        close: bool,
    ) -> bool:
        """The host's answer with each value put back as its sentinel: in its head (and
        each interim ``1xx`` head before it) and in its body, read out of its framing
        (a value cut across chunks is seen whole) and sent on chunked (to an HTTP/1.0
        server: delimited by the close). Whether the connection goes on."""
        head = await _answer_head(up_reader, mask)
        while _INTERIM.match(head):
            writer.write(head)
            async with asyncio.timeout(ANSWER_TIMEOUT):
                head = mask.whole(await up_reader.readuntil(b"\r\n\r\n"))
        fields = _fields(head)
        tokens = fields.get(b"connection", b"").lower().replace(b" ", b"").split(b",")
        close = close or b"close" in tokens or not head.startswith(b"HTTP/1.1 ")
        lines = head.split(b"\r\n")[:-2]
        if request.startswith(b"HEAD ") or head[9:12] in (b"204", b"304"):
            kept = [ln for ln in lines if ln.partition(b":")[0].strip().lower() not in _HOP_OUT]
            writer.write(b"\r\n".join([*kept, *_closing(close), b"", b""]))
            return not close
        _readable(fields)
        delimited = b"chunked" in fields.get(b"transfer-encoding", b"").lower()
        delimited = delimited or b"content-length" in fields
        close = close or not delimited
        chunked = b" HTTP/1.1\r\n" in request.split(b"\r\n", 1)[0] + b"\r\n"
        kept = [ln for ln in lines if ln.partition(b":")[0].strip().lower() not in _FRAMING]
        framing = [b"Transfer-Encoding: chunked"] if chunked else []
        pending = b"\r\n".join([*kept, *framing, *_closing(close or not chunked), b"", b""])
        # Written as it comes, but each write whole: the head with the first piece, the
        # last piece with the end (one write, one wake-up of the server, for a small answer).
        last = False
        async for piece, last in _body(up_reader, fields):
            writer.write(pending + _framed(mask.feed(piece, end=last), chunked, last))
            pending = b""
            await writer.drain()
        if not last:
            writer.write(pending + _framed(mask.feed(b"", end=True), chunked, True))
        await writer.drain()
        return not close and chunked


class _Unanswered(Exception):
    """The host closed the connection before a byte of its answer."""


async def _answer_head(up_reader: asyncio.StreamReader, mask: _Devalue) -> bytes:
    """The first head of the host's answer, its values put back as their sentinels."""
    try:
        async with asyncio.timeout(ANSWER_TIMEOUT):
            return mask.whole(await up_reader.readuntil(b"\r\n\r\n"))
    except TimeoutError:
        raise BrokerRefusal(504, f"no answer within {ANSWER_TIMEOUT:.0f} s") from None
    except (asyncio.IncompleteReadError, ConnectionResetError) as exc:
        if isinstance(exc, asyncio.IncompleteReadError) and exc.partial:
            raise
        raise _Unanswered from None


class _Link:
    """The connection to the host, made again when the host has closed it."""

    def __init__(
        self,
        first: Upstream,
        reopen: Callable[[], Awaitable[Upstream]],
        host: str,
        secure: Callable[[Upstream, str], Awaitable[Upstream]],
    ) -> None:
        self.opened = [first]
        self.reopen, self.host, self._secure = reopen, host, secure
        self.reused = False  # an answer has come on it before

    async def secure(self) -> None:
        await self._secure(self.opened[-1], self.host)

    async def send(self, data: bytes, fresh: bool = False) -> asyncio.StreamReader:
        """``data`` sent to the host (on a new connection when it closed this one, or when
        ``fresh``); the reader its answer comes on."""
        if fresh or self.opened[-1][0].at_eof():
            self.opened.append(await self.reopen())
            await self.secure()
            self.reused = False
        self.opened[-1][1].write(data)
        await self.opened[-1][1].drain()
        return self.opened[-1][0]

    def close(self) -> None:
        for _, up_writer in self.opened:
            up_writer.close()


def _closing(close: bool) -> list[bytes]:
    return [b"Connection: close"] if close else []


def _framed(data: bytes, chunked: bool, last: bool) -> bytes:
    """``data`` as a chunk (none when it is empty: an empty chunk is the last), and the
    last chunk after it when ``last``."""
    if not chunked:
        return data
    framed = b"%x\r\n%s\r\n" % (len(data), data) if data else b""
    return framed + b"0\r\n\r\n" if last else framed


async def _next_head(reader: asyncio.StreamReader, timeout: float) -> bytes | None:
    """The next request's head (None: the server ended the connection between requests);
    empty lines before it (some clients end a body with one) are passed over."""
    try:
        async with asyncio.timeout(timeout):
            head = await reader.readuntil(b"\r\n\r\n")
            while head.startswith(b"\r\n"):
                head = head[2:] or await reader.readuntil(b"\r\n\r\n")
            return head
    except asyncio.LimitOverrunError:
        raise BrokerRefusal(431, "request head too large") from None
    except asyncio.IncompleteReadError as exc:
        if exc.partial.strip():
            raise
        return None


async def _request_body(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes, request: Head
) -> bytes:
    """A request's body, whole: ``Content-Length`` bytes, or its chunks' data joined."""
    if (request.length or 0) > BODY_LIMIT:
        raise BrokerRefusal(413, f"a brokered request's body is at most {BODY_LIMIT} bytes")
    if (request.length or request.chunked) and _CONTINUE.search(head):
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    if request.chunked:
        return await read_chunked(reader)
    return await reader.readexactly(request.length) if request.length else b""


async def read_chunked(reader: asyncio.StreamReader) -> bytes:
    """A chunked body's data, read strictly (a size line of hex digits and CRLF, each
    chunk's data followed by CRLF, at most ``BODY_LIMIT`` bytes); its trailers are read
    and dropped (they are not sent on)."""
    body = bytearray()
    while True:
        line = await reader.readuntil(b"\r\n")
        size = _CHUNK.fullmatch(line)
        if size is None:
            raise BrokerRefusal(400, "a malformed chunk size line in a chunked body")
        length = int(size.group(1), 16)
        if not length:
            break
        if len(body) + length > BODY_LIMIT:
            raise BrokerRefusal(413, f"a brokered request's body is at most {BODY_LIMIT} bytes")
        body += await reader.readexactly(length)
        if await reader.readexactly(2) != b"\r\n":
            raise BrokerRefusal(400, "a chunk's data longer than its size in a chunked body")
    said = 0
    while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
        said += len(line)
        if said > HEAD_LIMIT or b"\n" in line[:-1]:
            raise BrokerRefusal(400, "a chunked body's trailers are malformed")
    return bytes(body)


class _Devalue:
    """A stream with each secret's value put back as its sentinel, even a value that comes
    cut across pieces: the bytes that could begin one are held until the next piece."""

    def __init__(
        self, secrets: Sequence[Brokered], more: Sequence[tuple[bytes, bytes]] = ()
    ) -> None:
        self.pairs, self.keep = _pairs(tuple(secrets), tuple(more))
        self.held = b""

    def whole(self, data: bytes) -> bytes:
        for value, sentinel in self.pairs:
            data = data.replace(value, sentinel)
        return data

    def feed(self, data: bytes, end: bool = False) -> bytes:
        data = self.whole(self.held + data)
        cut = len(data) if end else max(len(data) - self.keep, 0)
        self.held = data[cut:]
        return data[:cut]


@functools.lru_cache(maxsize=64)
def _pairs(
    secrets: tuple[Brokered, ...], more: tuple[tuple[bytes, bytes], ...]
) -> tuple[tuple[tuple[bytes, bytes], ...], int]:
    """Each form of each value with its sentinel, the longest first (a value holding
    another whole goes back whole), and how many bytes of a piece to hold back."""
    pairs = [(form, s.sentinel.encode()) for s in secrets for form in _forms(s.value)]
    pairs += more
    ordered = tuple(sorted(pairs, key=lambda pair: -len(pair[0])))
    return ordered, max((len(v) for v, _ in ordered), default=1) - 1


@functools.lru_cache(maxsize=256)
def _forms(value: str) -> frozenset[bytes]:
    """``value`` as a host may say it back: as it is, percent-encoded (upper- or lower-case
    hex, ``/`` kept or not, a space as ``+``) and escaped in a JSON string (non-ASCII as
    ``\\u`` or not, ``/`` as ``\\/`` or not)."""
    encoded = {quote(value, safe=""), quote(value, safe="/"), quote_plus(value, safe="")}
    encoded |= {re.sub("%[0-9A-F]{2}", lambda m: m.group().lower(), e) for e in encoded}
    escaped = {json.dumps(value, ensure_ascii=ascii)[1:-1] for ascii in (False, True)}
    escaped |= {e.replace("/", "\\/") for e in escaped}
    texts = {value, *escaped, *encoded}
    return frozenset(text.encode() for text in texts)


def _basic_forms(head: bytes, secrets: Sequence[Brokered]) -> list[tuple[bytes, bytes]]:
    """Each ``Basic`` credential of a brokered request's head that holds a value, paired
    with the form the server wrote (its sentinel in the value's place): a host that says
    the credential back as it got it says it back as the server sent it."""
    pairs: list[tuple[bytes, bytes]] = []
    if b"basic" not in head.lower():
        return pairs
    for token in re.findall(rb"(?im)^[^:\r\n]*:\s*basic\s+([A-Za-z0-9+/]+=*)", head):
        try:
            decoded = base64.b64decode(token, validate=True)
        except (binascii.Error, ValueError):
            continue
        devalued = _Devalue(secrets).whole(decoded)
        if devalued != decoded:
            pairs.append((token, base64.b64encode(devalued)))
    return pairs


def _fields(head: bytes) -> dict[bytes, bytes]:
    """An answer head's fields by lower-cased name (a repeated one's values joined with
    commas, as its reader joins them: two encodings are both seen, two lengths refused)."""
    out: dict[bytes, bytes] = {}
    for line in head.split(b"\r\n")[1:]:
        name, sep, value = line.partition(b":")
        if sep:
            key = name.strip().lower()
            out[key] = out[key] + b", " + value.strip() if key in out else value.strip()
    return out


def _readable(fields: dict[bytes, bytes]) -> None:
    """Refused unless the answer's body is as the broker reads it: no content coding (a
    compressed value is not seen, and the server could decompress it) and no transfer
    coding but chunked (which the broker takes off; another would reach the server
    unlabelled)."""
    for name, allowed, said in (
        (b"content-encoding", b"identity", "encoded"),
        (b"transfer-encoding", b"chunked", "transfer-coded"),
    ):
        codings = fields.get(name, b"").lower().replace(b" ", b"").replace(b"\t", b"")
        if codings not in (b"", allowed):
            why = f"{codings.decode('latin-1')}, which the broker cannot check for the value"
            raise BrokerRefusal(502, f"the host's answer is {said} as {why}")


async def _body(
    reader: asyncio.StreamReader, fields: dict[bytes, bytes]
) -> AsyncIterator[tuple[bytes, bool]]:
    """An answer's body out of its framing (chunked, a length, or until the close), in
    pieces, each with whether it is known to be the last; its trailers are not sent on."""
    if b"chunked" in fields.get(b"transfer-encoding", b"").lower():
        while size := _chunk_size(await reader.readuntil(b"\r\n")):
            async for piece, _ in _exactly(reader, size):
                yield piece, False
            await reader.readexactly(2)
        # Its trailers, to the empty line that ends it: read (bounded) and dropped, so the
        # next answer on the connection begins where the host began it.
        # (A host that closes after the last chunk, without the empty line, ended it too.)
        said = 0
        with contextlib.suppress(asyncio.IncompleteReadError):
            while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
                said += len(line)
                if said > HEAD_LIMIT:
                    raise BrokerRefusal(502, "the host's answer is malformed (its trailers)")
        return
    if b"content-length" in fields:
        size = _chunk_size(fields[b"content-length"], 10)
        if size <= 65536:  # the common small answer: one read, one piece
            yield await reader.readexactly(size), True
            return
        async for pair in _exactly(reader, size):
            yield pair
        return
    while piece := await reader.read(65536):
        yield piece, False


async def _exactly(reader: asyncio.StreamReader, size: int) -> AsyncIterator[tuple[bytes, bool]]:
    while size > 0:
        piece = await reader.read(min(size, 65536))
        if not piece:
            raise asyncio.IncompleteReadError(b"", size)
        size -= len(piece)
        yield piece, size == 0


def _chunk_size(line: bytes, base: int = 16) -> int:
    text = line.split(b";", 1)[0].strip()
    digits = b"0123456789abcdefABCDEF"[: 10 if base == 10 else 22]
    if not text or text.strip(digits) or len(text) > 16:
        raise BrokerRefusal(502, "the host's answer is malformed (its framing)")
    return int(text, base)


def _swap(text: str, secrets: Sequence[Brokered], host: str, port: int, place: str) -> str:
    """``text`` with each sentinel that may go to ``host`` in ``place`` swapped for its
    value; refused when one may not."""
    if SENTINEL_PREFIX not in text:
        return text
    for secret in secrets:
        if secret.sentinel not in text:
            continue
        if not secret.goes_to(host, port):
            raise BrokerRefusal(403, f"{secret.variable}'s sentinel sent to {host}, not its host")
        if place == "url" or (place == "body" and not secret.body):
            raise BrokerRefusal(403, f"{secret.variable}'s sentinel in the {place}: not allowed")
        text = text.replace(secret.sentinel, secret.value.encode().decode("latin-1"))
    if SENTINEL_PREFIX in text:
        raise BrokerRefusal(403, f"an unknown sentinel in the {place}")
    return text


def _header(name: str, value: str, secrets: Sequence[Brokered], host: str, port: int) -> str:
    """A header's value with its sentinels swapped, inside ``Basic`` credentials too."""
    basic = _BASIC.fullmatch(value) if name in ("authorization", "proxy-authorization") else None
    if basic is not None:
        try:
            decoded = base64.b64decode(basic.group(2), validate=True).decode("latin-1")
        except (binascii.Error, ValueError):
            decoded = ""
        if SENTINEL_PREFIX in decoded:
            swapped = _swap(decoded, secrets, host, port, "header")
            encoded = base64.b64encode(swapped.encode("latin-1")).decode("ascii")
            return basic.group(1) + encoded + basic.group(3)
    return _swap(value, secrets, host, port, "header")


def rewrite_head(head: bytes, secrets: Sequence[Brokered], host: str, port: int) -> Head:
    """A brokered request's head as it is sent on (sentinels swapped, hop and framing
    headers dropped) and how its body is framed; refused as it must be: anything a host
    could frame or route otherwise than the broker read it (two lengths, a length and
    chunks, a coding other than ``chunked``, a second ``Host``, a malformed line)."""
    if len(head) > HEAD_LIMIT:
        raise BrokerRefusal(431, "request head too large")
    text = head.decode("latin-1")
    first, _, rest = text.partition("\r\n")
    version = _request_line(first, secrets, host, port)
    if not _LINES.fullmatch(rest) or (
        SENTINEL_PREFIX in rest and any(SENTINEL_PREFIX in n for n in _NAMES.findall(rest))
    ):
        raise BrokerRefusal(400, "a malformed header line")
    out = [first]
    fields: dict[str, list[str]] = {}
    for line in rest[:-4].split("\r\n") if rest != "\r\n" else ():
        name, _, value = line.partition(":")
        key = name.lower()
        fields.setdefault(key, []).append(value.strip())
        if key in _HOP or key in ("content-length", "transfer-encoding"):
            continue
        if key == "host" and not _names(value, host, port):
            raise BrokerRefusal(400, f"the Host header {value.strip()!r} is not {host}")
        if SENTINEL_PREFIX in value or key == "authorization":  # Basic: base64'd
            value = _header(key, value, secrets, host, port)
        out.append(f"{name}:{value}")
    length, chunked = _framing(fields)
    connection = ",".join(fields.get("connection", [])).lower().replace(" ", "").split(",")
    close = version != "HTTP/1.1" or "close" in connection
    if not fields.get("host"):
        out.append(f"Host: {host}" if port == 443 else f"Host: {host}:{port}")
    out += ["Accept-Encoding: identity", *(["Connection: close"] if close else [])]
    return Head(("\r\n".join(out) + "\r\n\r\n").encode("latin-1"), length, chunked, close)


def _names(value: str, host: str, port: int) -> bool:
    """Whether a Host header's value names ``host`` (and ``port``, or none): in any case,
    with or without the trailing dot of a fully qualified name, an IPv6 address in
    brackets."""
    named, named_port = split_host_port(value)
    return named == host and named_port in ("", str(port)) and ".." not in value


def _request_line(line: str, secrets: Sequence[Brokered], host: str, port: int) -> str:
    """The HTTP version of a brokered request line; refused unless it asks for a path."""
    parts = line.split(" ")
    if len(parts) != 3 or parts[2] not in ("HTTP/1.1", "HTTP/1.0") or not line.isprintable():
        raise BrokerRefusal(400, "not an HTTP/1.x request")
    _swap(parts[1], secrets, host, port, "url")
    if not (parts[1].startswith("/") or (parts[1] == "*" and parts[0] == "OPTIONS")):
        # An absolute or authority target names a host of its own, which the host's front
        # end may route by (over the Host header): only a path is sent on.
        raise BrokerRefusal(400, f"a brokered request's target is a path on {host}, nothing else")
    return parts[2]


def _framing(fields: dict[str, list[str]]) -> tuple[int | None, bool]:
    """(its Content-Length, whether it is chunked) of a request with these header values."""
    if len(fields.get("host", [])) > 1:
        raise BrokerRefusal(400, "more than one Host header")
    lengths, codings = fields.get("content-length", []), fields.get("transfer-encoding", [])
    if lengths and codings:
        raise BrokerRefusal(400, "both Content-Length and Transfer-Encoding")
    if len(codings) > 1 or (codings and codings[0].lower() != "chunked"):
        raise BrokerRefusal(400, "a Transfer-Encoding other than one plain chunked")
    if len(lengths) > 1 or not all(v.isascii() and v.isdecimal() for v in lengths):
        raise BrokerRefusal(400, "bad or repeated Content-Length")
    return (int(lengths[0]) if lengths else None), bool(codings)


def rewrite_body(body: bytes, secrets: Sequence[Brokered], host: str, port: int) -> bytes:
    """The body with its sentinels swapped where the secret allows it (the same object
    when it holds none); refused otherwise."""
    if SENTINEL_PREFIX.encode() not in body:
        return body
    return _swap(body.decode("latin-1"), secrets, host, port, "body").encode("latin-1")


def _with_length(head: bytes, length: int) -> bytes:
    lines = head.decode("latin-1").split("\r\n")
    kept = [ln for ln in lines if ln.partition(":")[0].strip().lower() != "content-length"]
    return "\r\n".join([*kept[:-2], f"Content-Length: {length}", "", ""]).encode("latin-1")
