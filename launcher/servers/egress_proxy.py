"""The egress proxy: the only way out of a networked server's sandbox.

One listener per networked server, on a unix socket that is bound into that server's
sandbox and nowhere else; inside, a small bridge (``sandbox_profiles/netbridge.py``) turns
it into ``127.0.0.1:3128`` for the server's HTTP clients. Speaks HTTP ``CONNECT`` (for
TLS) and plain HTTP with an absolute URL. Every request is checked by
``policy.egress`` before any DNS lookup; allowed names are resolved here and the checked
address is the one connected to. Refusals answer ``403`` with the reason and are reported
(server, host, port, reason) to the session, which logs and audits them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import socket
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import NoReturn
from urllib.parse import SplitResult, urlsplit

from launcher.servers.broker import Broker, BrokerRefusal
from policy.egress import EgressRules, check_address, check_host
from policy.urls import split_host_port
from sandbox_profiles.records import frozen

HEAD_LIMIT = 64 * 1024
HEAD_TIMEOUT = 15.0
CONNECT_TIMEOUT = 10.0
CLOSE_WAIT = 1.0  # seconds a closing client connection is given to flush
# Connections one server may hold open through its proxy at once; more are closed as they
# come, so a server cannot exhaust the trusted process's descriptors (each holds two).
MAX_CONNECTIONS = 128
# Name lookups one server's proxy runs at once, in threads of its own: a lookup that hangs
# (a name server that never answers) holds its thread until the system gives up, and a
# server that starts many must not leave none for another server, nor for the session.
LOOKUPS = 4
_HOP_HEADERS = {"proxy-connection", "proxy-authorization", "connection", "keep-alive"}


@frozen
class Refusal:
    server: str
    host: str
    port: int
    reason: str


class _Refused(Exception):
    def __init__(self, status: int, reason: str, host: str = "", port: int = 0) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.host = host
        self.port = port


async def _resolve(host: str, port: int, pool: Executor | None = None) -> list[str]:
    """The addresses of ``host``, looked up in a thread of ``pool``."""
    loop = asyncio.get_running_loop()
    lookup = functools.partial(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM)
    infos = await loop.run_in_executor(pool, lookup)
    seen: list[str] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        if sockaddr[0] not in seen:
            seen.append(str(sockaddr[0]))
    return seen


def _request_head(head: bytes) -> tuple[str, str, str, list[tuple[str, ...]]]:
    """(method, target, version, headers) of a proxy request's head, refused unless it is
    one of HTTP/1.x of printable ASCII within the size limit."""
    if len(head) > HEAD_LIMIT:
        raise _Refused(431, "request head too large")
    lines = head.decode("latin-1").split("\r\n")
    if not lines[0].isascii() or not lines[0].isprintable():
        raise _Refused(400, "a request line holds a control or non-ASCII character")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _Refused(400, "not an HTTP/1.x proxy request")
    method, target, version = parts
    headers = [tuple(h.split(":", 1)) for h in lines[1:] if ":" in h]
    return method, target, version, headers


def _plain_request(
    target: str, headers: list[tuple[str, ...]]
) -> tuple[SplitResult, str, int, str]:
    """(the URL, its host and port, the body's Content-Length) of a plain http:// request,
    refused when its Host header names another place or its body is chunked."""
    url = urlsplit(target)
    if url.scheme != "http" or not url.hostname:
        raise _Refused(400, f"only CONNECT and absolute http:// URLs are proxied: {target!r}")
    try:
        host, port = url.hostname, url.port or 80
    except ValueError:
        raise _Refused(400, f"bad port in {target!r}") from None
    host_header = next((v.strip() for k, v in headers if k.strip().lower() == "host"), None)
    if host_header is not None and _split_authority(host_header, 80) != (host.lower(), port):
        reason = f"the Host header {host_header!r} does not match {host}"
        raise _Refused(400, reason, host, port)
    if any(k.strip().lower() == "transfer-encoding" for k, _ in headers):
        reason = "chunked request bodies are not proxied; send Content-Length"
        raise _Refused(411, reason, host, port)
    length = next((v.strip() for k, v in headers if k.strip().lower() == "content-length"), "0")
    if not (length.isascii() and length.isdecimal()):
        raise _Refused(400, "bad Content-Length", host, port)
    return url, host, port, length


async def _send_body(
    reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
    remaining: int,
    check: Callable[[bytes, str, int], None],
    host: str,
    port: int,
) -> None:
    """The body as it comes, a piece at a time: the trusted process never holds more than
    one piece of it, whatever length the server announces. Each piece is ``check``ed with
    the end of the one before (a sentinel cut in two is seen whole) before it is sent."""
    tail = b""
    while remaining:
        piece = await reader.read(min(remaining, 65536))
        if not piece:
            raise asyncio.IncompleteReadError(b"", remaining)
        check(tail + piece, host, port)
        tail = piece[-64:]
        up_writer.write(piece)
        await up_writer.drain()
        remaining -= len(piece)
    await up_writer.drain()


class EgressProxy:
    def __init__(
        self,
        server: str,
        rules: EgressRules,
        socket_path: str,
        on_refusal: Callable[[Refusal], None],
        broker: Broker | None = None,
    ) -> None:
        self.server = server
        self.broker = broker  # its brokered secrets: TLS opened for their hosts alone
        self.rules = rules
        self.socket_path = socket_path
        self.on_refusal = on_refusal
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._lookups = ThreadPoolExecutor(LOOKUPS, thread_name_prefix=f"egress-{server}")
        self.turned_away = 0  # connections closed at once because the cap was reached

    async def start(self, listening: socket.socket | None = None) -> None:
        """Serve on ``socket_path`` (or on ``listening``, bound there already)."""
        if listening is not None:
            self._server = await asyncio.start_unix_server(self._client, sock=listening)
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        self._server = await asyncio.start_unix_server(self._client, path=self.socket_path)
        # Reachable only through the runtime directory (owner-only) and the sandbox it is
        # bound into; the sandbox's uid must be able to connect.
        os.chmod(self.socket_path, 0o666)

    async def stop(self) -> None:
        self._lookups.shutdown(wait=False, cancel_futures=True)
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(OSError):
            os.unlink(self.socket_path)

    # -- one client connection ---------------------------------------------------------------

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._tasks) >= MAX_CONNECTIONS:
            writer.transport.abort()
            self.turned_away += 1
            if self.turned_away == 1:
                self.on_refusal(
                    Refusal(
                        self.server,
                        "?",
                        0,
                        f"more than {MAX_CONNECTIONS} connections open at once; "
                        "further ones are closed until some end",
                    )
                )
            return
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await self._serve(reader, writer)
        except _Refused as exc:
            await self._answer(writer, exc)
        except (OSError, ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        except Exception as exc:  # a request nothing above foresaw: refused, and said
            await self._answer(writer, _Refused(400, f"malformed request ({exc!r})"))
        finally:
            await _closed(writer)
            if task is not None:
                self._tasks.discard(task)

    async def _answer(self, writer: asyncio.StreamWriter, exc: _Refused) -> None:
        """A refusal: said to the session (stderr, audit) and answered with its reason."""
        self.on_refusal(Refusal(self.server, exc.host or "?", exc.port, exc.reason))
        with contextlib.suppress(OSError, ConnectionError):
            body = f"ironcurtain egress proxy: {exc.reason}\n".encode()
            writer.write(
                f"HTTP/1.1 {exc.status} {'Forbidden' if exc.status == 403 else 'Error'}\r\n"
                f"Content-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT)
        except asyncio.LimitOverrunError:
            raise _Refused(431, "request head too large") from None
        method, target, version, headers = _request_head(head)
        if method == "CONNECT":
            host, port = _split_authority(target, 443)
            upstream = await self._open(host, port)
            try:
                writer.write(f"{version} 200 Connection Established\r\n\r\n".encode())
                await writer.drain()
                if self.broker is not None and self.broker.terminates(host, port):
                    await self._brokered(reader, writer, host, port, upstream)
                else:
                    await _pipe(reader, writer, *upstream)
            finally:
                upstream[1].close()
            return
        url, host, port, length = _plain_request(target, headers)
        self._no_sentinel(head, host, port)
        up_reader, up_writer = await self._open(host, port)
        path = url.path or "/"
        if url.query:
            path += "?" + url.query
        kept = [(k, v) for k, v in headers if k.strip().lower() not in _HOP_HEADERS]
        out = [f"{method} {path} {version}", *(f"{k}:{v}" for k, v in kept), "Connection: close"]
        try:
            up_writer.write(("\r\n".join(out) + "\r\n\r\n").encode("latin-1"))
            await _send_body(reader, up_writer, int(length), self._no_sentinel, host, port)
            # One request per connection: nothing more is read from the client, so a second
            # request to another host cannot ride on this checked connection.
            await _copy(up_reader, writer)
        finally:
            await _closed(up_writer)

    async def _open(
        self, host: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        verdict = check_host(self.rules, host, port)
        if verdict.reason is not None:
            self._refuse(host, port, verdict.reason)
        addresses = list(verdict.addresses)
        if not addresses:
            try:
                resolved = await asyncio.wait_for(
                    _resolve(host, port, self._lookups), CONNECT_TIMEOUT
                )
            except (OSError, TimeoutError):
                resolved = []
            if not resolved:
                self._refuse(host, port, f"{host} could not be resolved", status=502)
            reasons: list[str] = []
            for address in resolved:
                reason = check_address(self.rules, address, port)
                if reason is None and of_this_machine(address):
                    # A service listening on every address answers there as on loopback.
                    reason = f"{host} resolves to {address}, an address of this machine"
                if reason is None:
                    addresses.append(address)
                else:
                    reasons.append(reason)
            if not addresses:
                self._refuse(host, port, reasons[0])
        last: Exception | None = None
        for address in addresses:
            try:
                return await asyncio.wait_for(
                    asyncio.open_connection(address, port), CONNECT_TIMEOUT
                )
            except (OSError, TimeoutError) as exc:
                last = exc
        raise _Refused(502, f"cannot connect to {host}:{port}: {last}", host, port)

    async def _brokered(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        host: str,
        port: int,
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    ) -> None:
        """A CONNECT to a brokered secret's host: its requests, through the broker (which
        connects again, checked as the first, when the host ends an idle connection)."""
        assert self.broker is not None
        try:
            reopen = functools.partial(self._open, host, port)
            await self.broker.relay(reader, writer, host, port, upstream, reopen)
        except BrokerRefusal as exc:
            raise _Refused(exc.status, exc.reason, host, port) from None
        finally:
            upstream[1].close()

    def _no_sentinel(self, data: bytes, host: str, port: int) -> None:
        """Refuse what carries a brokered secret's sentinel where it is not swapped."""
        if self.broker is not None:
            secret = self.broker.carried(data)
            if secret is not None:
                why = f"{secret.variable}'s sentinel in a plain request to {host}: not allowed"
                self._refuse(host, port, why)

    def _refuse(self, host: str, port: int, reason: str, status: int = 403) -> NoReturn:
        raise _Refused(status, reason, host, port)


