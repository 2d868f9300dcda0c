"""Runs inside a networked server's sandbox: ``127.0.0.1:PORT`` -> the egress proxy's socket.

The sandbox has its own network namespace with only loopback, so a server's HTTP client
cannot reach the proxy in the trusted process over TCP. This bridge listens on the
sandbox's loopback, then execs the server (which keeps its pid and exit status); a forked
child relays each TCP connection to the unix socket bound into the sandbox.

It stands between the sandbox's start and the server's, so it is run with ``-I -S`` and
imports only the standard library's C modules (``_socket``; ``_thread``, and ``time`` after
a failed accept, in the relay). The listening socket is made before the fork, so a
server's first connection never finds it missing, and nothing more is loaded until one
arrives. Standard library only: it runs on whatever Python the launcher runs on.

Usage: python -I -S netbridge.py PORT SOCKET -- COMMAND [ARGS...]
"""

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


def _say(text: str) -> None:
    """A line on the server's stderr, which the launcher logs as the server's."""
    try:  # noqa: SIM105 (contextlib is an import this module does without)
        os.write(2, f"netbridge: {text}\n".encode())
    except OSError:
        pass


def _relay(a: socket, b: socket) -> None:
    """Copy ``a`` to ``b`` until ``a`` ends, then pass the end on (half-close) and close
    ``a``'s reading side; each connection has two of these, one each way."""
    try:
        while data := a.recv(65536):
            b.sendall(data)
    except OSError:
        pass
    finally:
        for sock, how in ((b, SHUT_WR), (a, SHUT_RD)):
            try:  # noqa: SIM105
                sock.shutdown(how)
            except OSError:
                pass


def _connection(fd: int, path: str) -> None:
    """Relay the accepted ``fd`` to the proxy's socket at ``path`` (two threads); when that
    cannot be done, the connection is closed and the bridge goes on."""
    from _thread import start_new_thread

    client = socket(fileno=fd)
    try:
        upstream = socket(AF_UNIX, SOCK_STREAM)
    except OSError as exc:
        client.close()
        _say(f"a connection was dropped: {exc}")
        return
    try:
        upstream.connect(path)
        start_new_thread(_relay, (client, upstream))
    except (OSError, RuntimeError) as exc:  # RuntimeError: no thread could be started
        client.close()
        upstream.close()
        if not isinstance(exc, OSError):  # the proxy not listening is said by the client
            _say(f"a connection was dropped: {exc}")
        return
    try:
        start_new_thread(_relay, (upstream, client))
    except RuntimeError as exc:
        for sock in (client, upstream):  # the other thread's reads end with an error
            try:  # noqa: SIM105
                sock.shutdown(SHUT_RD)
            except OSError:
                pass
        _say(f"a connection was dropped: {exc}")


def _serve(listener: socket, path: str) -> None:
    failing = False
    while True:
        try:
            # The built-in socket's accept (``socket.socket.accept`` wraps it): a new fd.
            fd, _ = listener._accept()  # type: ignore[attr-defined]
        except OSError as exc:  # out of descriptors: the connection waits in the backlog
            if not failing:
                _say(f"cannot accept connections ({exc}); retrying")
            failing = True
            from time import sleep

            sleep(0.1)
            continue
        failing = False
        _connection(fd, path)


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
        except BaseException as exc:  # nothing is meant to end it: say why it did
            _say(f"the relay stopped: {exc!r}")
            os._exit(1)
        os._exit(0)  # never past here: only the parent execs the server
    listener.close()
    if "/" in command[0]:  # what execvp does with it, without its PATH lookup's imports
        os.execv(command[0], command)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
