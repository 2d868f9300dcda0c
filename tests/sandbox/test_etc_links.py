"""The sandbox's /etc files as the host has them: a link into a system root the sandbox
shows stays a link (programs read the time zone's name from /etc/localtime's target, and
without it search every zone file for the same bytes); anything else is its content."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from pyfakefs.fake_filesystem import FakeFilesystem

from launcher.host.oscalls import memfd
from launcher.plan.session_plan import RunOptions, plan_session
from launcher.session.hostfiles import write_runtime_files
from sandbox_profiles.model import Mount
from sandbox_profiles.profile import _bind_etc
from tests.support.home import make_home
from tests.support.marks import needs_bwrap


def _mounts(path: str) -> list[Mount]:
    mounts: list[Mount] = []
    _bind_etc(path, mounts)
    return mounts


def test_a_link_into_usr_stays_a_link(fs: FakeFilesystem) -> None:
    fs.create_file("/usr/share/zoneinfo/Europe/Paris", contents="TZif")
    fs.create_symlink("/etc/localtime", "/usr/share/zoneinfo/Europe/Paris")
    fs.create_symlink("/etc/relative", "../usr/share/zoneinfo/Europe/Paris")
    assert [(m.kind, m.dest, m.source) for m in _mounts("/etc/localtime")] == [
        ("symlink", "/etc/localtime", "/usr/share/zoneinfo/Europe/Paris")
    ]
    assert [(m.kind, m.source) for m in _mounts("/etc/relative")] == [
        ("symlink", "../usr/share/zoneinfo/Europe/Paris")
    ]


def test_a_link_elsewhere_or_dangling_is_bound_as_its_content(fs: FakeFilesystem) -> None:
    fs.create_file("/var/lib/tz/zone", contents="TZif")
    fs.create_symlink("/etc/localtime", "/var/lib/tz/zone")  # not shown in the sandbox
    fs.create_symlink("/etc/timezone", "/usr/share/missing")
    fs.create_file("/usr/share/zoneinfo/UTC", contents="TZif")
    fs.create_symlink("/var/tz", "/usr/share/zoneinfo/UTC")
    fs.create_symlink("/etc/localzone", "/var/tz")  # leads into /usr, through /var
    assert [(m.kind, m.source) for m in _mounts("/etc/localzone")] == [
        ("ro-bind", "/etc/localzone")
    ]
    fs.create_file("/etc/os-release", contents="ID=debian")
    assert [(m.kind, m.source) for m in _mounts("/etc/localtime")] == [
        ("ro-bind", "/etc/localtime")
    ]
    assert _mounts("/etc/timezone") == []  # nothing there: nothing to show
    assert [(m.kind, m.source) for m in _mounts("/etc/os-release")] == [
        ("ro-bind", "/etc/os-release")
    ]
    assert _mounts("/etc/absent") == []


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
