"""One pod of deploy/kubernetes, run as its manifests say, on loopback: the real gateway with
the Deployment's own arguments (each ``$(VAR)`` expanded from the ConfigMap and the Secret as
the kubelet does, the ConfigMap's files where the pod mounts them; loopback for the pod's
interfaces), a real ``redis-server`` with the Redis Deployment's arguments, and an identity
provider on loopback. Requests name the ConfigMap's public host, as an ingress passes it on.
What the pod promises: a caller's call reaches a sandboxed server; no token: 401 with a
challenge naming the public URL, a token of someone the ConfigMap does not admit: 403, a
rebound or look-alike Host: 421; the probes follow the gateway and its Redis; and the Redis
password the gateway is given is not within reach of a hostile server."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2
import pytest

from tests.deploy.manifests import (
    SECRET_EXAMPLE,
    Doc,
    container,
    documents,
    env_of,
    expand,
    find,
    resources,
)
from tests.support.home import Home
from tests.support.http import ACCEPT, http_session
from tests.support.idp import Provider, identity_provider
from tests.support.marks import needs_bwrap
from tests.support.paths import IRONCURTAIN
from tests.support.probe import probe_server_config, write_raw_policy
from tests.support.ready import serving_url
from tests.support.sdk import call

pytestmark = [
    needs_bwrap,
    pytest.mark.skipif(not shutil.which("redis-server"), reason="needs redis-server"),
]
PASSWORD = "a-redis-password-" + "p" * 24
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                         "clientInfo": {"name": "t", "version": "1"}}}  # fmt: skip
WAIT = 120  # seconds, for what a loaded machine may take to start or notice


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _mount(arguments: list[str], mount: str, where: Path) -> list[str]:
    """``arguments`` with the pod's mount point of the ConfigMap put where its files are."""
    return [a.replace(mount.rstrip("/") + "/", f"{where}/") for a in arguments]


