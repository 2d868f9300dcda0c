"""The quarantine: where what must not stay in a writable root is moved, and how.

Moves go through directory descriptors (a rename, or where the quarantine is on another
filesystem a bounded copy), never following a symlink; each item gets a short name of its
own, with a ``manifest.jsonl`` beside it saying where it came from and why. A directory its
owner made read-only or unreadable is given its owner's access back first (the launcher is
its owner, or root).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import time

from launcher.host.nofollow import Parts, gone, open_chain
from launcher.host.oscalls import DIR, explain, open_dir, open_up, open_up_child

# What may be copied out when the quarantine is on another filesystem (a rename is free).
COPY_LIMIT = 256 * 1024 * 1024


class QuarantineError(Exception):
    """Something could not be moved into the quarantine."""


class QuarantineDir:
    """One session's (or one scan's) quarantine directory."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._counter = 0

    def move_from(self, root: str, parts: Parts, why: str) -> str | None:
        """Move ``root/parts`` here without following symlinks on the way; where it is now.
        None when it is not there (any more) as a real path inside ``root``;
        ``QuarantineError`` when it is there and cannot be moved."""
        path = os.path.join(root, *parts)
        try:
            parent = open_chain(root, parts[:-1]) if parts[:-1] else None
        except OSError as exc:
            if gone(exc):
                return None  # not there, or a symlink on the way (what it leads to is not in it)
            raise QuarantineError(f"cannot reach it to quarantine it: {explain(exc)}") from None
        if parent is None:
            parent = open_dir(root)
        try:
            try:
                os.lstat(parts[-1], dir_fd=parent)
            except FileNotFoundError:
                return None
            return self.move_out(parent, parts[-1], path, why)
        finally:
            os.close(parent)

    def move_out(self, parent: int, name: str, path: str, why: str) -> str:
        """Move ``name`` (in the directory ``parent``) here; where it is now."""
        try:
            os.makedirs(self.path, mode=0o700, exist_ok=True)
            target = open_dir(self.path)
        except OSError as exc:
            raise QuarantineError(f"cannot open the quarantine directory: {explain(exc)}") from None
        try:
            self._counter += 1
            # A short name of its own: the quarantine never depends on the path's length.
            label = f"{time.strftime('%H%M%S')}-{self._counter}"
            try:
                _rename(parent, name, target, label)
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise QuarantineError(f"cannot quarantine it: {explain(exc)}") from None
                try:
                    _copy_out(parent, name, target, label, [COPY_LIMIT])
                    _remove(parent, name)
                except OSError as exc2:
                    raise QuarantineError(f"cannot quarantine it: {explain(exc2)}") from None
            with open(os.path.join(self.path, "manifest.jsonl"), "a", encoding="utf-8") as log:
                log.write(json.dumps({"name": label, "path": path, "reason": why}) + "\n")
        finally:
            os.close(target)
        return os.path.join(self.path, label)


def _rename(parent: int, name: str, target: int, label: str) -> None:
    """Rename ``name`` out of ``parent``; a directory its owner made read-only (itself, or
    the one it is in) is given write access first, as ``rename`` needs."""
    try:
        os.rename(name, label, src_dir_fd=parent, dst_dir_fd=target)
    except PermissionError:
        open_up(parent)
        open_up_child(parent, name)
        os.rename(name, label, src_dir_fd=parent, dst_dir_fd=target)


def _copy_out(dir_fd: int, name: str, dest_fd: int, dest: str, left: list[int]) -> None:
    """Copy ``name`` (relative to ``dir_fd``) to ``dest`` (relative to ``dest_fd``) without
    following any symlink, at most ``left[0]`` bytes in all (hard links and sparse files
    cannot make a small tree fill the disk)."""
    st = os.lstat(name, dir_fd=dir_fd)
    left[0] -= st.st_size
    if left[0] < 0:
        raise OSError(errno.EFBIG, "too large to copy out of the workspace's filesystem")
    if stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(name, dir_fd=dir_fd), dest, dir_fd=dest_fd)
    elif stat.S_ISDIR(st.st_mode):
        os.mkdir(dest, 0o700, dir_fd=dest_fd)
        src = os.open(name, DIR, dir_fd=dir_fd)
        out = os.open(dest, DIR, dir_fd=dest_fd)
        try:
            for child in os.listdir(src):
                _copy_out(src, child, out, child, left)
        finally:
            os.close(src)
            os.close(out)
    elif stat.S_ISREG(st.st_mode):
        src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        out = os.open(
            dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600, dir_fd=dest_fd
        )
        try:
            with (
                os.fdopen(src, "rb", closefd=False) as inp,
                os.fdopen(out, "wb", closefd=False) as o,
            ):
                shutil.copyfileobj(inp, o)
        finally:
            os.close(src)
            os.close(out)


def _remove(dir_fd: int, name: str) -> None:
    st = os.lstat(name, dir_fd=dir_fd)
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=dir_fd)
    else:
        os.unlink(name, dir_fd=dir_fd)
