"""What an approval gives a call that its server's standing sandbox cannot do.

An escalated tool call whose paths lie outside what the server's sandbox reaches would fail
there even when a human approves it. So, before the human is asked, the call's path
arguments (by their annotated roles) are compared with the standing profile: a read outside
the readable mounts needs a copy of what is there; a write or a removal outside the
writable roots needs that path made writable. When any such path exists the call is
*widened*: it runs in a one-shot instance of the server (:mod:`launcher.servers.widen`) that holds
exactly those paths, and the question says so. A path no approval can open is refused
before anyone is asked: inside a directory the server sees read-only (to change), behind a
``denyRead`` mask, an existing directory to write into, and, for any access, inside or
holding one of the places no server is ever given (ironcurtain's configuration, state and
runtime directories, where the approvals socket lives; ``/proc``, ``/sys``, ``/dev``).

Pure logic over the profile and ``lstat``; nothing is started here.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from typing import Literal

from launcher.shared.shown import visible
from policy.paths import iter_strings
from sandbox_profiles.autorun import INSTRUCTION_ENTRIES, Entry, match, path_sibling
from sandbox_profiles.model import Mount, SandboxProfile
from sandbox_profiles.present import INSTRUCTIONS
from sandbox_profiles.records import frozen
from sandbox_profiles.ways import deepest_mount, is_under

READ_ROLES = frozenset({"read-path"})
WRITE_ROLES = frozenset({"write-path"})
REMOVE_ROLES = frozenset({"delete-path"})
# Mounts through which the host's own files are seen.
_HOST_VIEWS = ("ro-bind", "ro-bind-try", "bind")
# Places no approval opens, for any access: a copy of them is the trusted process's own
# (``/proc/self`` is ironcurtain), other processes', or a device.
SYSTEM_PLACES = {
    "/proc": "the kernel's view of processes",
    "/sys": "the kernel's view of devices",
    "/dev": "the host's devices",
}

Kind = Literal["file", "directory", "absent"]


class CannotWiden(Exception):
    """An approval could not make this call work: why, naming the path's argument."""


@frozen(slots=True)
class Grant:
    """One path of a widened call and the access the one-shot instance gets to it.

    ``outside`` is False for a path the standing sandbox already reaches that the one-shot
    instance still needs (the source of a move out of the workspace): it is not part of
    what the human grants, but it is staged with the rest."""

    argument: str  # the argument naming it (the audit names this, never the path)
    path: str  # canonical host path
    access: Literal["read", "write"]
    removes: bool  # a delete role: the call may remove it
    kind: Kind  # what is there on the host now
    outside: bool = True
    reads: bool = True  # a read role: the call may see what the file holds

    @property
    def changes(self) -> bool:
        """What the call does to it is carried over to the host afterwards."""
        return self.access == "write" or self.removes

    @property
    def staged(self) -> bool:
        """Made in the one-shot instance's own tree: a copy of a file when the call may
        read it, an empty one of the same mode when it may only replace or remove it; a
        directory moved or removed empty; a directory only read as a copy of its
        directories, regular files and symlinks (never a socket, a FIFO or a device, so
        nothing of the host's can be connected to through it). So what the call does to it
        can be carried over and nothing else is, and nothing the host has there is ever
        mounted live into the instance. Only a path absent and merely read is not."""
        return self.changes or self.kind != "absent"

    def record(self) -> dict[str, object]:
        return {"argument": self.argument, "access": self.access, "removes": self.removes}

    def words(self) -> str:
        what = {"file": "file", "directory": "directory", "absent": "new file"}[self.kind]
        if self.removes and self.access == "write":
            return f"write access to (and removal of) the {what} {self.path}"
        if self.removes:
            return f"the removal of the {what} {self.path}"
        return f"{self.access} access to the {what} {self.path}"


