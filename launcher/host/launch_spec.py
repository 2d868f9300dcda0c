"""How to start one server: a plain command, or a sandbox profile whose launch argv is
rendered at each start from the host's facts as they are then."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Mapping, Sequence

from launcher.host.machine import MACOS, host_facts
from launcher.host.oscalls import memfd, wide_table_fd
from launcher.shared.user_errors import StartupError
from sandbox_profiles.launch import launch_argv, launch_dirs
from sandbox_profiles.model import Mount, SandboxProfile
from sandbox_profiles.profile import ETC_FILES, SYSTEM_MOUNTS
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
    # Where each host path the sandbox mounts led when it was judged (its real path then):
    # checked again at every start (a restart too), see :func:`moved_since`.
    leads: tuple[tuple[str, str], ...] = ()

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
        moved = moved_since(self.profile, dict(self.leads))
        if moved is not None:
            raise StartupError(f"server '{self.name}' not started: {moved}")
        fds: list[int] = []
        # bwrap is handed it (--sync-fd); a child started otherwise closes it before its
        # exec and keeps the table it sized.
        table = wide_table_fd() if self.profile is not None and not MACOS else None
        pinned: list[int] = []
        try:
            if self.seccomp is not None:
                fds.append(memfd("ironcurtain-seccomp", self.seccomp))
            argv = self.command(fds[0] if fds else None, table)
            if self.profile is not None and not MACOS:
                argv = pin_mounts(argv, self.profile, dict(self.leads), pinned)
            return subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=dict(self.env),
                cwd=self.cwd,
                start_new_session=True,
                pass_fds=[*fds, *pinned, *([] if table is None else [table])],
            )
        except MovedMount as exc:
            raise StartupError(f"server '{self.name}' not started: {exc}") from None
        finally:
            for fd in (*fds, *pinned):
                os.close(fd)


_HOST_VIEWS = ("bind", "ro-bind", "ro-bind-try")
# The same mounts made from a descriptor: bwrap mounts what it refers to, not a path.
_BY_DESCRIPTOR = {"bind": "--bind-fd", "ro-bind": "--ro-bind-fd", "ro-bind-try": "--ro-bind-fd"}
_BY_PATH = {"bind": "--bind", "ro-bind": "--ro-bind", "ro-bind-try": "--ro-bind-try"}
_SYSTEM = frozenset((*(root for root, _ in SYSTEM_MOUNTS), *ETC_FILES))


def host_views(profile: SandboxProfile) -> list[Mount]:
    """The mounts of ``profile`` that show a host path (bwrap follows links in it), but
    the system's own (``/usr``, the files of ``/etc``...: only root changes them, and a
    link there may rightly be retargeted, ``/etc/resolv.conf`` by a network manager)."""
    return [
        m for m in profile.mounts if m.kind in _HOST_VIEWS and (m.source or m.dest) not in _SYSTEM
    ]


def leads_now(profile: SandboxProfile | None) -> tuple[tuple[str, str], ...]:
    """Each host path ``profile`` mounts, with its real path now."""
    if profile is None:
        return ()
    return tuple(
        (m.source or m.dest, os.path.realpath(m.source or m.dest)) for m in host_views(profile)
    )


def moved_since(profile: SandboxProfile | None, leads: Mapping[str, str]) -> str | None:
    """Why ``profile`` must not be started now: a host path it mounts leads elsewhere than
    when it was judged (``leads``). bwrap follows links in a mount's source, so a directory
    swapped for a link after the judgement (by another server writing the directory that
    holds it, before a restart) would mount the link's target, say ``.git/hooks``,
    writable. None when every one leads where it did."""
    if profile is None:
        return None
    for mount in host_views(profile):
        source = mount.source or mount.dest
        then = leads.get(source)
        now = os.path.realpath(source)
        if then is not None and now != then:
            return _moved(source, mount.reason, now, then)
    return None


class MovedMount(Exception):
    """A host path a sandbox mounts leads elsewhere than when it was judged."""


def _moved(source: str, reason: str, now: str, then: str) -> str:
    return (
        f"{source} ({reason}) now leads to {now}, not to {then} as when its sandbox was "
        "planned: something put a link on the way since"
    )


def pin_mounts(
    argv: list[str], profile: SandboxProfile, leads: Mapping[str, str], opened: list[int]
) -> list[str]:
    """``argv`` (bwrap's) with each host path judged (``leads``) mounted from a descriptor
    opened now and checked to be what was judged: bwrap then mounts that very directory or
    file, whatever is put at its path meanwhile. The descriptors are appended to ``opened``
    (the caller hands them to bwrap, then closes them); :class:`MovedMount` when one leads
    elsewhere. A path not there (a ``ro-bind-try`` of nothing) is left to bwrap."""
    out = list(argv)
    end = out.index("--chdir") if "--chdir" in out else len(out)
    for mount in host_views(profile):
        source = mount.source or mount.dest
        then = leads.get(source)
        if then is None:
            continue
        try:
            fd = os.open(source, os.O_PATH | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        opened.append(fd)
        now = os.readlink(f"/proc/self/fd/{fd}")
        if now != then:
            raise MovedMount(_moved(source, mount.reason, now, then))
        if not stat.S_ISDIR(os.fstat(fd).st_mode) and not stat.S_ISREG(os.fstat(fd).st_mode):
            continue  # a socket of ironcurtain's own (the egress proxy's): left to its path
        for i in range(end - 2):
            if out[i : i + 3] == [_BY_PATH[mount.kind], source, mount.dest]:
                out[i : i + 3] = [_BY_DESCRIPTOR[mount.kind], str(fd), mount.dest]
                break
    return out
