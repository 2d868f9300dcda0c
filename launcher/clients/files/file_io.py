"""Reading and writing the MCP clients' files without being led elsewhere.

A project's files are the project's to shape, and a project may be hostile: each is reached
one component at a time from the project root without following a link (a ``.mcp.json``
linked to ``~/.claude.json``, or ``.vscode`` linked to the user's own settings, is
refused), must be a regular file with no other hard link (a FIFO would hang the reading, a
device would never end it), and is read whole only when it is at most 1 MiB.

A user's own files may be links (dotfiles): they are followed, and their target is what
is written, in its own directory, so the link stays a link. wrap writes such a target only
when it is the user's own (owned by them, not inside the project being read) and has no
other hard link; otherwise it says why and writes nothing.

Writing is atomic (a temporary file beside the target, then a rename over it) and checked:
the file must still be the one that was read (same inode, same bytes), reached again
without following a link, or nothing is written.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import replace as evolve
from pathlib import Path

from launcher.host.fdtree import replace_at, write_all
from launcher.host.nofollow import SymlinkOnTheWay, descend
from launcher.host.oscalls import DIR, NEW_FILE
from launcher.shared.user_errors import UsageError
from sandbox_profiles.records import frozen
from sandbox_profiles.regular_file import UNTRUSTED, NotRegular, kind, read_regular
from sandbox_profiles.ways import is_under

# Client files are small; ~/.claude.json keeps a history and may reach some megabytes. A
# project's file holds a few servers: a bigger one is no client's, and is not read.
MAX_SIZE = 64 * 2**20
PROJECT_MAX_SIZE = 2**20
NOT_FOLLOWED = "ironcurtain does not follow a project's links (one could lead to your own files)"


class Refused(Exception):
    """A client file that is there but is not read (the message names it and says why)."""


@frozen
class Source:
    """One client file as it was read."""

    path: Path  # as the client names it
    real: Path  # the file itself: a user's links followed; a project's is ``path``
    text: str
    device: int
    inode: int
    owner: int
    group: int
    mode: int
    unwritable: str | None = None  # why it may not be written (None: it may)


def _read_fd(fd: int, path: Path, limit: int = MAX_SIZE) -> tuple[str, os.stat_result]:
    try:
        data, st = read_regular(fd, limit)
    except NotRegular as exc:
        if exc.kind is not None:
            raise Refused(f"{path}: not a regular file ({exc.kind}): not read") from None
        raise Refused(f"{path}: too large ({exc.size} bytes; at most {limit}): not read") from None
    try:
        return data.decode("utf-8"), st
    except UnicodeDecodeError as exc:
        raise Refused(f"{path}: not UTF-8 text (byte {exc.start}): not read") from None


def read_project(root: Path, relative: str) -> Source | None:
    """``root/relative``, a project's file, reached without following a link; None when it
    is not there. Refused when it is there but must not be read."""
    parts = Path(relative).parts
    path = root.joinpath(*parts)
    fd = _descend_project(root, parts[:-1], path)
    if fd is None:
        return None
    try:
        name = parts[-1]
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(name, dir_fd=fd)
            raise Refused(f"{path}: a symbolic link (to {target}); {NOT_FOLLOWED}: not read")
        if not stat.S_ISREG(st.st_mode):  # looked at before opening: a device is never opened
            raise Refused(f"{path}: not a regular file ({kind(st.st_mode)}): not read")
        if st.st_nlink > 1:
            raise Refused(
                f"{path}: it has {st.st_nlink} hard links (it may be a file of yours under "
                "another name): not read"
            )
        try:
            file = os.open(name, UNTRUSTED | os.O_NOFOLLOW, dir_fd=fd)
        except OSError as exc:
            raise Refused(f"{path}: cannot read it: {exc.strerror}") from None
        try:
            text, now = _read_fd(file, path, PROJECT_MAX_SIZE)
        finally:
            os.close(file)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or now.st_nlink > 1:
            raise Refused(f"{path}: it changed while it was read: not read")
        return Source(path, path, text, now.st_dev, now.st_ino, now.st_uid, now.st_gid,
                      stat.S_IMODE(now.st_mode))  # fmt: skip
    finally:
        os.close(fd)


def _descend_project(root: Path, parts: tuple[str, ...], path: Path) -> int | None:
    """A descriptor of the directory ``root/parts``, each part reached without following a
    link (Refused names the link; None: one is missing or not a directory)."""
    fd = os.open(root, DIR)
    try:
        return descend(fd, parts)
    except SymlinkOnTheWay as exc:
        raise Refused(
            f"{path}: {exc.filename} is a symbolic link; {NOT_FOLLOWED}: not read"
        ) from None
    except (FileNotFoundError, NotADirectoryError):
        return None


def list_project(root: Path, relative: str) -> list[str]:
    """The names in the project's directory ``root/relative``, reached without following a
    link (none when it is not there)."""
    parts = Path(relative).parts
    fd = _descend_project(root, parts, root.joinpath(*parts))
    if fd is None:
        return []
    try:
        return os.listdir(fd)
    finally:
        os.close(fd)


def read_user(home: Path, relative: str, project: Path | None) -> Source | None:
    """``home/relative``, a user's file, its links followed; None when it is not there. Why
    wrap may not write it is kept in ``unwritable``."""
    path = home / relative
    try:
        real = Path(os.path.realpath(path, strict=True))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise Refused(f"{path}: cannot read it: {exc.strerror}") from None
    try:
        fd = os.open(real, UNTRUSTED)
    except OSError as exc:
        raise Refused(f"{path}: cannot read it: {exc.strerror}") from None
    try:
        text, st = _read_fd(fd, path)
    finally:
        os.close(fd)
    linked = real != Path(os.path.realpath(home)) / relative
    unwritable = None
    if linked and st.st_uid != os.geteuid():
        unwritable = f"{path}: it links to {real}, which uid {st.st_uid} owns, not you"
    elif linked and project is not None and is_under(str(real), os.path.realpath(project)):
        unwritable = (
            f"{path}: it links to {real}, inside the project {project} (a directory wrap does "
            "not trust with your files)"
        )
    elif st.st_nlink > 1:
        unwritable = (
            f"{path}: it has {st.st_nlink} hard links; writing it anew would part them "
            "(make it one file, or a symbolic link)"
        )
    return Source(path, real, text, st.st_dev, st.st_ino, st.st_uid, st.st_gid,
                  stat.S_IMODE(st.st_mode), unwritable)  # fmt: skip


@contextlib.contextmanager
def _still_directories(path: Path) -> Iterator[None]:
    """A directory on the way to ``path`` that is no longer one (a link put in its place)
    as a UsageError naming it."""
    try:
        yield
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UsageError(
                f"{path}: {exc.filename} is no longer a directory (a link?); not written"
            ) from None
        raise


def open_dir(path: Path) -> int:
    """A descriptor of ``path`` (absolute, its links resolved) reached from ``/`` without
    following a link."""
    with _still_directories(path):
        return descend(os.open("/", DIR), path.parts[1:])


def unchanged(source: Source) -> str | None:
    """Why ``source``'s file is no longer the one that was read (None: it is)."""
    changed = f"{source.path}: changed since it was read"
    try:
        fd = open_dir(source.real.parent)
    except (OSError, UsageError):
        return changed
    try:
        st = os.stat(source.real.name, dir_fd=fd, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (source.device, source.inode):
            return changed
        file = os.open(source.real.name, UNTRUSTED | os.O_NOFOLLOW, dir_fd=fd)
        try:
            text, _ = _read_fd(file, source.path)
        finally:
            os.close(file)
        return None if text == source.text else changed
    except (OSError, Refused):
        return changed
    finally:
        os.close(fd)


def writable(source: Source) -> None:
    """UsageError when ``source`` may not be written, or changed since it was read."""
    if source.unwritable:
        raise UsageError(f"{source.unwritable}; nothing written")
    problem = unchanged(source)
    if problem:
        raise UsageError(f"{problem}; nothing written")


def write(source: Source, text: str) -> Source:
    """``text`` in place of the file ``source`` was read from (its target, for a link),
    atomically, with its mode (and, as root, its owner) kept; what is there now."""
    if source.unwritable:
        raise UsageError(f"{source.unwritable}; not written")
    problem = unchanged(source)
    if problem:
        raise UsageError(f"{problem}; not written")
    fd = open_dir(source.real.parent)
    try:
        st = _replace_at(fd, source.real.name, text, source.mode,
                         (source.owner, source.group) if os.geteuid() == 0 else None)  # fmt: skip
    finally:
        os.close(fd)
    return evolve(source, text=text, device=st.st_dev, inode=st.st_ino)


def _replace_at(
    fd: int, name: str, text: str, mode: int, owner: tuple[int, int] | None
) -> os.stat_result:
    data = text.encode("utf-8")
    return replace_at(fd, name, lambda out: write_all(out, data), mode, owner)


def write_own(path: Path, text: str, before: str | None = None) -> None:
    """``text`` to one of ironcurtain's own files (its user config, its records): a link
    there (dotfiles) stays one and its target is written; ``before``: what it must still
    hold (None: whatever it holds)."""
    if os.path.lexists(path):
        source = read_user(path.parent, path.name, None)
        if source is not None:
            if before is not None and source.text != before:
                raise UsageError(f"{path}: changed since it was read; not written")
            write(source, text)
            return
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = open_dir(Path(os.path.realpath(path.parent)))
    try:
        _replace_at(fd, path.name, text, 0o600, None)
    finally:
        os.close(fd)


def write_new(path: Path, text: str) -> None:
    """``text`` to a new file ``path`` (owner-only), never through anything already there."""
    fd = os.open(path, NEW_FILE, 0o600)
    try:
        write_all(fd, text.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
