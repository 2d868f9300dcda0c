"""The raw OS calls: inotify (through libc), POSIX ACLs as extended attributes, memfd,
pidfd, and descriptors opened without following symlinks (``O_PATH``). Linux only; what
uses them says what happens where one is missing."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import functools
import os
import stat
import struct
from collections.abc import Iterator

# -- descriptors ---------------------------------------------------------------------------

# A directory, never through a symlink.
DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# Any file, only to name it (fstat, chmod through /proc), never through a symlink.
PATH = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
# A file to read, never through a symlink, non-blocking (a FIFO in its place cannot hang
# the reader).
READ_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
# A new file, never one already there (nor a symlink's target).
NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def explain(exc: OSError) -> str:
    """An OSError in words, without its errno number."""
    return exc.strerror or str(exc)


def open_dir(path: str) -> int:
    """A descriptor of the directory ``path`` (a root the caller trusts: followed)."""
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def fd_path(fd: int) -> str:
    """A path naming what ``fd`` is open on, for calls that take only a path."""
    return f"/proc/self/fd/{fd}"


def open_up(fd: int) -> None:
    """Give a directory's owner full access to it again (the launcher is its owner)."""
    mode = os.stat(fd).st_mode
    os.chmod(fd_path(fd), stat.S_IMODE(mode) | stat.S_IRWXU)


def open_up_child(dir_fd: int, name: str) -> None:
    with contextlib.suppress(OSError):
        child = os.open(name, PATH, dir_fd=dir_fd)
        try:
            if stat.S_ISDIR(os.stat(child).st_mode):
                open_up(child)
        finally:
            os.close(child)


def open_up_path(path: str) -> bool:
    """Give a directory found unreadable its owner's access back (for the sweep)."""
    try:
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode):
            return False
        os.chmod(path, stat.S_IMODE(st.st_mode) | stat.S_IRWXU)
    except OSError:
        return False
    return True


# -- memfd and pidfd -----------------------------------------------------------------------


def memfd(name: str, data: bytes) -> int:
    """An anonymous file holding ``data``, readable from its start, inheritable."""
    fd = os.memfd_create(name, 0)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


# Slots a server's descriptor table starts with: see wide_table_fd.
WIDE_TABLE = 1024


@functools.cache
def wide_table_fd() -> int | None:
    """This process's one descriptor numbered ``WIDE_TABLE - 1`` or more (``/dev/null``,
    close-on-exec), opened on the first call; None where no such number can be had.

    Linux grows a process's descriptor table (64 slots, then doubling) when a descriptor
    beyond it is needed, and in a process whose threads share the table each growth waits
    for an RCU grace period (10-20 ms here). A threaded server that opens its files after
    its threads start (Node: the module loader, with V8's and libuv's threads running)
    stalls there. A forked child's table is sized to its parent's highest open descriptor
    and keeps its size through ``exec``, so while this descriptor is open every server
    starts with ``WIDE_TABLE`` slots: one started directly through this process's own
    table, a sandboxed one through ``bwrap --sync-fd`` (bwrap forks the server's process
    with it open, closes it there before the ``exec``, and only the sandbox's pid 1 holds
    it). Call it first while this process has one thread, or its own table's growth
    stalls it in the same way."""
    try:
        null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return fcntl.fcntl(null, fcntl.F_DUPFD_CLOEXEC, WIDE_TABLE - 1)
    except OSError:  # the descriptor limit is lower than that
        return None
    finally:
        os.close(null)


def pidfd_open(pid: int) -> int | None:
    """A descriptor that becomes readable when ``pid`` exits; None before Linux 5.3 (or
    off Linux), where the caller waits some other way."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


# -- extended attributes -------------------------------------------------------------------


def read_xattr(path: str, name: str) -> bytes | None:
    """The attribute ``name`` of what ``path`` names; None when unset. ``path`` is followed:
    give a descriptor's :func:`fd_path`, whose file is the one meant whatever its name is."""
    try:
        return os.getxattr(path, name)
    except OSError as exc:
        if exc.errno == errno.ENODATA:
            return None
        raise


def write_xattr(path: str, name: str, value: bytes) -> None:
    """Set the attribute ``name`` of what ``path`` names (followed, as :func:`read_xattr`)."""
    os.setxattr(path, name, value)


def remove_xattr(path: str, name: str) -> None:
    """Remove the attribute ``name`` of what ``path`` names (followed, as
    :func:`read_xattr`), if it has one."""
    try:
        os.removexattr(path, name)
    except OSError as exc:
        if exc.errno != errno.ENODATA:
            raise


# -- inotify -------------------------------------------------------------------------------

IN_MODIFY = 0x002
IN_ATTRIB = 0x004
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_MOVED_TO = 0x080
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ISDIR = 0x40000000
IN_DONT_FOLLOW = 0x02000000
IN_ONLYDIR = 0x01000000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
_EVENT = struct.Struct("iIII")


@functools.cache
def _libc() -> ctypes.CDLL:
    # The C library this process already runs on: no ``ldconfig`` run to look for it.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.inotify_init1.argtypes = [ctypes.c_int]
    libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    return libc


RENAME_NOREPLACE = 1


def rename_noreplace(src_dir_fd: int, src: str, dst_dir_fd: int, dst: str) -> None:
    """``renameat2(..., RENAME_NOREPLACE)``: a rename that fails (EEXIST) rather than
    replace what is at ``dst``."""
    libc = _libc()
    done = libc.renameat2(
        ctypes.c_int(src_dir_fd),
        os.fsencode(src),
        ctypes.c_int(dst_dir_fd),
        os.fsencode(dst),
        ctypes.c_uint(RENAME_NOREPLACE),
    )
    if done != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), dst)


_STATX_BTIME = 0x800
_AT_FDCWD = -100


def birth_time(path: str) -> int | None:
    """When the file ``path`` names (followed) was made, in nanoseconds (``statx``); None
    where the filesystem or the C library does not say. An inode number freed and given to
    a new file gets a new birth time."""
    libc = _libc()
    buf = ctypes.create_string_buffer(256)  # struct statx
    if not hasattr(libc, "statx"):
        return None
    done = libc.statx(
        ctypes.c_int(_AT_FDCWD), os.fsencode(path), ctypes.c_int(0),
        ctypes.c_uint(_STATX_BTIME), buf,
    )  # fmt: skip
    if done != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    (mask,) = struct.unpack_from("<I", buf.raw, 0)
    if not mask & _STATX_BTIME:
        return None
    sec, nsec = struct.unpack_from("<qI", buf.raw, 80)
    return int(sec * 1_000_000_000 + nsec)


def inotify_init() -> int:
    """A non-blocking inotify descriptor; OSError when inotify is not available."""
    fd: int = _libc().inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return fd


def inotify_add_watch(fd: int, path: str, mask: int) -> tuple[int, int]:
    """(watch descriptor, 0), or (-1, errno) when ``path`` cannot be watched."""
    wd: int = _libc().inotify_add_watch(fd, os.fsencode(path), mask)
    return wd, (ctypes.get_errno() if wd < 0 else 0)


def inotify_events(data: bytes) -> Iterator[tuple[int, int, str]]:
    """(watch descriptor, mask, name) of each event in what one read returned."""
    offset = 0
    while offset + _EVENT.size <= len(data):
        wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
        raw = data[offset + _EVENT.size : offset + _EVENT.size + length]
        offset += _EVENT.size + length
        yield wd, mask, os.fsdecode(raw.rstrip(b"\0"))