class Pod:
    """The manifests' pod and its Redis, with a test's ports, files and provider."""

    def __init__(self, user: Home, idp: Provider) -> None:
        docs = resources()
        self.deployment = find(docs, "Deployment", "ironcurtain")
        self.redis = find(docs, "Deployment", "ironcurtain-redis")
        self.configmap: dict[str, str] = dict(find(docs, "ConfigMap", "ironcurtain")["data"])
        (secret,) = documents(SECRET_EXAMPLE)
        self.redis_port, self.gateway_port = _free_port(), _free_port()
        state = f"redis://:{PASSWORD}@127.0.0.1:{self.redis_port}/0"
        self.secret = {**secret["stringData"], "redis-password": PASSWORD, "state-url": state}
        # What is the cluster's: the provider's address, and its audience as issued here.
        self.configmap["oidc-issuer"] = idp.issuer
        self.public = self.configmap["public-url"]
        self.host = urlsplit(self.public).netloc  # what the ingress passes on
        self.files = user.root / "etc-ironcurtain"
        self.files.mkdir()
        (self.files / "mcp-servers.json").write_text(self.configmap["mcp-servers.json"])
        self.user = user
        self.redis_proc: subprocess.Popen[str] | None = None

    def _command(self, spec: Doc, env: dict[str, str]) -> list[str]:
        missing = lambda name: pytest.fail(f"$({name}) is not in the environment")  # noqa: E731
        arguments = [expand(a, env, missing) for a in (*spec.get("command", []), *spec["args"])]
        mount = next(m["mountPath"] for m in spec["volumeMounts"] if m["name"] == "config")
        return _mount(arguments, mount, self.files)

    def gateway_argv(self, *more: str) -> tuple[list[str], dict[str, str]]:
        spec = container(self.deployment, "gateway")
        env = env_of(spec, self.configmap, self.secret)
        argv = self._command(spec, env)
        argv[argv.index("--http") + 1] = str(self.gateway_port)
        argv[argv.index("--http-bind") + 1] = "127.0.0.1"  # the pod's interfaces, here
        return [IRONCURTAIN, *argv, *more], {**self.user.env, **env}

    def doctor_argv(self) -> tuple[list[str], dict[str, str]]:
        (spec,) = self.deployment["spec"]["template"]["spec"]["initContainers"]
        return [IRONCURTAIN, *spec["args"]], self.user.env

    def redis_argv(self) -> list[str]:
        spec = container(self.redis, "redis")
        env = env_of(spec, self.configmap, self.secret)
        argv = [expand(a, env, pytest.fail) for a in (*spec["command"], *spec["args"])]
        return [*argv, "--port", str(self.redis_port), "--bind", "127.0.0.1",
                "--dir", str(self.user.root)]  # fmt: skip

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.gateway_port}/mcp"

    def health(self, path: str = "/healthz") -> int:
        """What the kubelet's probe of ``path`` gets (0: no answer at all)."""
        where = f"http://127.0.0.1:{self.gateway_port}{path}"
        try:
            return httpx2.get(where, headers={"Host": "10.0.0.7:8765"}, timeout=10).status_code
        except httpx2.TransportError:
            return 0

    def start_redis(self) -> subprocess.Popen[str]:
        self.redis_proc = _popen(
            self.redis_argv(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        return self.redis_proc


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


def _popen(argv: list[str], **how: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(argv, text=True, **how)


def _until(what: str, done: Callable[[], bool]) -> None:
    """Wait (up to WAIT seconds) until ``done()`` is true."""
    deadline = time.monotonic() + WAIT
    while not done():
        assert time.monotonic() < deadline, f"still not {what} after {WAIT} s"
        time.sleep(0.2)


@contextmanager
def running(pod: Pod, *more: str) -> Iterator[subprocess.Popen[str]]:
    """Redis and the gateway (with ``more`` options after the Deployment's), until the
    readiness probe says the pod is ready; the gateway's process is given to the test."""
    argv, env = pod.doctor_argv()  # the init container: can this node sandbox?
    checked = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=WAIT)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    with ExitStack() as stack:
        pod.start_redis()
        stack.callback(lambda: _stop(pod.redis_proc) if pod.redis_proc else None)
        argv, env = pod.gateway_argv(*more)
        gateway = _popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                        stderr=subprocess.PIPE)  # fmt: skip
        stack.callback(_stop, gateway)
        assert gateway.stderr
        url, said = serving_url(gateway.stderr)
        assert url == f"http://127.0.0.1:{pod.gateway_port}/mcp", "".join(said)
        _until("ready", lambda: pod.health() == 200)
        yield gateway


@pytest.fixture
def idp() -> Iterator[Provider]:
    with identity_provider() as provider:
        yield provider


def _initialize(url: str, token: str | None, host: str | None = None) -> httpx2.Response:
    headers = {"Content-Type": "application/json", "Accept": ACCEPT}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if host is not None:
        headers["Host"] = host
    return httpx2.post(url, json=INITIALIZE, headers=headers, timeout=60)


def test_a_call_naming_the_public_host_reaches_a_sandboxed_server(
    user: Home, idp: Provider
) -> None:
    pod = Pod(user, idp)
    member = idp.token("alice", groups=["mcp-agents"], aud=pod.public)
    with running(pod):

        async def calling() -> tuple[bool, str]:
            async with http_session(pod.url, member, host=pod.host) as session:
                return await call(session, "time__get_current_time", {"timezone": "UTC"})

        failed, text = asyncio.run(calling())
        assert not failed and "UTC" in text, text
        refused = _initialize(pod.url, None, host=pod.host)
        assert refused.status_code == 401
        metadata = pod.public.removesuffix("/mcp") + "/.well-known/oauth-protected-resource"
        assert refused.headers["www-authenticate"] == f'Bearer resource_metadata="{metadata}"'
        # A valid token of the provider's, for someone the ConfigMap does not admit.
        outsider = idp.token("mallory", groups=["everyone"], aud=pod.public)
        assert _initialize(pod.url, outsider, host=pod.host).status_code == 403
        # A token for another audience than the public URL is no caller's.
        elsewhere = idp.token("alice", groups=["mcp-agents"], aud="https://other.example/mcp")
        assert _initialize(pod.url, elsewhere, host=pod.host).status_code == 401


@pytest.mark.parametrize(
    "host",
    ["attacker.example", "evil-mcp.team.example", "mcp.team.example.attacker.example",
     "ironcurtain.team.svc:80"],
    ids=["rebound", "suffix", "prefix", "service-name"],
)  # fmt: skip
def test_a_host_not_the_public_one_is_refused(user: Home, idp: Provider, host: str) -> None:
    """The pod listens on every interface: a name an attacker points at it, or one that only
    looks like the public one, gets nothing; nor does the Service's own name (the ingress
    passes on the public host). The control is the public host in the test above."""
    pod = Pod(user, idp)
    with running(pod):
        answer = _initialize(pod.url, idp.token("alice", groups=["mcp-agents"]), host=host)
        assert answer.status_code == 421, answer.text


def test_listening_beyond_loopback_needs_the_public_url(user: Home, idp: Provider) -> None:
    """The Deployment's listening address without its public URL: refused at start, one
    clear line, nothing started."""
    pod = Pod(user, idp)
    argv, env = pod.gateway_argv()
    at = argv.index("--public-url")
    del argv[at : at + 2]
    argv[argv.index("--http-bind") + 1] = "0.0.0.0"
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=WAIT)
    assert done.returncode == 2, done.stderr
    assert "--http-bind 0.0.0.0: listening beyond this machine needs --public-url" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_probes_follow_the_gateway_and_its_redis(user: Home, idp: Provider) -> None:
    pod = Pod(user, idp)
    with running(pod) as gateway:
        assert (pod.health(), pod.health("/livez")) == (200, 200)
        assert pod.redis_proc is not None
        _stop(pod.redis_proc)  # Redis lost: out of the Service's endpoints, still alive
        _until("unready", lambda: pod.health() == 503)
        assert pod.health("/livez") == 200
        pod.start_redis()
        _until("ready again", lambda: pod.health() == 200)
        gateway.kill()
        gateway.wait()
        _until("dead", lambda: pod.health("/livez") == 0)


