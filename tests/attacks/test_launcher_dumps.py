"""A launcher that holds secrets' values gives them to no other process of its user: another
process of the same uid cannot read its ``/proc/PID/environ`` or ``mem``, nor attach to it
with ptrace, and it writes no core file. Attacked as an ordinary user would: ``ironcurtain
run`` itself with a brokered secret, by this user without the capabilities that read any
process (as root, those are dropped from both), with the control of the same launcher
holding no secret (readable, as any process of one's own is); and the protection itself in
a process of uid 65534, read by another process of that uid, with its control."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.home import Home, make_home
from tests.support.marks import needs_bwrap
from tests.support.paths import IRONCURTAIN, REPO
from tests.support.probe import probe_server_config, write_raw_policy
from tests.support.sdk import call, connect

NOBODY = 65534
VALUE = "s3cr3t-held-by-the-launcher-2b9e41"
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
# This user as an ordinary one: root without the powers that read any process or any file
# (CAP_SYS_PTRACE, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH); an ordinary user as it is.
_NOT_ROOTS = "-sys_ptrace,-dac_override,-dac_read_search"
ORDINARY = (
    ["setpriv", f"--inh-caps={_NOT_ROOTS}", f"--bounding-set={_NOT_ROOTS}", "--"]
    if os.geteuid() == 0
    else []
)

pytestmark = pytest.mark.skipif(
    not shutil.which("setpriv") or not sys.platform.startswith("linux"),
    reason="needs Linux and setpriv",
)

# What another process of the same user tries on the launcher: each line "what: outcome".
READER = r"""
import ctypes, os, sys
pid = int(sys.argv[1])
try:
    with open(f"/proc/{pid}/environ", "rb") as f:
        print("environ:", f.read().decode(errors="replace").replace("\0", " "))
except OSError as e:
    print("environ: refused", e.errno)
try:
    os.close(os.open(f"/proc/{pid}/mem", os.O_RDONLY))
    print("mem: opened")
except OSError as e:
    print("mem: refused", e.errno)
libc = ctypes.CDLL(None, use_errno=True)
PTRACE_SEIZE = 0x4206  # attaches without stopping it
if libc.ptrace(PTRACE_SEIZE, pid, 0, 0) == 0:
    print("ptrace: attached")
else:
    print("ptrace: refused", ctypes.get_errno())
"""


def _read_as(prefix: list[str], pid: int) -> dict[str, str]:
    done = subprocess.run(
        [*prefix, "/usr/bin/python3", "-c", READER, str(pid)],
        capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"}, cwd="/",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return dict(line.split(": ", 1) for line in done.stdout.splitlines())


@pytest.fixture
def scratch() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="ironcurtain-dumps-", dir="/tmp"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _home(scratch: Path) -> Home:
    user = make_home(scratch)
    user.env["MY_TOKEN"] = VALUE
    user.ws("ws")
    return user


def _launcher_pid(config: Path) -> int:
    """The ``ironcurtain run`` process started with ``config``."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if str(config).encode() in argv and b"run" in argv and b"bwrap" not in argv[0]:
            return int(entry)
    raise AssertionError(f"no ironcurtain run with {config} found")


def _launcher(scratch: Path, brokered: bool) -> dict[str, str]:
    """Start ``ironcurtain run`` as this user without ``CAP_SYS_PTRACE`` (what an ordinary
    user has) with the probe (its secret brokered, or given in its env), and once it
    serves, try its memory as another process of this user, as ordinary."""
    user = _home(scratch)
    server: dict[str, Any] = probe_server_config(True)
    server["sandbox"]["network"] = {"allowedDomains": ["api.test"]}
    if brokered:
        server["secrets"] = {"API_TOKEN": {"from": "env:MY_TOKEN", "hosts": ["api.test"]}}
    config = scratch / "probe.json"
    config.write_text(json.dumps({"mcpServers": {"probe": server}}))
    policy = write_raw_policy(scratch / "policy")
    args = ["--config", str(config), "--policy-dir", str(policy)]
    args += ["--workspace", str(scratch / "ws")]
    seen: dict[str, str] = {}

    async def scenario() -> None:
        command = [*ORDINARY, IRONCURTAIN, "run", *args]
        async with connect(user, command=command) as session:
            await call(session, "probe__env_value", {"name": "API_TOKEN"})
            seen.update(_read_as(ORDINARY, _launcher_pid(config)))

    asyncio.run(scenario())
    return seen


@needs_bwrap
def test_no_process_of_the_same_user_reads_a_launcher_holding_secrets(scratch: Path) -> None:
    seen = _launcher(scratch, brokered=True)
    assert seen["mem"].startswith("refused") and seen["ptrace"].startswith("refused"), seen
    if os.geteuid() != 0:
        # Its environment (where env:NAME read the value from) too. Root's other processes
        # still read a root launcher's environ without CAP_SYS_PTRACE (as Linux 6.18 has it):
        # an ordinary user's is what the test below shows as uid 65534.
        assert seen["environ"].startswith("refused"), seen
        assert all(VALUE not in said for said in seen.values())


