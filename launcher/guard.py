"""Watching writable roots for protected names that appear during a session.

Existing protected names (``.git/hooks``, ``.bashrc``, ``.mcp.json``...) are mounted
read-only when a server starts. A sandboxed server can still *create* one, at any depth,
where none existed. The guard watches every directory of every writable root with inotify
and moves such a path out of the workspace into the session's quarantine directory, and the
session settles the guard before it returns each call's result, so the call that made a
protected path returns only after it is gone.

Moving is done through directory descriptors opened without following symlinks, so a server
that swaps a directory for a symlink cannot make the trusted process move a file outside
the root.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import shutil
import stat
import struct
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from sandbox_profiles.profile import protected_name_match

IN_MODIFY = 0x002
IN_ATTRIB = 0x004
IN_CLOSE_WRITE = 0x008
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ISDIR = 0x40000000
IN_DONT_FOLLOW = 0x02000000
IN_ONLYDIR = 0x01000000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
_MASK = IN_CREATE | IN_MOVED_TO | IN_MOVE_SELF | IN_DELETE_SELF
_EVENT = struct.Struct("iIII")


class GuardError(Exception):
    """The guard cannot watch a writable root (inotify missing or out of watches)."""


@dataclass(frozen=True)
class Quarantined:
    path: str  # where it appeared
    moved_to: str  # where it is now
    why: str


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.inotify_init1.argtypes = [ctypes.c_int]
    libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    return libc


class Guard:
    """One inotify instance over all writable roots of a session."""

    def __init__(
        self,
        roots: Sequence[str],
        guarded: Iterable[str],
        quarantine_dir: str,
        on_quarantine: Callable[[Quarantined], None],
    ) -> None:
        self.roots = [r.rstrip("/") or "/" for r in roots]
        self.guarded = {os.path.normpath(p) for p in guarded}
        self.quarantine_dir = quarantine_dir
        self.on_quarantine = on_quarantine
        self.quarantined: list[Quarantined] = []
        self._libc = _libc()
        self.fd = self._libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if self.fd < 0:
            raise GuardError(f"inotify is not available: {os.strerror(ctypes.get_errno())}")
        self._paths: dict[int, str] = {}
        self._counter = 0

    # -- watching --------------------------------------------------------------------------

    def start(self) -> None:
        """Watch every directory below every root. What is there already is the user's:
        existing protected names are mounted read-only instead, and left alone here."""
        for root in self.roots:
            self._scan(root, quarantine=False)

    def _root_of(self, path: str) -> str | None:
        for root in self.roots:
            if path == root or path.startswith(root + "/"):
                return root
        return None

    def _add_watch(self, path: str) -> None:
        wd = self._libc.inotify_add_watch(
            self.fd, os.fsencode(path), _MASK | IN_DONT_FOLLOW | IN_ONLYDIR
        )
        if wd < 0:
            err = ctypes.get_errno()
            if err in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                return  # gone again, or replaced by a symlink (IN_DONT_FOLLOW refused it)
            if err == errno.ENOSPC:
                raise GuardError(
                    f"out of inotify watches while watching {path}; raise the limit with "
                    "sudo sysctl -w fs.inotify.max_user_watches=1048576"
                )
            raise GuardError(f"cannot watch {path}: {os.strerror(err)}")
        self._paths[wd] = path

    def _scan(self, top: str, quarantine: bool = True) -> None:
        """Check ``top`` and everything below it; watch each directory first, then list
        it, so nothing created in between is missed."""
        if self._check(top, quarantine):
            return
        stack = [top]
        while stack:
            directory = stack.pop()
            self._add_watch(directory)
            try:
                entries = list(os.scandir(directory))
            except OSError:
                continue
            for entry in entries:
                if self._check(entry.path, quarantine):
                    continue
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                except OSError:
                    continue

    def _check(self, path: str, quarantine: bool = True) -> bool:
        """Quarantine ``path`` (or the protected name it lies in) if it must not exist.
        True when ``path`` is protected: moved away, or (``quarantine`` off) left alone and
        not to be descended into."""
        root = self._root_of(path)
        if root is None:
            return False
        rel = os.path.relpath(path, root)
        parts = [] if rel == "." else rel.split("/")
        end = protected_name_match(parts)
        if end is not None:
            if quarantine:
                name = "/".join(parts[:end])
                self._quarantine(root, parts[:end], f"always-protected name {name}")
            return True
        if path in self.guarded:
            if quarantine:
                self._quarantine(root, parts, "protected path (denyWrite or ironcurtain's)")
            return True
        return False

    # -- events ----------------------------------------------------------------------------

    def settle(self) -> None:
        """Handle every event queued so far. Events are queued by the system call that
        caused them, so after a server has answered a call, all it did is here."""
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return
            except OSError:
                return
            self._handle(data)

    def _handle(self, data: bytes) -> None:
        offset = 0
        rescan: list[str] = []
        while offset + _EVENT.size <= len(data):
            wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
            raw = data[offset + _EVENT.size : offset + _EVENT.size + length]
            offset += _EVENT.size + length
            name = os.fsdecode(raw.rstrip(b"\0"))
            if mask & IN_Q_OVERFLOW:
                rescan = list(self.roots)
                continue
            if mask & IN_IGNORED:
                self._paths.pop(wd, None)
                continue
            parent = self._paths.get(wd)
            if parent is None or not name:
                continue
            path = f"{parent}/{name}"
            if mask & (IN_CREATE | IN_MOVED_TO):
                if mask & IN_ISDIR:
                    rescan.append(path)
                else:
                    self._check(path)
        for path in rescan:
            self._scan(path)

    # -- quarantine ------------------------------------------------------------------------

    def _quarantine(self, root: str, parts: Sequence[str], why: str) -> bool:
        """Move ``root/parts`` into the quarantine directory without following symlinks on
        the way. False when it is not there (any more) as a real path inside ``root``."""
        if not parts:
            return False
        fds: list[int] = []
        try:
            try:
                fds.append(os.open(root, os.O_RDONLY | os.O_DIRECTORY))
                for part in parts[:-1]:
                    fds.append(
                        os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fds[-1])
                    )
                os.lstat(parts[-1], dir_fd=fds[-1])
            except OSError:
                return False
            self._counter += 1
            os.makedirs(self.quarantine_dir, mode=0o700, exist_ok=True)
            label = "__".join(parts).replace("/", "_")
            target = f"{time.strftime('%H%M%S')}-{self._counter}-{label}"
            moved_to = os.path.join(self.quarantine_dir, target)
            try:
                os.rename(parts[-1], moved_to, src_dir_fd=fds[-1])
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    return False
                _copy_out(fds[-1], parts[-1], moved_to)
                _remove(fds[-1], parts[-1])
        finally:
            for fd in fds:
                os.close(fd)
        record = Quarantined(os.path.join(root, *parts), moved_to, why)
        self.quarantined.append(record)
        self.on_quarantine(record)
        return True

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _copy_out(dir_fd: int, name: str, dest: str) -> None:
    """Copy ``name`` (relative to ``dir_fd``) to ``dest`` without following any symlink."""
    st = os.lstat(name, dir_fd=dir_fd)
    if stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(name, dir_fd=dir_fd), dest)
    elif stat.S_ISDIR(st.st_mode):
        os.mkdir(dest, 0o700)
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
        try:
            for child in os.listdir(fd):
                _copy_out(fd, child, os.path.join(dest, child))
        finally:
            os.close(fd)
    elif stat.S_ISREG(st.st_mode):
        src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
        try:
            with open(dest, "wb") as out, os.fdopen(src, "rb", closefd=False) as inp:
                shutil.copyfileobj(inp, out)
        finally:
            os.close(src)


def _remove(dir_fd: int, name: str) -> None:
    st = os.lstat(name, dir_fd=dir_fd)
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=dir_fd)
    else:
        os.unlink(name, dir_fd=dir_fd)
