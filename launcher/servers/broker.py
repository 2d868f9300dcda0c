"""Brokered secrets in the egress proxy: a server holds a sentinel, and the proxy puts the
value in its place only in a request to one of the secret's hosts, over TLS the proxy opens
itself (a certificate of the server's session CA) and makes again to the real host, which
is verified against this machine's trust store.

The value goes in request headers (an ``Authorization: Bearer``, inside ``Basic``
credentials decoded and encoded again, any other header) and, where the secret says so,
the body. A sentinel anywhere else (the URL, a body the secret does not allow, a request to
another host, a plain-HTTP request) is refused. One request per brokered connection: the
answer says ``Connection: close``. What the host answers has the value replaced by the
sentinel again, in its head and its body."""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import re
import ssl
from collections.abc import AsyncIterator, Sequence
from urllib.parse import quote, quote_plus

from launcher.host.session_ca import SessionCA
from launcher.plan.secrets_plan import SENTINEL_PREFIX, Brokered

HEAD_LIMIT = 64 * 1024
HEAD_TIMEOUT = 15.0
# The largest body a brokered request may have: it is read whole, checked, then sent.
BODY_LIMIT = 16 * 1024 * 1024
# Not sent on: hop-by-hop; ``Expect`` (the broker has the whole body before it sends the
# head, and answers a client's ``100-continue`` itself); ``Accept-Encoding`` (the answer is
# asked for as ``identity``: a compressed one could hide the value from the broker).
_HOP = {"proxy-connection", "proxy-authorization", "connection", "keep-alive", "upgrade", "te"}
_HOP |= {"expect", "accept-encoding"}
_FRAMING = (b"content-length", b"transfer-encoding", b"connection")
_BASIC = re.compile(r"(\s*basic\s+)(\S+)(\s*)", re.IGNORECASE)
# A header name is a token; its value holds no control character but a tab. Anything else
# (a bare LF, a folded line, a space before the colon) is a line a lenient host may split or
# join differently than the broker read it: a second Host, a Transfer-Encoding it never saw.
_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_CONTINUE = re.compile(rb"(?im)^expect[ \t]*:[ \t]*100-continue[ \t]*\r?$")
_INTERIM = re.compile(rb"HTTP/1\.\d 1(?!01)\d\d[ \r]")


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
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
    ) -> None:
        """One request of a CONNECT to ``host``: TLS opened on both sides, the request
        checked and its sentinels swapped, the answer relayed."""
        await writer.start_tls(self.ca.server_context(host))
        try:
            await up_writer.start_tls(self.upstream, server_hostname=host)
        except ssl.SSLError as exc:
            why = getattr(exc, "verify_message", None) or exc.reason or str(exc)
            raise BrokerRefusal(502, f"{host}'s certificate did not verify: {why}") from None
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT)
        except asyncio.LimitOverrunError:
            raise BrokerRefusal(431, "request head too large") from None
        out, length = rewrite_head(head, self.secrets, host, port)
        if length > BODY_LIMIT:
            raise BrokerRefusal(413, f"a brokered request's body is at most {BODY_LIMIT} bytes")
        if length and _CONTINUE.search(head):
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = await reader.readexactly(length) if length else b""
        new_body = rewrite_body(body, self.secrets, host, port)
        if new_body is not body:
            out = _with_length(out, len(new_body))
        up_writer.write(out + new_body)
        await up_writer.drain()
        mask = _Devalue(self.secrets, _basic_forms(out, self.secrets))
        await self._answer(up_reader, writer, head.split(b" ", 1)[0], mask)

    async def _answer(
        self,
        up_reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        method: bytes,
        mask: _Devalue,
    ) -> None:
        """The host's answer with each value put back as its sentinel: in its head (and
        each interim ``1xx`` head before it) and in its body, read out of its framing
        (a value cut across chunks is seen whole) and sent on delimited by the close."""
        while True:
            head = mask.whole(
                await asyncio.wait_for(up_reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT)
            )
            if not _INTERIM.match(head):
                break
            writer.write(head)
        fields = _fields(head)
        if method == b"HEAD" or head[9:12] in (b"204", b"304"):
            writer.write(head)
            return
        coding = fields.get(b"content-encoding", b"identity").strip().lower()
        if coding not in (b"", b"identity"):
            why = f"{coding.decode('latin-1')}, which the broker cannot check for the value"
            raise BrokerRefusal(502, f"the host's answer is encoded as {why}")
        lines = head.split(b"\r\n")[:-2]
        kept = [ln for ln in lines if ln.partition(b":")[0].strip().lower() not in _FRAMING]
        writer.write(b"\r\n".join([*kept, b"Connection: close", b"", b""]))
        async for piece in _body(up_reader, fields):
            writer.write(mask.feed(piece))
            await writer.drain()
        writer.write(mask.feed(b"", end=True))


