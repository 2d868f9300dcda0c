"""A walk of a directory tree that reaches every entry whatever its depth or the length of
its path: directory by directory, relative to one open descriptor, never through a symlink.

A tree a sandbox built can be deeper than ``PATH_MAX`` (a path of any length is made one
component at a time) or than the recursion limit; a walk by whole paths stops there, and
whatever was moved below that point would be out of its reach.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Sequence

from sandbox_profiles.records import frozen

# Beyond this many bytes a path is reached through the descriptor of its directory.
_LONG = 2048
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@frozen
class Found:
    """One entry: ``path`` as named from the root (to show), ``reach`` and ``parent`` to act on
    it and on its directory (valid until the walk moves on), and its ``lstat``."""

    path: str
    reach: str
    parent: str
    st: os.stat_result


def walk(root: str, skip: Sequence[str] = ()) -> Iterator[Found]:
    """``root`` and everything below it but the paths in ``skip``, parents before children,
    symlinks yielded but never followed. One descriptor is open at a time."""
    st = os.lstat(root)
    yield Found(root, root, os.path.dirname(root), st)
    if not stat.S_ISDIR(st.st_mode):
        return
    fd = os.open(root, _DIR_FLAGS)
    stack: list[tuple[str, list[str]]] = [(root.rstrip("/") or "/", _names(fd))]
    try:
        while stack:
            here, names = stack[-1]
            if not names:
                stack.pop()
                if stack:
                    fd = _move(fd, "..")
                continue
            name = names.pop()
            path = os.path.join(here, name)
            if path in skip:
                continue
            st = os.lstat(name, dir_fd=fd)
            long = len(path) > _LONG
            reach = f"/proc/self/fd/{fd}/{name}" if long else path
            yield Found(path, reach, f"/proc/self/fd/{fd}/." if long else here, st)
            if stat.S_ISDIR(st.st_mode):
                fd = _move(fd, name)
                stack.append((path, _names(fd)))
    finally:
        os.close(fd)


def _names(fd: int) -> list[str]:
    return sorted(os.listdir(fd), reverse=True)


def _move(fd: int, name: str) -> int:
    """The descriptor of directory ``name`` of ``fd``'s (``..``: its parent), ``fd`` closed
    (left open when that fails: the walk closes it)."""
    moved = os.open(name, _DIR_FLAGS, dir_fd=fd)
    os.close(fd)
    return moved
