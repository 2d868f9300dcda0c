"""One pod of deploy/kubernetes, run as its manifests say, on loopback: the real gateway with
the Deployment's own arguments (each ``$(VAR)`` expanded from the ConfigMap and the Secret as
the kubelet does, the ConfigMap's files where the pod mounts them), the real HAProxy (the
Debian package the image installs) with the ConfigMap's ``haproxy.cfg`` and the proxy
container's environment, a real ``redis-server`` with the Redis Deployment's arguments, and an
identity provider on loopback. What the pod promises: a caller's call through the pod's front
reaches a sandboxed server; the front adds no way in (no token: 401, a token of someone the
ConfigMap does not admit: 403); /healthz, which the probes ask, follows the gateway; and the
Redis password the gateway is given is not within reach of a hostile server."""

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

import httpx2
import pytest

from launcher.cli.run_flags import BY_FLAG
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

# Where the proxy's program is looked for: Debian puts haproxy in /usr/sbin, which an
# ordinary user's PATH may not hold.
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
pytestmark = [
    needs_bwrap,
    pytest.mark.skipif(
        not shutil.which("haproxy", path=SYSTEM_PATH), reason="needs haproxy (Debian package)"
    ),
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
        self.redis_port, self.gateway_port, self.front = _free_port(), _free_port(), _free_port()
        state = f"redis://:{PASSWORD}@127.0.0.1:{self.redis_port}/0"
        self.secret = {**secret["stringData"], "redis-password": PASSWORD, "state-url": state}
        # What is the cluster's: the provider's address, and its audience as issued here.
        self.configmap["oidc-issuer"] = idp.issuer
        self.files = user.root / "etc-ironcurtain"
        self.files.mkdir()
        for key in ("mcp-servers.json", "haproxy.cfg"):
            (self.files / key).write_text(self.configmap[key])
        self.user = user

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
        return [IRONCURTAIN, *argv, *more], {**self.user.env, **env}

    def doctor_argv(self) -> tuple[list[str], dict[str, str]]:
        (spec,) = self.deployment["spec"]["template"]["spec"]["initContainers"]
        return [IRONCURTAIN, *spec["args"]], self.user.env

    def proxy_argv(self) -> tuple[list[str], dict[str, str]]:
        spec = container(self.deployment, "proxy")
        env = env_of(spec, self.configmap, self.secret)
        env |= {"PROXY_ADDR": "127.0.0.1", "PROXY_PORT": str(self.front)}
        env["GATEWAY_PORT"] = str(self.gateway_port)
        argv = _mount([*spec["command"], *spec.get("args", [])], "/etc/ironcurtain", self.files)
        return argv, {"PATH": SYSTEM_PATH, **env}

    def redis_argv(self) -> list[str]:
        spec = container(self.redis, "redis")
        env = env_of(spec, self.configmap, self.secret)
        argv = [expand(a, env, pytest.fail) for a in (*spec["command"], *spec["args"])]
        return [*argv, "--port", str(self.redis_port), "--bind", "127.0.0.1",
                "--dir", str(self.user.root)]  # fmt: skip

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.front}/mcp"

    def health(self) -> int:
        try:
            return httpx2.get(f"http://127.0.0.1:{self.front}/healthz", timeout=10).status_code
        except httpx2.TransportError:
            return 0


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
    """Redis, the gateway (with ``more`` options after the Deployment's) and its HAProxy,
    until /healthz says the pod is ready; the gateway's process is given to the test."""
    if "--state" not in BY_FLAG:
        pytest.skip("this checkout's gateway has no --state option (shared state) yet")
    argv, env = pod.doctor_argv()  # the init container: can this node sandbox?
    checked = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=WAIT)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    with ExitStack() as stack:
        redis = _popen(pod.redis_argv(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        stack.callback(_stop, redis)
        argv, env = pod.gateway_argv(*more)
        gateway = _popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                        stderr=subprocess.PIPE)  # fmt: skip
        stack.callback(_stop, gateway)
        assert gateway.stderr
        url, said = serving_url(gateway.stderr)
        assert url == f"http://127.0.0.1:{pod.gateway_port}/mcp", "".join(said)
        argv, env = pod.proxy_argv()
        proxy = _popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        stack.callback(_stop, proxy)
        _until("ready", lambda: pod.health() == 200 or proxy.poll() is not None)
        assert proxy.poll() is None, proxy.stderr.read() if proxy.stderr else ""
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


def test_a_call_through_the_pods_front_reaches_a_sandboxed_server(
    user: Home, idp: Provider
) -> None:
    pod = Pod(user, idp)
    member = idp.token("alice", groups=["mcp-agents"])
    with running(pod):

        async def calling() -> tuple[bool, str]:
            async with http_session(pod.url, member) as session:
                return await call(session, "time__get_current_time", {"timezone": "UTC"})

        failed, text = asyncio.run(calling())
        assert not failed and "UTC" in text, text
        # The Service's name as the client wrote it is no matter to the gateway behind.
        answer = _initialize(pod.url, member, host="ironcurtain.team.svc:80")
        assert answer.status_code == 200, answer.text
        refused = _initialize(pod.url, None)
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"].startswith("Bearer resource_metadata=")
        # A valid token of the provider's, for someone the ConfigMap does not admit.
        outsider = _initialize(pod.url, idp.token("mallory", groups=["everyone"]))
        assert outsider.status_code == 403


def test_the_front_is_what_lets_the_service_in(user: Home, idp: Provider) -> None:
    """The control: without the front's rewriting of Host, the gateway refuses what comes
    through it (it answers only to its own loopback address)."""
    pod = Pod(user, idp)
    config = pod.files / "haproxy.cfg"
    lines = config.read_text().splitlines()
    config.write_text("\n".join(ln for ln in lines if "set-header Host" not in ln) + "\n")
    with running(pod):
        answer = _initialize(pod.url, idp.token("alice", groups=["mcp-agents"]))
        assert answer.status_code == 421


def test_the_probes_follow_the_gateway(user: Home, idp: Provider) -> None:
    pod = Pod(user, idp)
    with running(pod) as gateway:
        assert pod.health() == 200
        gateway.kill()
        gateway.wait()
        _until("unhealthy", lambda: pod.health() == 503)


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
    (the shared state: approvals), the gateway's own port and its front, directly and through
    its egress proxy. In a cluster Redis is a Service's private address, refused the same way.
    The control: the same server unsandboxed reaches each of them."""
    pod = Pod(user, idp)
    server = probe_server_config(sandboxed)
    if sandboxed:
        server["sandbox"]["network"] = {"allowedDomains": ["*"]}
    (pod.files / "mcp-servers.json").write_text(json.dumps({"mcpServers": {"probe": server}}))
    policy = write_raw_policy(user.root / "policy")
    ports = {"redis": pod.redis_port, "gateway": pod.gateway_port, "front": pod.front}
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
    assert len(tried) == (12 if sandboxed else 6)
