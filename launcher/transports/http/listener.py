"""The socket ``ironcurtain run`` serves streamable HTTP on: made and listening before any
server starts, so a port that cannot be had fails the session before anything runs, and
without loading the HTTP stack."""

from __future__ import annotations

import socket

from launcher.shared.user_errors import StartupError


def listen_http(port: int, address: str = "127.0.0.1") -> socket.socket:
    """The streamable HTTP transport's socket, listening on ``address`` (an IPv4 or IPv6
    address; 127.0.0.1 unless said) and ``port`` (0: a free one)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    # IPPROTO_TCP named, so asyncio sets TCP_NODELAY on each connection (with protocol 0 it
    # does not, and an event after its headers waits out the client's delayed ACK).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise StartupError(
            f"cannot listen on {address}: {exc.strerror}", "http_port", port
        ) from None
    sock.setblocking(False)
    return sock
