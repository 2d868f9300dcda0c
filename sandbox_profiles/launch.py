"""The one switch on platform: a profile and the host's facts in, the launch argv out.

Pure: nothing here reads the filesystem, the environment or the OS. The launcher gathers
the facts (:class:`HostFacts`) and does what the result asks (creating the directories of
:func:`launch_dirs`, passing the seccomp descriptor).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import field

from sandbox_profiles import seatbelt
from sandbox_profiles.bwrap import limits_argv
from sandbox_profiles.bwrap import render as render_bwrap
from sandbox_profiles.model import Limits, SandboxProfile
from sandbox_profiles.records import frozen

SANDBOX_EXEC = "/usr/bin/sandbox-exec"


@frozen
class HostFacts:
    """What the launch argv depends on besides the profile.

    ``hard_limits`` are the launcher's own hard rlimits (None: unlimited): without privilege
    ``prlimit`` cannot raise one, and a server asking for more would not start at all, so
    no limit is set above them. ``processes`` is how many threads the uid the server runs
    as has now (RLIMIT_NPROC counts threads, not processes), the base its own allowance is
    added to; ``tmpdir`` is ``$TMPDIR``.
    """

    platform: str  # as sys.platform says: "linux", "darwin"
    bwrap: str = "bwrap"
    hard_limits: Limits = field(default_factory=Limits)
    processes: int = 0
    tmpdir: str = "/tmp"
    prlimit: str = "prlimit"


def launch_argv(
    profile: SandboxProfile, host: HostFacts, seccomp_fd: int | None, table_fd: int | None = None
) -> list[str]:
    """The argv that starts ``profile``'s server in its sandbox: on Linux bwrap (reading
    its seccomp filter from ``seccomp_fd``, sizing the server's descriptor table with
    ``table_fd``) behind a ``prlimit`` prefix when the profile has limits; on macOS
    ``sandbox-exec`` with the rendered SBPL and a private TMPDIR.

    >>> from sandbox_profiles.model import SandboxProfile
    >>> p = SandboxProfile("t", ("/bin/true",), "/", {}, ())
    >>> launch_argv(p, HostFacts("darwin", tmpdir="/var/tmp"), None)[3:6]
    ['-D', 'TMPDIR=/var/tmp/ironcurtain-t', '/bin/true']
    """
    if host.platform == "darwin":  # rendered and structure-tested; not run on macOS yet
        tmp = private_tmpdir(profile, host)
        sbpl = seatbelt.render(profile)
        return [SANDBOX_EXEC, "-p", sbpl, "-D", f"TMPDIR={tmp}", *profile.argv]
    argv = render_bwrap(profile, host.bwrap, seccomp_fd, table_fd=table_fd)
    if profile.limits.any():
        base = host.processes if profile.limits.processes is not None else 0
        limits = within_limits(profile.limits, host.hard_limits)
        argv = limits_argv(limits, host.prlimit, base) + argv
    return argv


def launch_dirs(profile: SandboxProfile, host: HostFacts) -> list[str]:
    """Directories the launcher must create (owner-only) before running :func:`launch_argv`.

    >>> from sandbox_profiles.model import SandboxProfile
    >>> launch_dirs(SandboxProfile("t", ("/bin/true",), "/", {}, ()), HostFacts("linux"))
    []
    """
    if host.platform == "darwin":
        return [private_tmpdir(profile, host)]
    return []


def launch_cwd(profile: SandboxProfile, platform: str) -> str:
    """Where the launch argv is started: bwrap does its own chdir into the sandbox, so
    ``/`` there; ``sandbox-exec`` starts the server where it is to run."""
    return profile.cwd if platform == "darwin" else "/"


def private_tmpdir(profile: SandboxProfile, host: HostFacts) -> str:
    return os.path.join(host.tmpdir, f"ironcurtain-{profile.name}")


def within_limits(limits: Limits, hard: Limits) -> Limits:
    """``limits`` with none above the matching one of ``hard`` (None: unlimited).

    >>> within_limits(Limits(open_files=4096, cpu_seconds=5), Limits(open_files=1024))
    Limits(memory=None, open_files=1024, processes=None, cpu_seconds=5, file_size=None)
    """

    def cap(value: int | None, ceiling: int | None) -> int | None:
        if value is None or ceiling is None:
            return value
        return min(value, ceiling)

    return dataclasses.replace(
        limits,
        memory=cap(limits.memory, hard.memory),
        open_files=cap(limits.open_files, hard.open_files),
        cpu_seconds=cap(limits.cpu_seconds, hard.cpu_seconds),
        file_size=cap(limits.file_size, hard.file_size),
    )
