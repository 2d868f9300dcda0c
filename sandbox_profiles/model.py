"""One profile model; renderers (bwrap, later Seatbelt) turn it into an OS sandbox."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

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


@dataclass(frozen=True, slots=True)
class Mount:
    kind: MountKind
    dest: str
    source: str | None = None
    reason: str = ""


@dataclass(frozen=True)
class SandboxProfile:
    """Everything needed to start one server in isolation; renderers add nothing to it.

    ``env`` is the complete environment of the sandboxed process: renderers must pass it
    through the process environment, never on an argv.
    """

    name: str
    argv: tuple[str, ...]
    cwd: str
    env: Mapping[str, str]
    mounts: tuple[Mount, ...]
    network: Literal["none"] = "none"
    namespaces: tuple[str, ...] = ("user", "pid", "ipc", "uts", "cgroup", "net")
    hostname: str = "ironcurtain"
    die_with_parent: bool = True
    new_session: bool = True
    drop_all_capabilities: bool = True
    disable_nested_userns: bool = True
    writable: tuple[str, ...] = field(default=())