def describe(server: str, grants: Sequence[Grant]) -> str:
    """The sentence the approval question carries: what approving gives, and to what (the
    question is asked before the human picks between this call and the session)."""
    granted = [g.words() for g in grants if g.outside]
    warnings = [
        f"; beware: {g.path} is a file host tools load or run ({entry.loaded_by})"
        for g in grants
        if g.outside and g.access == "write"
        if (entry := runs_on_host(g.path, g.kind == "directory")) is not None
    ]
    return visible(
        f"'{server}' cannot reach this from its sandbox; approving gives this one call "
        + "; ".join(granted)
        + " (nothing else; approved for the session, each identical call after it gets the "
        "same, in an instance of its own kept for them)" + "".join(warnings)
    )


def runs_on_host(path: str, is_dir: bool) -> Entry | None:
    """The catalogue entry of files host tools load or run that ``path`` is, if any."""
    parts = [p for p in path.split("/") if p]
    return match(parts, is_dir, path_sibling(os.path.dirname(path)))


def steers_an_agent(path: str) -> bool:
    """Whether ``path`` is an agent instruction file (``CLAUDE.md``, ``AGENTS.md``...): a
    sandbox's own write of one is quarantined, but a call a human approved may write it,
    through a one-shot instance whose change the trusted process carries over."""
    parts = [p for p in path.split("/") if p]
    for n in range(len(parts), 0, -1):  # the file, or an instruction folder holding it
        place = "/" + "/".join(parts[:n])
        is_dir = n < len(parts) or os.path.isdir(place)
        if match(parts[:n], is_dir, path_sibling(os.path.dirname(place))) in INSTRUCTION_ENTRIES:
            return True
    return False


def instruction_paths(grants: Sequence[Grant]) -> list[str]:
    """The agent instruction files an approved call may change: what the trusted process
    writes there is the approved change, not a sandbox's."""
    return [g.path for g in grants if g.changes and g.outside and steers_an_agent(g.path)]


def _kind(path: str, argument: str) -> Kind:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        parent = os.path.dirname(path)
        if not os.path.isdir(parent) or os.path.islink(parent):
            raise CannotWiden(
                f"{argument}: the directory of {path} does not exist on the host"
            ) from None
        return "absent"
    except OSError as exc:
        raise CannotWiden(f"{argument}: {path} cannot be examined: {exc.strerror}") from None
    if stat.S_ISREG(st.st_mode):
        return "file"
    if stat.S_ISDIR(st.st_mode):
        return "directory"
    raise CannotWiden(f"{argument}: {path} is not a regular file or a directory")


def plan_grants(
    profile: SandboxProfile,
    roles_by_arg: Mapping[str, frozenset[str]],
    arguments: Mapping[str, object],
    off_limits: Mapping[str, str],
) -> list[Grant]:
    """The grants a call needs beyond ``profile``: empty when the standing sandbox reaches
    every path it names. ``arguments`` are canonical (absolute, resolved paths);
    ``off_limits`` maps places (canonical) no approval opens, for any access, to what they
    are."""
    writable = profile.writable
    found: list[tuple[str, str, Literal["read", "write"], bool, bool, bool]] = []
    for argument, roles in roles_by_arg.items():
        if argument not in arguments:
            continue
        writes = bool(roles & WRITE_ROLES)
        removes = bool(roles & REMOVE_ROLES)
        reads = bool(roles & READ_ROLES)
        if not (writes or removes or reads):
            continue
        access: Literal["read", "write"] = "write" if writes else "read"
        for path in iter_strings(arguments[argument]):
            if not os.path.isabs(path):
                continue
            if "\0" in path:
                raise CannotWiden(f"{argument}: a path holding a NUL byte names no file")
            mount = deepest_mount(profile, path)
            in_root = any(is_under(path, root) for root in writable)
            reachable = _reachable(path, mount, in_root, writes or removes)
            if reachable and not in_root:
                continue  # seen through a read-only mount the one-shot instance keeps
            found.append((argument, path, access, removes, reads, not reachable))
    if not any(outside for *_, outside in found):
        return []
    found = _merged(found)
    # The one-shot instance has no writable root of its own: every path the call changes
    # is staged, those the standing sandbox could have changed too; those it only reads
    # are shown read-only.
    grants = []
    for argument, path, access, removes, reads, outside in found:
        if outside:
            _check_place(profile, argument, path, access == "write" or removes, off_limits)
        grant = Grant(argument, path, access, removes, _kind(path, argument), outside, reads)
        if not outside and grant.kind == "directory" and not grant.changes:
            raise CannotWiden(
                f"{argument}: {path} is a directory of the workspace to read; a widened call "
                "(one that needs paths beyond the server's sandbox) cannot be shown a "
                "directory its sandbox could change meanwhile"
            )
        if outside and grant.kind == "directory" and access == "write" and not removes:
            raise CannotWiden(
                f"{argument}: {path} is an existing directory; an approval can give write "
                "access to a file, a new directory, or the two ends of a move, not to a whole "
                "directory (give the server that directory with allowWrite instead)"
            )
        grants.append(grant)
    return grants