def test_a_hostile_server_finds_no_redis_password(user: Home, idp: Provider) -> None:
    """The pod's secrets reach the gateway in its environment and on its command line, as the
    Deployment gives them; a server of it, doing what it likes, finds them in neither."""
    pod = Pod(user, idp)
    server = probe_server_config(True)
    server["env"] = {**server["env"], "PLANTED": "planted-" + PASSWORD[::-1]}
    (pod.files / "mcp-servers.json").write_text(json.dumps({"mcpServers": {"probe": server}}))
    policy = write_raw_policy(user.root / "policy")
    with running(pod, "--policy-dir", str(policy), "--server", "probe"):

        async def finding() -> list[str]:
            token = idp.token("alice", groups=["mcp-agents"])
            async with http_session(pod.url, token) as session:
                return [(await call(session, "find_secret", {"needle": n}))[1]
                        for n in (PASSWORD, "planted-" + PASSWORD[::-1])]  # fmt: skip

        secret, planted = asyncio.run(finding())
    assert planted.startswith("OK found"), planted  # the control: it finds what it is given
    assert secret == "FAILED: not found"


def _answers(port: int) -> bool:
    """Whether something on 127.0.0.1:``port`` answers, from outside any sandbox."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(b"GET / HTTP/1.0\r\n\r\n")  # Redis, too, answers it (an error)
        return bool(conn.recv(64))


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "control-unsandboxed"])
def test_a_networked_hostile_server_reaches_nothing_of_the_pod(
    user: Home, idp: Provider, sandboxed: bool
) -> None:
    """A server allowed every public name tries what the pod holds on its addresses: Redis
    (the shared state: approvals), the gateway's own port, directly and through
    its egress proxy. In a cluster Redis is a Service's private address, refused the same way.
    The control: the same server unsandboxed reaches each of them."""
    pod = Pod(user, idp)
    server = probe_server_config(sandboxed)
    if sandboxed:
        server["sandbox"]["network"] = {"allowedDomains": ["*"]}
    (pod.files / "mcp-servers.json").write_text(json.dumps({"mcpServers": {"probe": server}}))
    policy = write_raw_policy(user.root / "policy")
    ports = {"redis": pod.redis_port, "gateway": pod.gateway_port}
    with running(pod, "--policy-dir", str(policy), "--server", "probe"):
        assert all(_answers(port) for port in ports.values())  # each is there

        async def trying() -> dict[str, str]:
            token = idp.token("alice", groups=["mcp-agents"])
            tried: dict[str, str] = {}
            async with http_session(pod.url, token) as session:
                for what, port in ports.items():
                    for host in ("127.0.0.1", "localhost"):
                        direct = {"host": host, "port": port}
                        tried[f"{what} {host} direct"] = (
                            await call(session, "connect_tcp", direct)
                        )[1]
                        if sandboxed:
                            proxied = {"url": f"http://{host}:{port}/"}
                            tried[f"{what} {host} proxied"] = (
                                await call(session, "http_get", proxied)
                            )[1]
            return tried

        tried = asyncio.run(trying())
    # Reached: the probe connected (it then waits 2 s for a banner these services do not
    # send: "timed out"). On loopback a connection is accepted or refused at once, never
    # left to time out; the egress proxy answers a refusal.
    reached = {k for k, v in tried.items() if v.startswith("OK") or v == "FAILED: timed out"}
    assert reached == (set() if sandboxed else set(tried)), tried
    assert len(tried) == (8 if sandboxed else 4)
