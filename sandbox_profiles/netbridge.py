"""Runs inside a networked server's sandbox: ``127.0.0.1:PORT`` -> the egress proxy's socket.

The sandbox has its own network namespace with only loopback, so a server's HTTP client
cannot reach the proxy in the trusted process over TCP. This bridge listens on the
sandbox's loopback, then execs the server (which keeps its pid and exit status); a forked
child relays each TCP connection to the unix socket bound into the sandbox. Standard library
only: it runs on whatever Python the launcher runs on.

Usage: python netbridge.py PORT SOCKET -- COMMAND [ARGS...]
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading


def _relay(a: socket.socket, b: socket.socket) -> None:
    try:
        while data := a.recv(65536):
            b.sendall(data)
    except OSError:
        pass
    finally:
        for sock, how in ((b, socket.SHUT_WR), (a, socket.SHUT_RD)):
            with contextlib.suppress(OSError):
                sock.shutdown(how)


def _serve(listener: socket.socket, path: str) -> None:
    while True:
        client, _ = listener.accept()
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(path)
        except OSError:
            client.close()
            upstream.close()
            continue
        threading.Thread(target=_relay, args=(client, upstream), daemon=True).start()
        threading.Thread(target=_relay, args=(upstream, client), daemon=True).start()


def main(argv: list[str]) -> None:
    if len(argv) < 4 or argv[2] != "--":
        sys.exit("usage: netbridge.py PORT SOCKET -- COMMAND [ARGS...]")
    port, path, command = int(argv[0]), argv[1], argv[3:]
    listener = socket.create_server(("127.0.0.1", port), backlog=128)
    if os.fork() == 0:  # the relay; it ends with the sandbox (or its process group)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1):  # never touch the server's stdio (it is the MCP channel)
            os.dup2(devnull, fd)
        _serve(listener, path)
        os._exit(0)
    listener.close()
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