class _Devalue:
    """A stream with each secret's value put back as its sentinel, even a value that comes
    cut across pieces: the bytes that could begin one are held until the next piece."""

    def __init__(
        self, secrets: Sequence[Brokered], more: Sequence[tuple[bytes, bytes]] = ()
    ) -> None:
        pairs = [(form, s.sentinel.encode()) for s in secrets for form in _forms(s.value)]
        pairs += more
        # The longest first: a value holding another whole goes back whole.
        self.pairs = sorted(pairs, key=lambda pair: -len(pair[0]))
        self.keep = max((len(v) for v, _ in self.pairs), default=1) - 1
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


def _forms(value: str) -> set[bytes]:
    """``value`` as a host may say it back: as it is, percent-encoded (upper- or lower-case
    hex, ``/`` kept or not, a space as ``+``) and escaped in a JSON string (non-ASCII as
    ``\\u`` or not, ``/`` as ``\\/`` or not)."""
    encoded = {quote(value, safe=""), quote(value, safe="/"), quote_plus(value, safe="")}
    encoded |= {re.sub("%[0-9A-F]{2}", lambda m: m.group().lower(), e) for e in encoded}
    escaped = {json.dumps(value, ensure_ascii=ascii)[1:-1] for ascii in (False, True)}
    escaped |= {e.replace("/", "\\/") for e in escaped}
    texts = {value, *escaped, *encoded}
    return {text.encode() for text in texts}


def _basic_forms(head: bytes, secrets: Sequence[Brokered]) -> list[tuple[bytes, bytes]]:
    """Each ``Basic`` credential of a brokered request's head that holds a value, paired
    with the form the server wrote (its sentinel in the value's place): a host that says
    the credential back as it got it says it back as the server sent it."""
    pairs: list[tuple[bytes, bytes]] = []
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
    """An answer head's fields by lower-cased name (the last of each)."""
    out: dict[bytes, bytes] = {}
    for line in head.split(b"\r\n")[1:]:
        name, sep, value = line.partition(b":")
        if sep:
            out[name.strip().lower()] = value.strip()
    return out


async def _body(reader: asyncio.StreamReader, fields: dict[bytes, bytes]) -> AsyncIterator[bytes]:
    """An answer's body out of its framing (chunked, a length, or until the close), in
    pieces; its trailers are not sent on."""
    if b"chunked" in fields.get(b"transfer-encoding", b"").lower():
        while size := _chunk_size(await reader.readuntil(b"\r\n")):
            async for piece in _exactly(reader, size):
                yield piece
            await reader.readexactly(2)
        return
    if b"content-length" in fields:
        async for piece in _exactly(reader, _chunk_size(fields[b"content-length"], 10)):
            yield piece
        return
    while piece := await reader.read(65536):
        yield piece


async def _exactly(reader: asyncio.StreamReader, size: int) -> AsyncIterator[bytes]:
    while size > 0:
        piece = await reader.read(min(size, 65536))
        if not piece:
            raise asyncio.IncompleteReadError(b"", size)
        size -= len(piece)
        yield piece


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


def rewrite_head(
    head: bytes, secrets: Sequence[Brokered], host: str, port: int
) -> tuple[bytes, int]:
    """A brokered request's head as it is sent on (sentinels swapped, hop headers
    dropped, ``Connection: close``), and its body's length; refused as it must be."""
    if len(head) > HEAD_LIMIT:
        raise BrokerRefusal(431, "request head too large")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not lines[0].isprintable():
        raise BrokerRefusal(400, "not an HTTP/1.x request")
    _swap(parts[1], secrets, host, port, "url")
    if not (parts[1].startswith("/") or (parts[1] == "*" and parts[0] == "OPTIONS")):
        # An absolute or authority target names a host of its own, which the host's front
        # end may route by (over the Host header): only a path is sent on.
        raise BrokerRefusal(400, f"a brokered request's target is a path on {host}, nothing else")
    out = [lines[0]]
    length: int | None = None
    hosts = 0
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        key = name.lower()
        if (
            not sep
            or not _NAME.fullmatch(name)
            or _CONTROL.search(value)
            or SENTINEL_PREFIX in name
        ):
            raise BrokerRefusal(400, "a malformed header line")
        if key in _HOP:
            continue
        if key == "transfer-encoding":
            raise BrokerRefusal(411, "chunked request bodies are not brokered; send Content-Length")
        if key == "host":
            hosts += 1
            if value.strip().lower() not in (host, f"{host}:{port}"):
                raise BrokerRefusal(400, f"the Host header {value.strip()!r} is not {host}")
            if hosts > 1:
                raise BrokerRefusal(400, "more than one Host header")
        if key == "content-length":
            if length is not None or not (value.strip().isascii() and value.strip().isdecimal()):
                raise BrokerRefusal(400, "bad or repeated Content-Length")
            length = int(value.strip())
        out.append(f"{name}:{_header(key, value, secrets, host, port)}")
    if not hosts:
        out.append(f"Host: {host}" if port == 443 else f"Host: {host}:{port}")
    out += ["Accept-Encoding: identity", "Connection: close"]
    return ("\r\n".join(out) + "\r\n\r\n").encode("latin-1"), length or 0


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
