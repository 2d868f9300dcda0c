"""A real ``git push`` over HTTPS through the broker: git (through the egress proxy, trusting
the session CA) holds only the sentinel, in the URL's credentials; the host is ``git
http-backend`` behind a TLS server on loopback with its own CA that accepts the push only
with the value in ``Basic`` credentials. A small ``http.postBuffer`` makes git send its
pack chunked, on a connection it keeps alive across the push's requests. The promise
checked: the push lands, the host saw only the value and git only the sentinel."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

from launcher.host.session_ca import SessionCA
from launcher.plan.secrets_plan import Brokered, new_sentinel
from launcher.servers.broker import Broker
from launcher.servers.egress_proxy import EgressProxy, Refusal
from policy.egress import EgressRules
from tests.support.marks import needs_installed
from tests.support.tls_upstream import make_authority

pytestmark = needs_installed(shutil.which("git") is None, "needs git (apt-get install git)")

VALUE = "ghp_s3cr3tValueForTheGitHost7f3a9c1e5d2b"
HOST = "git.test"
SENTINEL = new_sentinel()


class _GitHost(BaseHTTPRequestHandler):
    """``git http-backend`` over HTTP/1.1, behind ``Basic`` credentials holding the value."""

    protocol_version = "HTTP/1.1"
    root: ClassVar[str] = ""
    seen: ClassVar[list[str]] = []  # the Authorization header of each request

    def _any(self) -> None:
        auth = self.headers.get("Authorization", "")
        type(self).seen.append(auth)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if auth != "Basic " + base64.b64encode(f"git:{VALUE}".encode()).decode():
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        path, _, query = self.path.partition("?")
        env = {
            "PATH": os.environ["PATH"],
            "GIT_PROJECT_ROOT": self.root,
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(length),
            "REMOTE_USER": "git",
            "REMOTE_ADDR": "127.0.0.1",
        }
        run = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True)
        head, _, payload = run.stdout.replace(b"\r\n", b"\n").partition(b"\n\n")
        if b"\r\n\r\n" in run.stdout:
            payload = run.stdout.partition(b"\r\n\r\n")[2]
        fields = [line.split(b":", 1) for line in head.split(b"\n") if b":" in line]
        status = next((int(v.split()[0]) for k, v in fields if k.lower() == b"status"), 200)
        self.send_response(status)
        for name, value in fields:
            if name.lower() not in (b"status", b"content-length"):
                self.send_header(name.decode(), value.strip().decode())
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _any

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def _git_host(root: Path, chain: Path, seen: list[str]) -> Iterator[int]:
    handler = type("GitHost", (_GitHost,), {"root": str(root), "seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(chain)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


class _Proxy:
    """The egress proxy with the secret brokered, in a loop of its own, and a TCP port
    that leads to its socket (what the in-sandbox bridge does)."""

    def __init__(self, tmp_path: Path, ca_file: Path, port: int) -> None:
        self.refusals: list[Refusal] = []
        rules = EgressRules.from_config([f"{HOST}:{port}"], [], {HOST: "127.0.0.1"})
        self.ca = SessionCA("git")
        broker = Broker([Brokered("GIT_TOKEN", SENTINEL, VALUE, ((HOST, None),))], self.ca)
        broker.upstream.load_verify_locations(ca_file)
        self.sock = str(tmp_path / "egress.sock")
        self.proxy = EgressProxy("git", rules, self.sock, self.refusals.append, broker)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.port = self._run(self._start())

    def _run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(60)

    async def _start(self) -> int:
        await self.proxy.start()
        self.bridge = await asyncio.start_server(self._bridge, "127.0.0.1", 0)
        return int(self.bridge.sockets[0].getsockname()[1])

    async def _bridge(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_unix_connection(self.sock)

        async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(copy(reader, up_writer), copy(up_reader, writer))

    def close(self) -> None:
        async def stop() -> None:
            self.bridge.close()
            await self.proxy.stop()

        self._run(stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()


def _git(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)


def test_git_pushes_a_chunked_pack_with_the_value_put_in_by_the_broker(tmp_path: Path) -> None:
    ca_file, chain = make_authority(tmp_path, [HOST])
    remote = tmp_path / "repos" / "project.git"
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "GIT_TERMINAL_PROMPT": "0"}
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True, env=env)
    work = tmp_path / "work"
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True, env=env)
    (work / "data.bin").write_bytes(os.urandom(256 * 1024))  # a pack larger than postBuffer
    _git("add", ".", cwd=work, env=env)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x", cwd=work, env=env)
    seen: list[str] = []
    with _git_host(tmp_path / "repos", chain, seen) as port:
        proxy = _Proxy(tmp_path, ca_file, port)
        try:
            (tmp_path / "session-ca.pem").write_bytes(proxy.ca.pem())
            pushed = _git(
                *("-c", f"http.proxy=http://127.0.0.1:{proxy.port}"),
                *("-c", f"http.sslCAInfo={tmp_path / 'session-ca.pem'}"),
                *("-c", "http.postBuffer=4096"),
                "push",
                f"https://git:{SENTINEL}@{HOST}:{port}/project.git",
                "main",
                cwd=work,
                env={**env, "GIT_TRACE_CURL": "1", "GIT_TRACE_CURL_NO_DATA": "1"},
            )
        finally:
            proxy.close()
    assert pushed.returncode == 0, pushed.stderr[-3000:]
    assert "Transfer-Encoding: chunked" in pushed.stderr  # git sent its pack chunked
    assert "Re-using existing connection" in pushed.stderr  # on a kept connection
    head = _git("rev-parse", "main", cwd=work, env=env).stdout
    assert _git("--git-dir", str(remote), "rev-parse", "main", cwd=work, env=env).stdout == head
    assert VALUE not in pushed.stderr + pushed.stdout
    granted = [a for a in seen if a]
    assert granted and all(SENTINEL not in base64.b64decode(a.split()[1]).decode() for a in granted)
    assert not proxy.refusals
