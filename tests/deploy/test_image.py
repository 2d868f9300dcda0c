"""The image of deploy/Containerfile, built and run as one pod of the manifests (the gateway
listening on the container's every interface, with the ConfigMap's public URL), with the
security settings the Deployment gives it in Docker's words: a call naming the public host
reaches a server sandboxed inside the container, as uid 10001, on a read-only root. Skipped
where Docker cannot build (no `docker`, or no daemon answering)."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx2
import pytest

from tests.deploy.manifests import find, resources
from tests.deploy.test_pod import _free_port
from tests.support.http import http_session
from tests.support.sdk import call

REPOSITORY = Path(__file__).resolve().parents[2]
TOKEN = "an-image-test-token-" + "t" * 20
WAIT = 300  # seconds: a loaded machine, and the first start of the image's Python


def _docker_answers() -> bool:
    if not shutil.which("docker"):
        return False
    return subprocess.run(["docker", "info"], capture_output=True, timeout=60).returncode == 0


pytestmark = [
    pytest.mark.sandbox,
    pytest.mark.skipif(not _docker_answers(), reason="needs Docker (a daemon that answers)"),
]


def _docker(*args: str, timeout: float = WAIT) -> str:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"docker {args[0]}: {done.stderr}"
    return done.stdout.strip()


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    tag = f"ironcurtain-test:{uuid.uuid4().hex[:12]}"
    _docker("build", "-f", "deploy/Containerfile", "-t", tag, str(REPOSITORY), timeout=3600)
    yield tag
    subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, timeout=WAIT)


# The Deployment's securityContext in Docker's words: seccomp and AppArmor unconfined and
# /proc unmasked for the gateway only; for both no root, no capability, no setuid, read-only.
LOCKED = ["--user", "10001:10001", "--read-only", "--cap-drop", "ALL",
          "--security-opt", "no-new-privileges"]  # fmt: skip
SANDBOXING = ["--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
              "--security-opt", "systempaths=unconfined"]  # fmt: skip
VOLUMES = [
    "--tmpfs",
    "/tmp:uid=10001,gid=10001",
    "--tmpfs",
    "/home/ironcurtain:uid=10001,gid=10001",
]


# The gateway with the ConfigMap's servers, listening as the Deployment's does; the bearer
# token of plain --http (gateway mode, with its identity provider, is the pod test's).
GATEWAY = ["run", "--config", "/etc/ironcurtain/mcp-servers.json", "--http", "8765",
           "--http-bind", "0.0.0.0", "--public-url"]  # fmt: skip


def _config_files(where: Path) -> Path:
    data = find(resources(), "ConfigMap", "ironcurtain")["data"]
    where.mkdir(mode=0o755)
    where.chmod(0o755)
    (where / "mcp-servers.json").write_text(data["mcp-servers.json"])
    (where / "mcp-servers.json").chmod(0o644)
    return where


def test_a_call_through_the_image_reaches_a_sandboxed_server(image: str, tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    files = _config_files(tmp_path / "etc-ironcurtain")
    public = find(resources(), "ConfigMap", "ironcurtain")["data"]["public-url"]
    host = urlsplit(public).netloc  # what a load balancer in front passes on
    front = _free_port()
    mount = ["-v", f"{files}:/etc/ironcurtain:ro"]
    names: list[str] = []
    try:
        gateway = _docker("run", "-d", *LOCKED, *SANDBOXING, *VOLUMES, *mount,
                          "-e", f"IRONCURTAIN_HTTP_TOKEN={TOKEN}",
                          "-p", f"127.0.0.1:{front}:8765", image,
                          *GATEWAY, public)  # fmt: skip
        names.append(gateway)
        deadline = time.monotonic() + WAIT
        while "ready, serving MCP on" not in _logs(gateway) or _health(front) != 200:
            assert time.monotonic() < deadline, _logs(gateway)
            time.sleep(1)

        async def calling() -> tuple[bool, str]:
            url = f"http://127.0.0.1:{front}/mcp"
            async with http_session(url, TOKEN, host=host) as session:
                return await call(session, "time__get_current_time", {"timezone": "UTC"})

        failed, text = asyncio.run(calling())
        assert not failed and "UTC" in text, text
        # Sandboxed inside the container, not let through unsandboxed.
        assert re.search(r"\btime +sandboxed \(bwrap", _logs(gateway)), _logs(gateway)
    finally:
        for name in reversed(names):
            subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=WAIT)


def _logs(name: str) -> str:
    done = subprocess.run(["docker", "logs", name], capture_output=True, text=True, timeout=WAIT)
    return done.stdout + done.stderr


def _health(port: int) -> int:
    try:
        return httpx2.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code
    except httpx2.TransportError:
        return 0
