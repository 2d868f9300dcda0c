"""One profile model; renderers (bwrap, Seatbelt) turn it into an OS sandbox."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Literal

from sandbox_profiles.records import frozen

MountKind = Literal[
    "ro-bind",  # read-only view of a host path
    "ro-bind-try",  # the same, skipped when the host path is missing
    "bind",  # writable view of a host path
    "tmpfs",  # empty private directory
    "dir",  # empty directory created inside the sandbox
    "symlink",  # source is the link target
    "proc",
    "dev",
    "mask-file",  # an unreadable file hides a host file (source: that file)
]


@frozen(slots=True)
class Mount:
    """One entry of a sandbox's filesystem view: what is shown at ``dest`` (a bind of
    ``source``, a tmpfs, a directory, a mask), and why."""

    kind: MountKind
    dest: str
    source: str | None = None
    reason: str = ""
    mode: int | None = None  # permissions of a created tmpfs or dir


@frozen(slots=True)
class Limits:
    """Per-server resource limits; None means not limited.

    ``memory`` bounds the private data of each process (RLIMIT_DATA) and the resident memory
    of the server's whole process tree (watched by the launcher); ``processes`` counts the
    server's own processes.
    """

    memory: int | None = None  # bytes
    open_files: int | None = None
    processes: int | None = None
    cpu_seconds: int | None = None
    file_size: int | None = None  # bytes

    def any(self) -> bool:
        return any(
            v is not None
            for v in (
                self.memory,
                self.open_files,
                self.processes,
                self.cpu_seconds,
                self.file_size,
            )
        )

    def describe(self) -> str:
        """The limits in words, or ``no limits``.

        >>> Limits(memory=4 << 30, processes=256, file_size=1 << 30).describe()
        'memory 4 GiB, 256 processes, files up to 1 GiB'
        >>> Limits().describe()
        'no limits'
        """
        parts = []
        if self.memory is not None:
            parts.append(f"memory {_size(self.memory)}")
        if self.processes is not None:
            parts.append(f"{self.processes} processes")
        if self.open_files is not None:
            parts.append(f"{self.open_files} open files")
        if self.file_size is not None:
            parts.append(f"files up to {_size(self.file_size)}")
        if self.cpu_seconds is not None:
            parts.append(f"{self.cpu_seconds} s of CPU")
        return ", ".join(parts) or "no limits"


def _size(size: int) -> str:
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} bytes"


@frozen
class SandboxProfile:
    """Everything needed to start one server in isolation; renderers add nothing to it.

    ``env`` is the complete environment of the sandboxed process: renderers must pass it
    through the process environment, never on an argv.

    ``run_as`` is set when the launcher itself runs as root: the sandbox is then built by a
    privileged bubblewrap without a user namespace (so root's uid is never mapped inside),
    and the command runs as that unprivileged uid/gid, with no capabilities at all.
    """

    name: str
    argv: tuple[str, ...]
    cwd: str
    env: Mapping[str, str]
    mounts: tuple[Mount, ...]
    # "none": loopback only. "proxy": also the egress proxy's socket, bridged to
    # 127.0.0.1:PROXY_PORT inside; still no route to anything else.
    network: Literal["none", "proxy"] = "none"
    namespaces: tuple[str, ...] = ("user", "pid", "ipc", "uts", "cgroup", "net")
    hostname: str = "ironcurtain"
    die_with_parent: bool = True
    new_session: bool = True
    drop_all_capabilities: bool = True
    disable_nested_userns: bool = True
    writable: tuple[str, ...] = field(default=())
    run_as: tuple[int, int] | None = None
    seccomp: bool = True
    limits: Limits = field(default_factory=Limits)
    # Paths inside writable roots that must not come into being (denyWrite, ironcurtain's
    # own files, files a git configuration includes): the launcher quarantines them.
    guarded: tuple[str, ...] = ()
    # Paths inside writable roots protected by where they are (what a link or a git
    # configuration points at, denyWrite, ironcurtain's files) and the way to each: what
    # takes one of those places with another identity is quarantined.
    anchored: tuple[str, ...] = ()