@needs_bwrap
def test_control_a_launcher_holding_no_secret_is_readable_by_its_user(scratch: Path) -> None:
    seen = _launcher(scratch, brokered=False)
    assert VALUE in seen["environ"], seen
    assert seen["mem"] == "opened" and seen["ptrace"] == "attached", seen


# What the server reads of itself in its sandbox: each must work as it does for a server
# whose launcher holds no secret (a process ``execve`` started is dumpable again).
OWN = ["/proc/self/status", "/proc/self/environ", "/proc/self/maps", "/proc/self/cmdline"]


def _servers_own_reads(scratch: Path, brokered: bool) -> tuple[dict[str, str], str]:
    """The server's reads of its own ``/proc/self`` files and its list of its open
    descriptors, under a launcher started as an ordinary user (holding a brokered secret,
    or not); and whether the launcher was left dumpable."""
    user = _home(scratch)
    server: dict[str, Any] = probe_server_config(True)
    server["sandbox"]["network"] = {"allowedDomains": ["api.test"]}
    if brokered:
        server["secrets"] = {"API_TOKEN": {"from": "env:MY_TOKEN", "hosts": ["api.test"]}}
    config = scratch / "probe.json"
    config.write_text(json.dumps({"mcpServers": {"probe": server}}))
    policy = write_raw_policy(scratch / "policy")
    args = ["--config", str(config), "--policy-dir", str(policy)]
    args += ["--workspace", str(scratch / "ws")]
    seen: dict[str, str] = {}
    launcher: list[str] = []

    async def scenario() -> None:
        async with connect(user, command=[*ORDINARY, IRONCURTAIN, "run", *args]) as session:
            for path in OWN:
                seen[path] = (await call(session, "probe__read_path", {"path": path}))[1]
            seen["fd"] = (await call(session, "probe__list_dir", {"path": "/proc/self/fd"}))[1]
            launcher.append(_read_as(ORDINARY, _launcher_pid(config))["ptrace"])

    asyncio.run(scenario())
    return seen, launcher[0]


@needs_bwrap
@pytest.mark.parametrize("brokered", [True, False], ids=["protected", "control"])
def test_the_server_under_a_protected_launcher_reads_itself_as_ever(
    scratch: Path, brokered: bool
) -> None:
    seen, ptrace = _servers_own_reads(scratch, brokered)
    # The launcher is protected (or, the control, not) ...
    assert ptrace.startswith("refused" if brokered else "attached"), ptrace
    # ... and its server, a program it started, loses none of its own /proc.
    for path in OWN:
        assert "READ OK: " in seen[path], (path, seen[path])
    assert seen["fd"].startswith("OK ") and '"0"' in seen["fd"], seen["fd"]
    if brokered:  # nor does it read the value in any of it
        assert VALUE not in "".join(seen.values())


HOLDER = r"""
import os, sys, time
sys.path.insert(0, sys.argv[1])
if sys.argv[2] == "protect":
    from launcher.host.no_dumps import dumpable, keep_from_dumps
    keep_from_dumps()
    assert not dumpable()
import resource
print(resource.getrlimit(resource.RLIMIT_CORE)[0], flush=True)
time.sleep(120)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (to be uid 65534)")
@pytest.mark.parametrize("protect", [True, False], ids=["protected", "control"])
def test_the_protection_itself_as_an_ordinary_user(scratch: Path, protect: bool) -> None:
    # A copy of the package (the checkout may sit where uid 65534 cannot read).
    for package in ("launcher", "policy"):
        shutil.copytree(REPO / package, scratch / "lib" / package,
                        ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    holder = subprocess.Popen(
        [*AS_NOBODY, "/usr/bin/python3", "-c", HOLDER, str(scratch / "lib"),
         "protect" if protect else "plain"],
        stdout=subprocess.PIPE, text=True, env={"PATH": "/usr/bin:/bin", "HELD": VALUE},
        cwd="/",
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        core_limit = holder.stdout.readline().strip()
        seen = _read_as(AS_NOBODY, holder.pid)
    finally:
        holder.kill()
        holder.wait(timeout=60)
        if holder.stdout is not None:
            holder.stdout.close()
    if protect:
        assert core_limit == "0"
        assert seen["environ"].startswith("refused") and seen["mem"].startswith("refused")
        assert seen["ptrace"].startswith("refused")
    else:
        assert VALUE in seen["environ"] and seen["mem"] == "opened"
        assert seen["ptrace"] == "attached"
