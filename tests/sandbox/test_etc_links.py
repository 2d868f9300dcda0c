"""The sandbox's /etc files as the host has them: a link into a system root the sandbox
shows stays a link (programs read the time zone's name from /etc/localtime's target, and
without it search every zone file for the same bytes); anything else is its content.
(Decided on a fake filesystem: ``tests/unit/sandbox_profiles/test_etc_binds.py``.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from launcher.host.oscalls import memfd
from launcher.plan.session_plan import RunOptions, plan_session
from sandbox_profiles.profile import write_runtime_files
from tests.support.home import make_home
from tests.support.marks import needs_bwrap


@needs_bwrap
@pytest.mark.skipif(
    not os.path.islink("/etc/localtime")
    or not os.path.realpath("/etc/localtime").startswith("/usr/"),
    reason="this host's /etc/localtime is not a link into /usr",
)
def test_in_the_sandbox_localtime_names_the_hosts_zone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = make_home(tmp_path)
    user.enter(monkeypatch)
    config = tmp_path / "servers.json"
    entry = {"command": "/usr/bin/readlink", "args": ["/etc/localtime"]}
    config.write_text(json.dumps({"mcpServers": {"zone": entry}}))
    ws = user.ws()
    plan = plan_session(RunOptions(config=str(config), workspace=str(ws)))
    uid, gid = plan.run_as or (os.getuid(), os.getgid())
    write_runtime_files(plan.runtime_dir, uid, gid)
    spec = plan.servers["zone"].launch
    assert spec.seccomp is not None
    fd = memfd("seccomp", spec.seccomp)
    try:
        done = subprocess.run(
            spec.command(fd), pass_fds=[fd], capture_output=True, text=True, timeout=30
        )
    finally:
        os.close(fd)
        shutil.rmtree(plan.runtime_dir, ignore_errors=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == os.readlink("/etc/localtime")
