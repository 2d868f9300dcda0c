"""Runs inside a networked server's sandbox: ``127.0.0.1:PORT`` -> the egress proxy's socket.

The sandbox has its own network namespace with only loopback, so a server's HTTP client
cannot reach the proxy in the trusted process over TCP. This bridge listens on the
sandbox's loopback, then execs the server (which keeps its pid and exit status); a forked
child relays each TCP connection to the unix socket bound into the sandbox.

It stands between the sandbox's start and the server's, so it imports nothing but the
interpreter's built-in modules (``_socket``, ``_thread``) and is run with ``-I -S``: the
listening socket is made before the fork (a server's first connection never finds it
missing), and nothing more is loaded until one arrives. Standard library only: it runs on
whatever Python the launcher runs on.

Usage: python -I -S netbridge.py PORT SOCKET -- COMMAND [ARGS...]
"""

from __future__ import annotations

import os
import sys
from _socket import (
    AF_INET,
    AF_UNIX,
    SHUT_RD,
    SHUT_WR,
    SO_REUSEADDR,
    SOCK_STREAM,
    SOL_SOCKET,
    socket,
)


def _relay(a: socket, b: socket) -> None:
    """Copy ``a`` to ``b`` until ``a`` ends, then pass the end on (half-close) and close
    ``a``'s reading side; each connection has two of these, one each way."""
    try:
        while data := a.recv(65536):
            b.sendall(data)
    except OSError:
        pass
    for sock, how in ((b, SHUT_WR), (a, SHUT_RD)):
        try:  # noqa: SIM105 (contextlib is an import this module does without)
            sock.shutdown(how)
        except OSError:
            pass


def _serve(listener: socket, path: str) -> None:
    from _thread import start_new_thread

    while True:
        # The built-in socket's accept (``socket.socket.accept`` wraps it): a new fd.
        fd, _ = listener._accept()  # type: ignore[attr-defined]
        client = socket(fileno=fd)
        upstream = socket(AF_UNIX, SOCK_STREAM)
        try:
            upstream.connect(path)
        except OSError:
            client.close()
            upstream.close()
            continue
        start_new_thread(_relay, (client, upstream))
        start_new_thread(_relay, (upstream, client))


def main(argv: list[str]) -> None:
    if len(argv) < 4 or argv[2] != "--" or not argv[0].isdigit():
        sys.exit("usage: netbridge.py PORT SOCKET -- COMMAND [ARGS...]")
    port, path, command = int(argv[0]), argv[1], argv[3:]
    listener = socket(AF_INET, SOCK_STREAM)
    listener.setsockopt(SOL_SOCKET, SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(128)
    if os.fork() == 0:  # the relay; it ends with the sandbox (or its process group)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1):  # never touch the server's stdio (it is the MCP channel)
            os.dup2(devnull, fd)
        try:
            _serve(listener, path)
        finally:
            os._exit(0)
    listener.close()
    if "/" in command[0]:  # what execvp does with it, without its PATH lookup's imports
        os.execv(command[0], command)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
