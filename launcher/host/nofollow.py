"""Reaching ``root/parts`` without following a symlink on the way: one component at a time,
each through the descriptor of the directory before it. A sandboxed server that swaps a
directory for a symlink cannot make the trusted process act outside the root, and no path
is ever too long to handle (the kernel refuses paths over 4096 bytes)."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator, Sequence

from launcher.host.oscalls import DIR, explain, fd_path, open_dir, open_up, open_up_child

Parts = tuple[str, ...]
# A path this long is handled through descriptors.
LONG_PATH = 3500


class Unreadable(Exception):
    """A directory that is there cannot be opened or listed (``cannot list it: ...``)."""


class SymlinkOnTheWay(NotADirectoryError):
    """A component on the way down is a symlink, not followed: ``filename`` is that
    component, ``target`` where the link points (read, never followed)."""

    def __init__(self, part: str, target: str) -> None:
        super().__init__(errno.ENOTDIR, "a symbolic link (not followed)", part)
        self.target = target


def gone(exc: OSError) -> bool:
    """Whether ``exc``, met on the way down, says the path is not there as a real path: a
    component is missing, is not a directory, or is a symlink (not followed)."""
    return isinstance(exc, (FileNotFoundError, NotADirectoryError)) or exc.errno == errno.ELOOP


def descend(fd: int, parts: Sequence[str], flags: int = DIR, opening_up: bool = False) -> int:
    """A descriptor of ``parts`` below the directory ``fd``, opened one component at a time
    without following a symlink (the last with ``flags``). ``fd`` is the walk's: closed on
    the way, and when anything fails. ``opening_up``: a directory in the way that its owner
    made untraversable is given its owner's access back. A symlink where a directory is
    expected is a :class:`SymlinkOnTheWay` naming it; a part that is not one name (``..``,
    ``a/b``, whose links would be followed) a ValueError."""
    try:
        for i, part in enumerate(parts):
            if not part or part in (".", "..") or "/" in part:  # one name, or links are followed
                raise ValueError(f"not one name of a directory entry: {part!r}")
            want = flags if i == len(parts) - 1 else DIR
            try:
                child = os.open(part, want, dir_fd=fd)
            except PermissionError:
                if not opening_up:
                    raise
                open_up(fd)
                open_up_child(fd, part)
                child = os.open(part, want, dir_fd=fd)
            except NotADirectoryError:
                _name_link(fd, part)
                raise
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _name_link(fd: int, part: str) -> None:
    """Raise :class:`SymlinkOnTheWay` when ``part`` of the directory ``fd`` is a symlink."""
    try:
        st = os.stat(part, dir_fd=fd, follow_symlinks=False)
        target = os.readlink(part, dir_fd=fd) if stat.S_ISLNK(st.st_mode) else None
    except OSError:
        return  # changed again: the open's own error says what it found
    if target is not None:
        raise SymlinkOnTheWay(part, target) from None


def open_chain(root: str, parts: Parts, flags: int = DIR) -> int:
    """A descriptor of ``root/parts``, opened one component at a time without following
    symlinks; a directory in the way that its owner made untraversable is opened up."""
    return descend(open_dir(root), parts, flags, opening_up=True)


@contextlib.contextmanager
def dir_path(root: str, parts: Parts) -> Iterator[str]:
    """A path naming ``root/parts`` for a call that takes one: the path itself, or
    through a descriptor when it is too long for the kernel."""
    path = os.path.join(root, *parts)
    if len(path) < LONG_PATH:
        yield path
        return
    fd = open_chain(root, parts, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        yield fd_path(fd)
    finally:
        os.close(fd)


def open_up_at(root: str, parts: Parts) -> None:
    """Give ``root/parts`` (a directory) its owner's access back, if it can be reached."""
    with contextlib.suppress(OSError):
        if not parts:
            fd = open_dir(root)
            try:
                open_up(fd)
            finally:
                os.close(fd)
            return
        parent = open_chain(root, parts[:-1])
        try:
            open_up_child(parent, parts[-1])
        finally:
            os.close(parent)


def lexists(root: str, parts: Parts, name: str) -> bool:
    """Whether ``root/parts/name`` exists (a dangling symlink counts)."""
    with dir_path(root, parts) as directory:
        return os.path.lexists(os.path.join(directory, name))


def identity(root: str, parts: Parts) -> tuple[int, int, int] | None:
    """What tells the user's file from a replacement: an inode number is reused at
    once, so its change time too (which no sandbox can set on a read-only mount)."""
    try:
        with dir_path(root, parts[:-1]) as directory:
            st = os.lstat(os.path.join(directory, parts[-1]))
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino, st.st_ctime_ns


def is_regular(root: str, parts: Parts) -> bool:
    """Whether ``root/parts`` is a regular file (a symlink is not followed)."""
    try:
        with dir_path(root, parts[:-1]) as directory:
            return stat.S_ISREG(os.lstat(os.path.join(directory, parts[-1])).st_mode)
    except OSError:
        return False


def entries(root: str, parts: Parts) -> list[tuple[str, bool]] | None:
    """(name, is a directory) of each entry of ``root/parts``; None when it is gone (or a
    symlink now: not followed). A directory its owner made unreadable is opened up."""
    try:
        fd = open_chain(root, parts)
    except OSError as exc:
        if gone(exc):
            return None
        raise Unreadable(f"cannot open it: {explain(exc)}") from None
    try:
        try:
            found = list(os.scandir(fd))
        except PermissionError:
            open_up(fd)
            found = list(os.scandir(fd))
        return [(e.name, e.is_dir(follow_symlinks=False)) for e in found]
    except OSError as exc:
        raise Unreadable(f"cannot list it: {explain(exc)}") from None
    finally:
        os.close(fd)