def _reachable(path: str, mount: Mount | None, in_root: bool, changes: bool) -> bool:
    """Whether the standing sandbox reaches ``path`` for the access. An instruction file
    it writes is quarantined: an approved call writes it through a one-shot instance,
    whose change the trusted process carries over."""
    if not changes:
        return mount is not None and mount.kind in _HOST_VIEWS
    writable = in_root and mount is not None and mount.kind == "bind"
    return writable and not steers_an_agent(path)


def _merged(
    found: list[tuple[str, str, Literal["read", "write"], bool, bool, bool]],
) -> list[tuple[str, str, Literal["read", "write"], bool, bool, bool]]:
    """One entry per path (two arguments may name the same one), with the widest access
    any of them needs."""
    by_path: dict[str, tuple[str, str, Literal["read", "write"], bool, bool, bool]] = {}
    for argument, path, access, removes, reads, outside in found:
        if path in by_path:
            first, _, access0, removes0, reads0, outside0 = by_path[path]
            widest: Literal["read", "write"] = "write" if "write" in (access, access0) else "read"
            entry = (first, path, widest, removes or removes0, reads or reads0, outside or outside0)
            by_path[path] = entry
        else:
            by_path[path] = (argument, path, access, removes, reads, outside)
    return list(by_path.values())


def _check_place(
    profile: SandboxProfile,
    argument: str,
    path: str,
    changes: bool,
    off_limits: Mapping[str, str],
) -> None:
    """Refuse a path no approval can open: hidden by ``denyRead``; inside or holding a
    place off limits (whatever the access: a copy of a directory holding the approvals
    socket's would hold the rest of it, and moving it would move them); to be changed but
    inside a directory the server sees read-only."""
    for mask in profile.mounts:
        if mask.reason.startswith("denyRead") and is_under(path, mask.dest):
            raise CannotWiden(f"{argument}: {path} is hidden from this server (denyRead)")
    for root, what in off_limits.items():
        if is_under(path, root):
            raise CannotWiden(f"{argument}: {path} is inside {what}, which no approval opens")
        if is_under(root, path):
            raise CannotWiden(f"{argument}: {path} holds {what} ({root}), which no approval opens")
    if not changes:
        return
    mount = deepest_mount(profile, path)
    in_root = any(is_under(path, root) for root in profile.writable)
    if in_root and mount is not None:
        # An instruction file (by its name, or imported by one): its own read-only mount,
        # or the root, is no reason to refuse an approved call.
        own = mount.reason.startswith("always protected") and steers_an_agent(mount.dest)
        if mount.dest == path and mount.reason.startswith(INSTRUCTIONS):
            return
        if steers_an_agent(path) and (mount.kind == "bind" or own):
            return
    if mount is not None and mount.kind in _HOST_VIEWS:
        raise CannotWiden(
            f"{argument}: {path} is inside {mount.dest}, which this server sees read-only"
            f"{f' ({mount.reason})' if mount.reason else ''}; an approval cannot make part "
            "of it writable (give the server that directory with allowWrite instead)"
        )
