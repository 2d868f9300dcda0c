"""The bridge a networked server's sandbox starts with (``sandbox_profiles/netbridge.py``),
run directly on the host's loopback: it listens before the server starts, relays bytes
both ways with half-closes, keeps the server's pid and stdio, and loads nothing beyond the
interpreter's built-ins before it execs the server (it stands between the sandbox's start
and the server's). The whole path through a real sandbox is in ``test_egress.py``."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

BRIDGE = Path(__file__).resolve().parent.parent / "sandbox_profiles" / "netbridge.py"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Upstream:
    """A unix-socket server standing in for the egress proxy: it answers each connection
    with ``got:`` and what it read until the client's half-close, then closes."""

    def __init__(self, path: str) -> None:
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(8)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                data = b""
                while chunk := conn.recv(65536):
                    data += chunk
                conn.sendall(b"got:" + data)


@pytest.fixture
def bridge(tmp_path: Path) -> Iterator[tuple[int, subprocess.Popen[str], Path]]:
    """The bridge on a free loopback port in front of an upstream, with a server that
    prints its pid and waits; the process group (bridge child included) killed after."""
    sock = tmp_path / "egress.sock"
    upstream = Upstream(str(sock))
    port = _free_port()
    serve = [
        sys.executable,
        "-c",
        "import os, sys; print(os.getpid(), flush=True); sys.stdin.read()",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", str(BRIDGE), str(port), str(sock), "--", *serve],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        yield port, proc, sock
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        upstream.listener.close()


def test_relays_both_ways_and_the_server_keeps_its_pid_and_stdio(
    bridge: tuple[int, subprocess.Popen[str], Path],
) -> None:
    port, proc, _ = bridge
    assert proc.stdout is not None
    # The server's stdout is the bridge's: its first line is its own pid, the bridge's.
    assert proc.stdout.readline().strip() == str(proc.pid)
    for payload in (b"hello", b"x" * 300_000):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            conn.sendall(payload)
            conn.shutdown(socket.SHUT_WR)  # the half-close reaches the upstream
            answer = b""
            while chunk := conn.recv(65536):
                answer += chunk
        assert answer == b"got:" + payload


def test_a_connection_without_an_upstream_is_closed_and_the_next_one_served(
    bridge: tuple[int, subprocess.Popen[str], Path],
) -> None:
    port, proc, sock = bridge
    assert proc.stdout is not None
    proc.stdout.readline()
    moved = sock.with_name("moved.sock")
    sock.rename(moved)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        assert conn.recv(10) == b""
    moved.rename(sock)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(b"again")
        conn.shutdown(socket.SHUT_WR)
        assert conn.recv(100) == b"got:again"


def test_nothing_but_built_ins_is_loaded_before_the_server_starts(tmp_path: Path) -> None:
    """What ``-X importtime`` reports for the bridge's own process up to its exec: what
    the interpreter loads for ``import os``, and ``_socket``; none of ``socket``, ``threading`` or
    ``contextlib`` (each a few milliseconds on every networked server's start)."""
    port = _free_port()
    bare = subprocess.run(
        [sys.executable, "-I", "-S", "-X", "importtime", "-c", "import os"],
        capture_output=True,
        text=True,
        check=True,
    )
    # The bridge's relay child keeps stderr open: the group is killed once the server
    # (``true``) has ended, then what was written is read.
    true = shutil.which("true") or "/bin/true"
    run = subprocess.Popen(
        [
            sys.executable,
            "-I",
            "-S",
            "-X",
            "importtime",
            str(BRIDGE),
            str(port),
            "x.sock",
            "--",
            true,
        ],
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert run.wait(timeout=30) == 0
    os.killpg(run.pid, signal.SIGKILL)
    assert run.stderr is not None
    stderr = run.stderr.read()

    def modules(stderr: str) -> set[str]:
        return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines() if "|" in line}

    loaded = modules(stderr) - modules(bare.stderr) - {"package"}
    assert loaded == {"__future__", "_socket"}
