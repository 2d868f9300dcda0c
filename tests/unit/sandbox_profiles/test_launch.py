"""The launch argv from a profile and host facts: pure, no sandbox started, any platform."""

from __future__ import annotations

from dataclasses import replace

from sandbox_profiles.bwrap import render
from sandbox_profiles.launch import (
    SANDBOX_EXEC,
    HostFacts,
    launch_argv,
    launch_cwd,
    launch_dirs,
    within_limits,
)
from sandbox_profiles.model import Limits, Mount, SandboxProfile

PROFILE = SandboxProfile(
    "files",
    ("/usr/bin/server", "--root", "/ws"),
    "/ws",
    {"PATH": "/usr/bin"},
    (Mount("ro-bind", "/usr", "/usr", "system"), Mount("bind", "/ws", "/ws", "workspace")),
)
LINUX = HostFacts("linux", bwrap="/opt/bwrap", processes=40, tmpdir="/tmp")


def test_linux_without_limits_is_bwrap_alone() -> None:
    argv = launch_argv(PROFILE, LINUX, None)
    assert argv == render(PROFILE, "/opt/bwrap", None)
    assert argv[0] == "/opt/bwrap" and argv[-3:] == ["/usr/bin/server", "--root", "/ws"]
    assert "--seccomp" not in argv
    assert launch_dirs(PROFILE, LINUX) == []


def test_linux_passes_the_seccomp_descriptor() -> None:
    argv = launch_argv(PROFILE, LINUX, 7)
    assert argv[argv.index("--seccomp") + 1] == "7"


def test_linux_limits_are_a_prlimit_prefix_over_the_process_base() -> None:
    limited = replace(PROFILE, limits=Limits(memory=2**30, open_files=256, processes=10))
    argv = launch_argv(limited, LINUX, 5)
    prefix = argv[: argv.index("--") + 1]
    assert prefix == [
        "prlimit",
        f"--data={2**30}:{2**30}",
        "--nofile=256:256",
        "--nproc=50:50",  # the 40 threads the uid already has, plus its own 10
        "--",
    ]
    assert argv[len(prefix)] == "/opt/bwrap"
    assert argv[len(prefix) :] == render(limited, "/opt/bwrap", 5)


def test_linux_process_base_only_counts_with_a_process_limit() -> None:
    limited = replace(PROFILE, limits=Limits(open_files=64))
    assert launch_argv(limited, LINUX, None)[:3] == ["prlimit", "--nofile=64:64", "--"]


def test_linux_limits_are_capped_at_the_launchers_own_hard_limits() -> None:
    limited = replace(
        PROFILE, limits=Limits(open_files=4096, cpu_seconds=60, file_size=1 << 30, processes=5)
    )
    host = replace(LINUX, hard_limits=Limits(open_files=1024, cpu_seconds=30))
    argv = launch_argv(limited, host, None)
    assert "--nofile=1024:1024" in argv  # capped
    assert "--cpu=30:31" in argv  # capped
    assert f"--fsize={1 << 30}:{1 << 30}" in argv  # unlimited above: as asked
    assert "--nproc=45:45" in argv  # never capped: added to the uid's count


def test_within_limits_leaves_what_is_unlimited() -> None:
    asked = Limits(memory=100, open_files=None, cpu_seconds=9)
    assert within_limits(asked, Limits()) == asked
    assert within_limits(asked, Limits(memory=50, open_files=10)) == Limits(
        memory=50, open_files=None, cpu_seconds=9
    )


def test_darwin_is_sandbox_exec_with_sbpl_and_a_private_tmpdir() -> None:
    host = HostFacts("darwin", tmpdir="/var/folders/x/T")
    limited = replace(PROFILE, limits=Limits(open_files=64))
    argv = launch_argv(limited, host, None)
    assert argv[:2] == [SANDBOX_EXEC, "-p"]
    assert argv[2].startswith("(version 1)")
    assert argv[3:5] == ["-D", "TMPDIR=/var/folders/x/T/ironcurtain-files"]
    assert argv[5:] == ["/usr/bin/server", "--root", "/ws"]
    assert "prlimit" not in argv  # no rlimit prefix on macOS
    assert launch_dirs(limited, host) == ["/var/folders/x/T/ironcurtain-files"]


def test_the_launch_cwd_depends_on_the_platform() -> None:
    assert launch_cwd(PROFILE, "linux") == "/"  # bwrap does its own chdir
    assert launch_cwd(PROFILE, "darwin") == "/ws"
