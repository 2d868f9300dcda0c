"""A walk of a directory tree that reaches every entry whatever its depth or the length of
its path, and names each by a descriptor: directory by directory, relative to one open
descriptor, never through a symlink.

A tree a sandbox built can be deeper than ``PATH_MAX`` (a path of any length is made one
component at a time) or than the recursion limit; a walk by whole paths stops there, and
whatever was moved below that point would be out of its reach. And what is done to an entry
is done to the file its descriptor holds, the one it was judged by: a name swapped for a
symlink (to ``/etc``) after it was looked at, by anyone who may write the tree meanwhile,
leads nowhere else.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator, Sequence

from launcher.host.oscalls import PATH, fd_path
from sandbox_profiles.records import frozen

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_Key = tuple[int, int]


class TreeChanged(OSError):
    """A directory of the walk was moved while it was walked."""


@frozen
class Found:
    """One entry: ``path`` as named from the root (to show), ``reach`` and ``parent`` to act on
    it and on its directory (``/proc/self/fd`` names of the very files the walk looked at:
    calls that follow them reach those files, whatever is at their names now; valid until
    the walk moves on), and its ``stat``."""

    path: str
    reach: str
    parent: str
    st: os.stat_result


def walk(root: str, skip: Sequence[str] = ()) -> Iterator[Found]:
    """``root`` and everything below it but the paths in ``skip``, parents before children,
    symlinks yielded but never followed. Two descriptors are open at a time (the directory
    and the entry). Raises :class:`TreeChanged` when a directory was moved out from under
    the walk."""
    entry = os.open(root, PATH)
    try:
        st = os.fstat(entry)
        parent = os.open(os.path.dirname(root) or "/", os.O_PATH | os.O_CLOEXEC)
        try:
            yield Found(root, fd_path(entry), fd_path(parent), st)
        finally:
            os.close(parent)
        if not stat.S_ISDIR(st.st_mode):
            return
        fd = os.open(".", _DIR_FLAGS, dir_fd=entry)
    finally:
        os.close(entry)
    yield from _below(root.rstrip("/") or "/", fd, _key(st), skip)


def _below(top: str, fd: int, key: _Key, skip: Sequence[str]) -> Iterator[Found]:
    stack: list[tuple[str, _Key, list[str]]] = [(top, key, _names(fd))]
    try:
        while stack:
            here, _, names = stack[-1]
            if not names:
                stack.pop()
                if stack:
                    fd = _move(fd, "..", stack[-1][1])
                continue
            name = names.pop()
            path = os.path.join(here, name)
            if path in skip:
                continue
            try:
                entry = os.open(name, PATH, dir_fd=fd)
            except FileNotFoundError:
                continue  # gone since it was listed
            try:
                st = os.fstat(entry)
                yield Found(path, fd_path(entry), fd_path(fd), st)
                if stat.S_ISDIR(st.st_mode):
                    fd = _move(fd, ".", _key(st), entry)
                    stack.append((path, _key(st), _names(fd)))
            finally:
                os.close(entry)
    finally:
        os.close(fd)


def _key(st: os.stat_result) -> _Key:
    return st.st_dev, st.st_ino


def _names(fd: int) -> list[str]:
    return sorted(os.listdir(fd), reverse=True)


def _move(fd: int, name: str, want: _Key, at: int | None = None) -> int:
    """The descriptor of directory ``name`` of ``fd``'s (``..``: its parent; with ``at``,
    ``name`` of that one's instead), which must be ``want``; ``fd`` closed (left open when
    that fails: the walk closes it)."""
    moved = os.open(name, _DIR_FLAGS, dir_fd=fd if at is None else at)
    if _key(os.fstat(moved)) != want:
        os.close(moved)
        raise TreeChanged(errno.ESTALE, "a directory was moved while it was walked")
    os.close(fd)
    return moved
