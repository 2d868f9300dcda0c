"""How to start one server: a plain command, or a sandbox profile whose launch argv is
rendered at each start from the host's facts as they are then."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence

from launcher.host.machine import MACOS, host_facts
from launcher.host.oscalls import memfd, wide_table_fd
from sandbox_profiles.launch import launch_argv, launch_dirs
from sandbox_profiles.model import SandboxProfile
from sandbox_profiles.records import frozen


@frozen
class LaunchSpec:
    """How to start one server. A sandboxed one has a ``profile``; its argv (bwrap, with the
    seccomp descriptor and the ``prlimit`` prefix) is rendered at each start."""

    name: str
    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: str
    timeout: float | None
    profile: SandboxProfile | None = None
    bwrap: str = "bwrap"
    seccomp: bytes | None = None

    def command(self, seccomp_fd: int | None, table_fd: int | None = None) -> list[str]:
        """The argv to start it now (creating what that needs, as a private TMPDIR)."""
        profile = self.profile
        if profile is None:
            return list(self.argv)
        host = host_facts(profile, self.bwrap)
        for directory in launch_dirs(profile, host):
            os.makedirs(directory, mode=0o700, exist_ok=True)
        return launch_argv(profile, host, seccomp_fd, table_fd)

    def spawn(self) -> subprocess.Popen[bytes]:
        """Start it: its stdio on pipes, in a process group of its own, its seccomp filter
        handed over on a memfd, its descriptor table wide from the start
        (:func:`~launcher.host.oscalls.wide_table_fd`). Nothing is written to it here."""
        fds: list[int] = []
        # bwrap is handed it (--sync-fd); a child started otherwise closes it before its
        # exec and keeps the table it sized.
        table = wide_table_fd() if self.profile is not None and not MACOS else None
        try:
            if self.seccomp is not None:
                fds.append(memfd("ironcurtain-seccomp", self.seccomp))
            return subprocess.Popen(
                self.command(fds[0] if fds else None, table),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=dict(self.env),
                cwd=self.cwd,
                start_new_session=True,
                pass_fds=[*fds, *([] if table is None else [table])],
            )
        finally:
            for fd in fds:
                os.close(fd)
