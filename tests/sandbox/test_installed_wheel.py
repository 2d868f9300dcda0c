"""ironcurtain installed as Python users install tools: a wheel built from the checkout, in
a fresh virtual environment, with the bundled default config, on a machine where the npm
filesystem server is not installed. The servers that are there start and serve; the missing
one is named with the command that adds it; `doctor` lists it. A server asked for by name,
and a user's own config, stay strict.

The wheel's dependencies come from this checkout's environment (a path file), not from the
package registry: what is tested is the wheel (its modules and bundled files), not pip's
resolver."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.support.client import Client
from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.paths import BIN, REPO

pytestmark = needs_bwrap

FILESYSTEM_FIX = "npm install -g @modelcontextprotocol/server-filesystem"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The fresh environment's ``ironcurtain``, and a directory of programs that has the
    Python reference servers but not the npm filesystem server."""
    base = tmp_path_factory.mktemp("wheel")
    source = base / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for package in ("launcher", "policy", "sandbox_profiles"):
        shutil.copytree(
            REPO / package, source / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    wheels = base / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(source)],
        check=True,
        cwd=base,
    )
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    (wheel,) = wheels.glob("ironcurtain-*.whl")
    subprocess.run(
        [*pip, "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)],
        check=True,
    )
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    (Path(site) / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    programs = base / "programs"
    programs.mkdir()
    for server in ("mcp-server-git", "mcp-server-time", "mcp-server-fetch"):
        (programs / server).symlink_to(os.path.join(BIN, server))
    return venv / "bin" / "ironcurtain", programs


def _env(user: Home, programs: Path) -> dict[str, str]:
    return {**user.env, "PATH": f"{programs}:/usr/bin:/bin"}


def test_the_bundled_config_serves_what_is_installed_and_names_the_rest(
    user: Home, installed: tuple[Path, Path]
) -> None:
    ironcurtain, programs = installed
    assert ironcurtain.is_file() and not (ironcurtain.parent / "mcp-server-filesystem").exists()
    client = Client.spawn(
        [str(ironcurtain), "run", "--workspace", str(user.ws())],
        _env(user, programs),
        cwd=user.root,
        stderr=subprocess.PIPE,
    )
    try:
        client.initialize({}, timeout=60)
        tools = client.ask("tools/list")["result"]["tools"]
        answer = client.call("time__get_current_time", {"timezone": "UTC"})
        client.hang_up()
        client.proc.wait(timeout=20)
        assert client.proc.stderr is not None
        stderr = client.proc.stderr.read().decode()
    finally:
        client.kill()
    servers = {tool["name"].split("__")[0] for tool in tools}
    assert servers == {"git", "time", "fetch"}, servers
    assert "error" not in answer and '"datetime"' in str(answer), answer
    said = [line for line in stderr.splitlines() if "'filesystem'" in line]
    assert said and "is not started" in said[0] and FILESYSTEM_FIX in said[0], stderr
    # It came from the wheel, not from the checkout.
    assert str(REPO) not in stderr.replace(str(REPO / "tests"), "")


def test_doctor_names_the_missing_server_and_how_to_add_it(
    user: Home, installed: tuple[Path, Path]
) -> None:
    ironcurtain, programs = installed
    done = subprocess.run(
        [str(ironcurtain), "doctor"], env=_env(user, programs), capture_output=True, text=True
    )
    line = next(x for x in done.stdout.splitlines() if "bundled servers" in x)
    assert line.startswith("warn") and "not installed: filesystem" in line, done.stdout
    assert f"fix: {FILESYSTEM_FIX}" in done.stdout


def test_a_server_asked_for_by_name_or_in_the_users_own_config_stays_strict(
    user: Home, installed: tuple[Path, Path]
) -> None:
    ironcurtain, programs = installed
    env = _env(user, programs)
    named = subprocess.run(
        [str(ironcurtain), "run", "--server", "filesystem", "--workspace", str(user.ws())],
        env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60,
    )  # fmt: skip
    assert named.returncode == 2 and "Traceback" not in named.stderr, named.stderr
    assert "'mcp-server-filesystem' not found" in named.stderr
    config = user.root / "mine.json"
    config.write_text('{"mcpServers": {"fs": {"command": "mcp-server-filesystem"}}}')
    own = subprocess.run(
        [str(ironcurtain), "run", "--config", str(config), "--workspace", str(user.ws())],
        env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60,
    )  # fmt: skip
    assert own.returncode == 2 and "'mcp-server-filesystem' not found" in own.stderr


def test_with_none_of_them_installed_it_says_so_and_starts_nothing(
    user: Home, installed: tuple[Path, Path]
) -> None:
    ironcurtain, _ = installed
    done = subprocess.run(
        [str(ironcurtain), "run", "--workspace", str(user.ws())],
        env={**user.env, "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "none of the servers of the bundled default config" in done.stderr
    assert FILESYSTEM_FIX in done.stderr and "ironcurtain[servers]" in done.stderr
    assert not user.left_behind()
