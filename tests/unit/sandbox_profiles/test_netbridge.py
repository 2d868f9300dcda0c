"""The bridge a networked server's sandbox starts with (``sandbox_profiles/netbridge.py``),
run directly on the host's loopback: it listens before the server starts, relays bytes
both ways with half-closes, keeps the server's pid and stdio, and loads nothing beyond the
standard library's ``_socket`` before it execs the server (it stands between the sandbox's
start and the server's); out of descriptors, it drops a connection, says so and goes on.
The whole path through a real sandbox is in ``test_egress.py``."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import socketserver
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.paths import REPO

BRIDGE = REPO / "sandbox_profiles" / "netbridge.py"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class _Answer(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        self.wfile.write(b"got:" + self.rfile.read())


class Upstream(socketserver.ThreadingUnixStreamServer):
    """A unix-socket server standing in for the egress proxy: it answers each connection
    (on a thread of its own) with ``got:`` and what it read until the client's half-close,
    then closes."""

    daemon_threads = True

    def __init__(self, path: str) -> None:
        super().__init__(path, _Answer)
        threading.Thread(target=self.serve_forever, daemon=True).start()


def _ask(port: int, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(payload)
        conn.shutdown(socket.SHUT_WR)  # the half-close reaches the upstream
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
        return answer


@pytest.fixture
def bridge(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[int, subprocess.Popen[str], Path]]:
    """The bridge on a free loopback port in front of an upstream, with a server that
    prints its pid and waits; the process group (bridge child included) killed after.
    Parametrised indirectly with a descriptor limit, the bridge runs under it; its stderr
    is the file ``tmp_path / "stderr"``."""
    sock = tmp_path / "egress.sock"
    upstream = Upstream(str(sock))
    port = _free_port()
    serve = [
        sys.executable,
        "-c",
        "import os, sys; print(os.getpid(), flush=True); sys.stdin.read()",
    ]
    limit = getattr(request, "param", None)
    prefix = ["prlimit", f"--nofile={limit}:{limit}", "--"] if limit else []
    stderr = open(tmp_path / "stderr", "wb")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(
        [*prefix, sys.executable, "-I", "-S", str(BRIDGE), str(port), str(sock), "--", *serve],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        start_new_session=True,
    )
    stderr.close()
    try:
        yield port, proc, sock
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()  # reaped, its pipes closed
        upstream.shutdown()
        upstream.server_close()


def test_relays_both_ways_and_the_server_keeps_its_pid_and_stdio(
    bridge: tuple[int, subprocess.Popen[str], Path],
) -> None:
    port, proc, _ = bridge
    assert proc.stdout is not None
    # The server's stdout is the bridge's: its first line is its own pid, the bridge's.
    assert proc.stdout.readline().strip() == str(proc.pid)
    for payload in (b"hello", b"x" * 300_000):
        assert _ask(port, payload) == b"got:" + payload


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


# The bridge's relay process holds stdio, the listener and /dev/null: 5 descriptors, so
# 10 leave room for two relayed connections (two descriptors each) and a third accepted.
@pytest.mark.parametrize("bridge", [10], indirect=True)
def test_out_of_descriptors_a_connection_is_dropped_said_and_the_relay_goes_on(
    bridge: tuple[int, subprocess.Popen[str], Path], tmp_path: Path
) -> None:
    port, proc, _ = bridge
    assert proc.stdout is not None
    proc.stdout.readline()
    held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(2)]
    for conn in held:  # both relayed: the upstream has them (a byte through and back)
        conn.sendall(b"a")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as third:
        assert third.recv(10) == b""  # dropped: nothing left for its upstream
    for conn in held:
        conn.shutdown(socket.SHUT_WR)
        assert conn.recv(100) == b"got:a"
        conn.close()
    assert _ask(port, b"after") == b"got:after"
    said = (tmp_path / "stderr").read_text()
    assert "netbridge: a connection was dropped" in said, said
    assert "relay stopped" not in said


def test_only_the_socket_module_is_loaded_before_the_server_starts(tmp_path: Path) -> None:
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
    with run.stderr:
        stderr = run.stderr.read()

    def modules(stderr: str) -> set[str]:
        return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines() if "|" in line}

    loaded = modules(stderr) - modules(bare.stderr) - {"package"}
    assert loaded == {"_socket"}
