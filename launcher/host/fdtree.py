"""Files and directories below a root, reached one component at a time without following a
symlink: a directory's descriptor (``walk``), ``lstat``, a snapshot to compare later, a
regular file opened non-blocking, bounded copies of a file and of a tree, a comparison of
two files' bytes, a file replaced atomically. :mod:`launcher.servers.staging` stages a
widened call's paths with them and carries its changes back, where nothing a server plants
(links, FIFOs, swapped directories) may redirect or hold the trusted process; ``wrap``
writes a client's files with them.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from launcher.host.nofollow import descend, gone
from launcher.host.oscalls import DIR, NEW_FILE, READ_FILE
from sandbox_profiles.ways import is_under

_COPY_CHUNK = 1 << 20


class TooLarge(OSError):
    """A copy went past its bound (a file grew while it was copied)."""


Snapshot = tuple[int, int, int, int] | None  # (mode, inode, size, mtime_ns) or absent


def parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p]


@contextlib.contextmanager
def walk(root: str, parts: Sequence[str]) -> Iterator[int]:
    """A descriptor of the directory ``root/parts``, reached without following a symlink
    (``root`` itself included)."""
    fd = descend(os.open(root, DIR), parts)
    try:
        yield fd
    finally:
        os.close(fd)


def lstat_at(root: str, path: str) -> os.stat_result | None:
    """``lstat`` of ``root + path`` without following a symlink on the way (None: absent,
    or a component on the way is not a directory)."""
    *parents, name = parts(path)
    try:
        with walk(root, parents) as fd:
            return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError as exc:
        if gone(exc):
            return None
        raise


def snapshot(path: str) -> Snapshot:
    return snapshot_at("/", path)


def snapshot_at(root: str, path: str) -> Snapshot:
    st = lstat_at(root, path)
    if st is None:
        return None
    return (st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns)


def kind_now(path: str) -> str:
    st = lstat_at("/", path)
    if st is None:
        return "absent"
    return "directory" if stat.S_ISDIR(st.st_mode) else "file"


def copy_fd(src: int, dst: int, limit: int) -> int:
    """Copy ``src`` to ``dst`` from where each stands; :class:`TooLarge` past ``limit``
    bytes (a file that keeps growing cannot hold the trusted process). The bytes copied."""
    copied = 0
    while chunk := os.read(src, min(_COPY_CHUNK, limit - copied + 1)):
        copied += len(chunk)
        if copied > limit:
            raise TooLarge(f"more than {limit >> 20} MiB")
        write_all(dst, chunk)
    return copied


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def replace_at(
    dir_fd: int,
    name: str,
    fill: Callable[[int], object],
    mode: int | None = None,
    owner: tuple[int, int] | None = None,
) -> os.stat_result:
    """Put a new file in the place of ``name`` in the directory ``dir_fd``, atomically: a
    temporary file beside it, filled by ``fill`` (given its descriptor), given ``owner``
    and then ``mode``, synced, and renamed over ``name``; removed again when any step
    fails. Without ``mode`` the file has what the user's umask makes of 0666, as a file
    the user's own tools create. The new file's status."""
    temp = f".{name[:64]}.ironcurtain-{secrets.token_hex(6)}"  # within a name's length
    out = os.open(temp, NEW_FILE, 0o666 if mode is None else 0o600, dir_fd=dir_fd)
    try:
        try:
            fill(out)
            if owner is not None:
                os.fchown(out, *owner)
            if mode is not None:
                os.fchmod(out, mode)
            os.fsync(out)
            st = os.fstat(out)
        finally:
            os.close(out)
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        raise
    return st


def open_file_at(root: str, path: str) -> int:
    """A read descriptor of the regular file ``root + path`` (no symlink anywhere)."""
    *parents, name = parts(path)
    with walk(root, parents) as fd:
        # Non-blocking: a FIFO put in a file's place cannot hang the trusted process.
        file_fd = os.open(name, READ_FILE, dir_fd=fd)
    if not stat.S_ISREG(os.fstat(file_fd).st_mode):
        os.close(file_fd)
        raise OSError(f"{path} is not a regular file")
    return file_fd


def same_content(a: int, b: int) -> bool:
    size = os.fstat(a).st_size
    if size != os.fstat(b).st_size:
        return False
    os.lseek(a, 0, os.SEEK_SET)
    os.lseek(b, 0, os.SEEK_SET)
    left = size + 1  # a file growing meanwhile is read no further than this
    while left > 0:
        x, y = os.read(a, min(_COPY_CHUNK, left)), os.read(b, min(_COPY_CHUNK, left))
        if x != y:
            return False
        if not x:
            return True
        left -= len(x)
    return False


def copy_tree(
    src_fd: int,
    dst_fd: int,
    host_path: str,
    hidden: Sequence[str],
    budget: list[int],
    max_entries: int,
) -> None:
    """Copy the directory ``src_fd`` (the host's ``host_path``) into ``dst_fd``: its
    directories, regular files (mode and times kept, set-id bits not) and symlinks (as
    symlinks: they resolve inside the sandbox, to what it sees anyway). Sockets, FIFOs and
    devices are left out, and whatever ``hidden`` holds. ``budget``: [entries, bytes]
    left, of ``max_entries`` and some bytes; :class:`TooLarge` when either runs out."""
    with os.scandir(src_fd) as entries:
        listed = list(entries)
    for entry in listed:
        path = f"{host_path.rstrip('/')}/{entry.name}"
        if any(is_under(path, h) for h in hidden):
            continue
        budget[0] -= 1
        if budget[0] < 0:
            raise TooLarge(f"more than {max_entries} entries")
        st = entry.stat(follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            child = os.open(entry.name, DIR, dir_fd=src_fd)
            try:
                os.mkdir(entry.name, 0o700, dir_fd=dst_fd)
                copy = os.open(entry.name, DIR, dir_fd=dst_fd)
                try:
                    copy_tree(child, copy, path, hidden, budget, max_entries)
                    os.fchmod(copy, stat.S_IMODE(os.fstat(child).st_mode) & 0o777)
                finally:
                    os.close(copy)
            finally:
                os.close(child)
        elif stat.S_ISREG(st.st_mode):
            src = os.open(entry.name, READ_FILE, dir_fd=src_fd)
            try:
                st = os.fstat(src)
                if not stat.S_ISREG(st.st_mode):
                    continue  # swapped for something else meanwhile
                out = os.open(entry.name, NEW_FILE, 0o600, dir_fd=dst_fd)
                try:
                    budget[1] -= copy_fd(src, out, max(budget[1], 0))
                    os.fchmod(out, stat.S_IMODE(st.st_mode) & 0o777)
                    os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
                finally:
                    os.close(out)
            finally:
                os.close(src)
        elif stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(entry.name, dir_fd=src_fd), entry.name, dir_fd=dst_fd)


def remove_tree(path: str) -> None:
    """Remove a staging directory, whatever modes the instance left in it."""

    def fix(func: Callable[..., Any], target: str, _info: object) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(target), 0o700)
        with contextlib.suppress(OSError):
            func(target)

    shutil.rmtree(path, onerror=fix)
