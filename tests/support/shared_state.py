"""A real ``redis-server`` and a real ``haproxy`` on loopback, for the tests of several
ironcurtain instances sharing their state: each started in a test's own directory, on a
unix socket (Redis) or a free port (HAProxy), and stopped after."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

# Debian puts haproxy in /usr/sbin, which an ordinary user's PATH may not hold.
HAPROXY = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/sbin")
needs_redis = pytest.mark.skipif(
    shutil.which("redis-server") is None, reason="redis-server is not installed"
)
needs_haproxy = pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed")
WAIT = 60.0  # seconds a service may take to come up on a loaded machine


@dataclass
class Redis:
    url: str
    socket: Path
    proc: subprocess.Popen[bytes] | None = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)

    def start(self) -> None:
        """Started (again) on its socket, once it answers."""
        self.proc = subprocess.Popen(
            [
                *("redis-server", "--port", "0", "--unixsocket", str(self.socket)),
                *("--unixsocketperm", "700", "--save", "", "--appendonly", "no"),
                *("--dir", str(self.socket.parent)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + WAIT
        while not _ping(self.socket):
            assert self.proc.poll() is None, "redis-server exited"
            assert time.monotonic() < deadline, "redis-server did not come up"
            time.sleep(0.05)


def _ping(path: Path) -> bool:
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(5)
            sock.connect(str(path))
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@contextmanager
def redis_server() -> Iterator[Redis]:
    """``redis-server`` on a unix socket in a directory of its own, short enough for a
    socket's path (no TCP port, nothing saved)."""
    where = Path(tempfile.mkdtemp(prefix="ic-redis-", dir="/tmp"))
    server = Redis(f"unix://{where / 'redis.sock'}", where / "redis.sock")
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(where, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def haproxy(where: Path, ports: Sequence[int]) -> Iterator[str]:
    """``haproxy`` on a free loopback port, round robin over the instances on ``ports``:
    its ``/mcp`` URL. Each instance is sent the ``Host`` it answers to (its own address)."""
    port = free_port()
    servers = "".join(f"    server 127.0.0.1:{p} 127.0.0.1:{p}\n" for p in ports)
    config = where / "haproxy.cfg"
    config.write_text(
        "defaults\n    mode http\n    timeout connect 10s\n    timeout client 120s\n"
        "    timeout server 120s\n"
        f"frontend mcp\n    bind 127.0.0.1:{port}\n    default_backend instances\n"
        "backend instances\n    balance roundrobin\n    http-send-name-header Host\n" + servers
    )
    proc = subprocess.Popen(
        [str(HAPROXY), "-db", "-f", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + WAIT
        while True:
            assert proc.poll() is None, "haproxy exited"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=5).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "haproxy did not come up"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
