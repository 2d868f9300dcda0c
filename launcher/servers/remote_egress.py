"""Where a connection to a remote server may go: the egress check of every address it dials.

ironcurtain resolves the server's name itself and connects to the address it checked (so a
lookup answered differently a moment later changes nothing): a name that resolves to a
loopback, private, link-local, metadata or otherwise special address, or to an address of
this machine, is refused unless the entry's ``hosts`` pins it to that address; an address
written in the entry's URL itself, and ``localhost`` there (loopback by definition, never
looked up), are the user's own choice. Only the entry's own host is dialled, and those of the
authorization server a login goes through: a host the server names (an address or
``localhost`` included) is judged like any name.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Container, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from launcher.plan.remote_plan import RemoteTarget
from launcher.servers.egress_proxy import of_this_machine
from launcher.shared.jsonrpc import LINE_LIMIT
from policy.egress import blocked_kind
from policy.urls import parse_ip

if TYPE_CHECKING:
    import httpcore2
    import httpx2


# Bytes of one answer that is not an event stream (a JSON body) read at most: the same bound
# as a local server's line. An event stream is read event by event, each bounded by the
# transport's own limit, and may go on for the session.
ANSWER_LIMIT: int | None = LINE_LIMIT


class EgressRefused(OSError):
    """A connection the egress check refused: why, in one line."""


class _EveryHost:
    """Any host at all (each still judged by the egress check): what a login may dial, to
    reach the authorization server the remote server names."""

    def __contains__(self, host: object) -> bool:
        return True


EVERY_HOST: Container[str] = _EveryHost()


def judged(host: str, addresses: Iterable[str], pins: Mapping[str, str]) -> list[str]:
    """The addresses ``host`` may be reached at, of those it resolved to (or its pin);
    :class:`EgressRefused` when none may.

    >>> judged("mcp.example.com", ["93.184.215.14"], {})
    ['93.184.215.14']
    >>> judged("db.internal", ["10.0.0.5"], {"db.internal": "10.0.0.5"})
    ['10.0.0.5']
    >>> try:  # doctest: +ELLIPSIS
    ...     judged("evil.example", ["8.8.8.8", "169.254.169.254"], {})
    ... except EgressRefused as exc:
    ...     print(exc)
    evil.example resolves to 169.254.169.254, a cloud metadata address (pin it in "hosts" ...
    """
    if host in pins:
        return [pins[host]]
    kept: list[str] = []
    reasons: list[str] = []
    for address in addresses:
        ip = parse_ip(address)
        kind = "not an address" if ip is None else blocked_kind(ip)
        if kind is None and of_this_machine(address):
            kind = "an address of this machine"
        if kind is None:
            kept.append(address)
        elif address == host:
            reasons.append(f"{host} is {kind}")
        else:
            reasons.append(f"{host} resolves to {address}, {kind}")
    if reasons:  # one special answer among public ones is refused too: a rebinding's first step
        raise EgressRefused(f'{reasons[0]} (pin it in "hosts" if it is meant)')
    if not kept:
        raise EgressRefused(f"{host} could not be resolved")
    return kept


async def _resolve(host: str, port: int) -> list[str]:
    import anyio

    try:
        found = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise EgressRefused(f"{host} could not be resolved: {exc.strerror or exc}") from None
    return list(dict.fromkeys(str(info[4][0]) for info in found))


def _checked_backend(
    target: RemoteTarget, also: Container[str] = ()
) -> httpcore2.AsyncNetworkBackend:
    """A network backend that dials only ``target``'s host (and those in ``also``), at
    addresses the egress check let through."""
    import httpcore2

    class Checked(httpcore2.AsyncNetworkBackend):
        def __init__(self) -> None:
            self.inner = httpcore2.AnyIOBackend()

        async def connect_tcp(
            self,
            host: str,
            port: int,
            timeout: float | None = None,
            local_address: str | None = None,
            socket_options: Iterable[Any] | None = None,
        ) -> httpcore2.AsyncNetworkStream:
            name = host.strip("[]").lower()
            if name != target.host and name not in also:
                raise EgressRefused(f"{name} is not {target.host}, the server's own host")
            found = [name] if parse_ip(name) is not None else await _pinned_or(name, port)
            if not _chosen(name):
                found = judged(name, found, target.hosts)
            last: Exception | None = None
            for address in found:
                try:
                    return _coalesced(
                        await self.inner.connect_tcp(
                            address, port, timeout, local_address, socket_options
                        )
                    )
                except (OSError, httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                    last = exc
            raise EgressRefused(f"cannot connect to {name}:{port}: {last}")

        async def sleep(self, seconds: float) -> None:
            await self.inner.sleep(seconds)

    async def _pinned_or(name: str, port: int) -> list[str]:
        if name in target.hosts:
            return [target.hosts[name]]
        if name == "localhost" or name.endswith(".localhost"):  # loopback by definition
            return ["127.0.0.1", "::1"]
        return await _resolve(name, port)

    def _chosen(name: str) -> bool:
        """A host whose addresses the user chose: pinned, or the entry's own host when it is
        an address or ``localhost``. Any other host (one a server or its authorization
        server named) is judged, an address written in its URL too."""
        if name in target.hosts:
            return True
        local = name == "localhost" or name.endswith(".localhost")
        return name == target.host and (local or parse_ip(name) is not None)

    return Checked()


# Bytes written to a connection held at most before they are sent (see ``_coalesced``).
HELD = 64 * 1024


def _coalesced(stream: httpcore2.AsyncNetworkStream) -> httpcore2.AsyncNetworkStream:
    """``stream`` with its writes held until it is read (or closed, or more than ``HELD``
    bytes wait): a request's head and its body go out in one segment instead of two, so
    the server wakes once for it (on loopback, each segment sent costs the sender a wake-up
    of the receiver). Nothing waits on it: a request is read for its answer right after it
    is written."""
    import httpcore2

    class Coalesced(httpcore2.AsyncNetworkStream):
        def __init__(self, inner: httpcore2.AsyncNetworkStream) -> None:
            self.inner = inner
            self.held: list[bytes] = []
            self.size = 0

        async def _flush(self, timeout: float | None = None) -> None:
            if self.held:
                data, self.held, self.size = b"".join(self.held), [], 0
                await self.inner.write(data, timeout)

        async def write(self, buffer: bytes, timeout: float | None = None) -> None:
            self.held.append(buffer)
            self.size += len(buffer)
            if self.size > HELD:
                await self._flush(timeout)

        async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
            await self._flush(timeout)
            return await self.inner.read(max_bytes, timeout)

        async def aclose(self) -> None:
            self.held, self.size = [], 0
            await self.inner.aclose()

        async def start_tls(
            self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
        ) -> httpcore2.AsyncNetworkStream:
            await self._flush(timeout)
            return Coalesced(await self.inner.start_tls(ssl_context, server_hostname, timeout))

        def get_extra_info(self, info: str) -> Any:
            return self.inner.get_extra_info(info)

    return Coalesced(stream)


def checked_transport(target: RemoteTarget, also: Container[str] = ()) -> httpx2.AsyncBaseTransport:
    """An HTTP transport that dials only ``target``'s host (and those in ``also``), at
    addresses the egress check let through (TLS still verified against the name, from the
    system's trust store), ignores the proxy variables of ironcurtain's environment, reads
    an answer that is not an event stream up to ``ANSWER_LIMIT`` bytes, and no compressed
    answer at all."""
    import ssl

    import httpcore2
    import httpx2

    class Transport(httpx2.AsyncHTTPTransport):
        def __init__(self) -> None:
            super().__init__(trust_env=False)
            self._pool = httpcore2.AsyncConnectionPool(
                ssl_context=ssl.create_default_context(),
                network_backend=_checked_backend(target, also),
            )

        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            response = await super().handle_async_request(request)
            if ANSWER_LIMIT is None:
                return response
            coding = response.headers.get("content-encoding", "identity").strip().lower()
            kind = response.headers.get("content-type", "").lower()
            if coding != "identity":
                response.stream = _refused(response.stream, f"its answer is compressed ({coding})")
            elif not kind.startswith("text/event-stream"):
                response.stream = _bounded(response.stream, ANSWER_LIMIT)
            return response

    return Transport()


def _refused(stream: Any, why: str) -> Any:
    """``stream`` (a response body) that fails before it gives a byte: an answer whose size
    cannot be known from the bytes read (a compressed one: a few kilobytes may inflate to
    gigabytes), asked for without compression and sent compressed all the same."""
    import httpx2

    class Refused(httpx2.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            raise httpx2.StreamError(f"{why}, though ironcurtain asked for it uncompressed")
            yield b""  # pragma: no cover (an async generator)

        async def aclose(self) -> None:
            await stream.aclose()

    return Refused()


def _bounded(stream: Any, limit: int) -> Any:
    """``stream`` (a response body) that fails once it has given more than ``limit`` bytes:
    an answer that does not end (or is too large to hold) ends the request it answers, not
    ironcurtain's memory."""
    import httpx2

    class Bounded(httpx2.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            given = 0
            async for part in stream:
                given += len(part)
                if given > limit:
                    raise httpx2.StreamError(f"its answer is over {limit // 2**20} MiB")
                yield part

        async def aclose(self) -> None:
            await stream.aclose()

    return Bounded()


def client_for(
    target: RemoteTarget, auth: httpx2.Auth | None = None, also: Container[str] = ()
) -> httpx2.AsyncClient:
    """The HTTP client a remote server is spoken to with: the checked transport, the entry's
    headers, the MCP transports' timeouts (30 s to connect, 300 s between the events of a
    stream; a call's own timeout is the relay's). ``auth``: what signs each request in (a
    token provider: it sets the credential on every request and is handed each 401), never
    the client's own token. ``also``: the other hosts it may dial (an authorization
    server's), each judged as the server's own."""
    import httpx2
    from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

    return httpx2.AsyncClient(
        # Uncompressed: what is read is what is held (see ``checked_transport``).
        headers={**target.headers, "Accept-Encoding": "identity"},
        timeout=httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
        transport=checked_transport(target, also),
        trust_env=False,
        auth=auth,
    )