async def _closed(writer: asyncio.StreamWriter) -> None:
    """``writer`` closed, and given ``CLOSE_WAIT`` seconds to be: closed before the loop can
    end, so a stopped proxy leaves no socket behind."""
    writer.close()
    with contextlib.suppress(Exception, asyncio.CancelledError):
        await asyncio.wait_for(writer.wait_closed(), CLOSE_WAIT)


def of_this_machine(address: str) -> bool:
    """Whether ``address`` is one of this machine's own: only such an address can be bound
    (with ``net.ipv4.ip_nonlocal_bind`` set, any can, and every one is refused)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((address, 0))
        except OSError:
            return False
    return True


def _split_authority(text: str, default_port: int) -> tuple[str, int]:
    """``host:port``, ``[v6]:port`` or ``host`` -> (lower-cased host, port)."""
    host, port = split_host_port(text)
    if port and not (port.isascii() and port.isdecimal() and 0 < int(port) < 65536):
        raise _Refused(400, f"bad port in {text!r}")
    return host, int(port) if port else default_port


async def _copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    try:
        while data := await src.read(65536):
            dst.write(data)
            await dst.drain()
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if dst.can_write_eof():
                dst.write_eof()


async def _pipe(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
) -> None:
    try:
        await asyncio.gather(_copy(reader, up_writer), _copy(up_reader, writer))
    finally:
        up_writer.close()
