"""The ACL entries a session running as root gives its servers' user, kept the session's alone.

Before the first change, every file of the roots is written down in a record in
ironcurtain's state directory (owner-only), with its mode and ACLs as they are; the session
holds a lock on that record while it runs. At its end each recorded file gets its mode and
ACLs back exactly (found by inode, under whatever name it has now), and what was made
meanwhile loses the entries it inherited and goes to the owner of the directory it is in.
A record nobody holds a lock on is a crashed session's: the next start undoes it the same way.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import stat
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from launcher.host import acl
from launcher.host.fd_walk import Found, walk
from launcher.host.oscalls import birth_time
from launcher.shared import dirs
from launcher.shared.user_errors import StartupError
from sandbox_profiles.records import mutable
from sandbox_profiles.ways import is_under

LEDGER_DIR = "acl-ledger"
_ASIDE = ".part"  # a record being written: nothing is changed before it is renamed
# What the sandbox may do with a path: acl.READ, acl.WRITE, or nothing (None: hidden from it).
View = Callable[[str], str | None]
_Key = tuple[int, int]  # st_dev, st_ino


def ledger_dir() -> Path:
    return dirs.state_dir() / LEDGER_DIR


# The roots this process has opened, each with the ledger that will close it.
_OPEN: dict[str, AclLedger] = {}


@mutable
class AclLedger:
    """One session's record of what it opened to ``uid``, locked while the session runs."""

    path: str
    uid: int
    roots: list[str]
    fd: int = -1

    @classmethod
    def open_roots(cls, session: str, uid: int, roots: Sequence[str], view: View) -> AclLedger:
        """Open ``roots`` to ``uid`` as ``view`` says, recorded first (what this process has
        opened already is left to the ledger that opened it). Raises OSError (``ENOTSUP``: a
        filesystem without ACLs) and :class:`StartupError` when another session has opened
        one of them."""
        todo = [r for r in roots if not any(is_under(r, o) for o in _OPEN)]
        skip = [o for o in _OPEN if any(is_under(o, r) for r in todo)]
        skip += [m for m in mount_points() if any(is_under(m, r) and m != r for r in todo)]
        directory = ledger_dir()
        if not todo:
            return cls(str(directory / f"{session}.json"), uid, [])  # nothing of its own
        view = _refuse_holding(directory, todo, view)
        ledger = cls(str(directory / f"{session}-{os.urandom(4).hex()}.json"), uid, todo)
        with _locked(directory):
            _refuse_overlap(directory, todo)
            files, changes = _survey(todo, skip, uid, view)
            ledger._write({"uid": uid, "roots": todo, "skip": skip, "files": files})
        for root in todo:
            _OPEN[root] = ledger
        try:
            _apply(todo, skip, uid, changes)
        except OSError:
            ledger.close()  # what was opened before the failure (ENOTSUP: nothing)
            raise
        return ledger

    def _write(self, record: dict[str, object]) -> None:
        """The record, whole and on disk under its name (written aside, then renamed), and
        locked for as long as this session runs."""
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        aside = self.path + _ASIDE
        self.fd = os.open(aside, flags, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        view = memoryview(json.dumps(record, separators=(",", ":")).encode())
        while view:
            view = view[os.write(self.fd, view) :]
        os.fsync(self.fd)
        os.rename(aside, self.path)

    def close(self) -> None:
        """Undo what was opened (the servers have stopped), then drop the record."""
        if self.fd < 0:
            return
        undo(json.loads(_read_all(self.fd)))  # what it wrote: never read again by name
        with _locked(Path(self.path).parent):
            os.unlink(self.path)
            os.close(self.fd)
            self.fd = -1
        for root in self.roots:
            _OPEN.pop(root, None)


def _read_all(fd: int) -> bytes:
    chunks: list[bytes] = []
    offset = 0
    while chunk := os.pread(fd, 1 << 16, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """The ledger directory, made if need be and locked against every other start (whether
    it is there); removed on the way out when it holds no record any more. Another start
    may remove it while this one makes or opens it: then it is made again."""
    while True:
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            continue  # removed by the start that held the lock, once empty
        except FileExistsError:
            # One look (two could see the directory there, then gone: not a directory).
            try:
                there = os.lstat(directory)
            except FileNotFoundError:
                continue  # there, then removed by the start that held the lock
            if not stat.S_ISDIR(there.st_mode):
                raise  # something else by that name: never waited for
            continue
        fcntl.flock(fd, fcntl.LOCK_EX)
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            os.close(fd)
            raise StartupError(f"{directory} is not ironcurtain's own (owned by uid {st.st_uid})")
        with contextlib.suppress(FileNotFoundError):
            if st.st_nlink and os.lstat(directory).st_ino == st.st_ino:
                break  # not removed by the start that held the lock before
        os.close(fd)
    try:
        os.chmod(directory, 0o700)
        yield
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(directory)  # only while empty
        os.close(fd)


def _records(directory: Path) -> list[Path]:
    """The records in ``directory``, each this user's own and owner-only: what a record says
    is written back as root, so one anybody else could have written is never read."""
    found = sorted(directory.glob("*.json"))
    for path in found:
        st = os.lstat(path)
        if st.st_uid != os.geteuid() or st.st_mode & 0o077 or stat.S_ISLNK(st.st_mode):
            raise StartupError(
                f"{path} is not ironcurtain's own (owned by uid {st.st_uid}, mode "
                f"{stat.S_IMODE(st.st_mode):o}): a record of what to undo there must be this "
                f"user's alone.\nTo fix: check what it is, then remove it"
            )
    return found


def _held(path: Path) -> bool:
    """Whether a running session holds ``path``'s lock."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _refuse_overlap(directory: Path, roots: Sequence[str]) -> None:
    for record in _records(directory):
        if not _held(record):
            continue
        theirs = json.loads(record.read_text(encoding="utf-8")).get("roots", [])
        for root in roots:
            for other in theirs:
                if is_under(root, other) or is_under(other, root):
                    raise StartupError(
                        f"{root} is opened to the sandbox's user by another session running "
                        f"as root ({record.stem}, its root {other}); wait for it to end"
                    )


_Change = tuple[acl.Snapshot, str]  # what a file was, what the sandbox may do with it


def _survey(
    roots: Sequence[str], skip: Sequence[str], uid: int, view: View
) -> tuple[list[list[object]], dict[_Key, _Change]]:
    """Every file of ``roots`` but those in ``skip`` as recorded ([path, dev, ino, owner,
    snapshot or None when left as it is]), and the changes to make, by file. A file with
    several names is let at only as far as every one of them shows it: not at all when one
    is hidden or lies outside the roots (a hard link of ``/etc/shadow`` in a workspace opens
    nothing outside it)."""
    files: list[list[object]] = []
    changes: dict[_Key, _Change] = {}
    access_of: dict[_Key, str | None] = {}
    names: dict[_Key, int] = {}
    for root in roots:
        for found in walk(root, skip):
            st = found.st
            key = (st.st_dev, st.st_ino)
            is_dir = stat.S_ISDIR(st.st_mode)
            access = view(found.path) if is_dir or stat.S_ISREG(st.st_mode) else None
            names[key] = names.get(key, 0) + 1
            access_of[key] = _least(access_of[key], access) if key in access_of else access
    seen: set[_Key] = set()
    for root in roots:
        for found in walk(root, skip):
            st = found.st
            key = (st.st_dev, st.st_ino)
            if key in seen:
                continue
            seen.add(key)
            access = access_of.get(key)
            if not stat.S_ISDIR(st.st_mode) and st.st_nlink > names.get(key, 0):
                access = None  # a name of it lies outside the roots (or appeared meanwhile)
            entry = [found.path, st.st_dev, st.st_ino, st.st_uid, None]
            entry.append(birth_time(found.reach))  # the inode number is not enough
            files.append(entry)
            if access is None or st.st_uid == uid:
                continue
            snap = acl.Snapshot.of(found.reach, st)
            entry[4] = snap.to_json()
            changes[key] = (snap, access)
    return files, changes


def _least(one: str | None, other: str | None) -> str | None:
    """The lesser of two accesses (None, hidden, is the least)."""
    if one is None or other is None:
        return None
    return acl.READ if acl.READ in (one, other) else acl.WRITE


def mount_points() -> list[str]:
    """Where something is mounted, as this process sees it (``/proc/self/mountinfo``): a
    mount inside a root (a bind of ``/etc``) is another tree, never opened with it."""
    found: list[str] = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as info:
        for line in info:
            fields = line.split(" ")
            if len(fields) > 4:
                found.append(_unescape(fields[4]))
    return found


def _unescape(text: str) -> str:
    """A mountinfo field with its octal escapes (``\\040`` for a space) undone."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def _refuse_holding(directory: Path, roots: Sequence[str], view: View) -> View:
    """``view`` with the ledger directory hidden (never opened), when no server may write
    it; :class:`StartupError` when one may (ironcurtain's state not kept read-only there):
    a record it wrote would be undone as root by the next start."""
    real = os.path.realpath(directory)
    for root in roots:
        if is_under(real, root) and view(real) == acl.WRITE:
            raise StartupError(
                f"{root} holds {directory}, where ironcurtain running as root records what "
                f"it opens to the sandbox's user; a server writing there could put a record "
                f"of its own in its place; set XDG_STATE_HOME outside every writable root"
            )
    return lambda path: None if is_under(path, real) else view(path)


def _apply(
    roots: Sequence[str], skip: Sequence[str], uid: int, changes: dict[_Key, _Change]
) -> None:
    """Make the recorded ``changes`` (a second walk: the record is on disk first)."""
    for root in roots:
        for found in walk(root, skip):
            change = changes.pop((found.st.st_dev, found.st.st_ino), None)
            if change is not None:
                snap, access = change
                acl.open_to(found.reach, uid, snap, stat.S_ISDIR(found.st.st_mode), access)


def undo(record: dict[str, object]) -> None:
    """Put every recorded file back as it was and take the sandbox's user out of what was
    made meanwhile (parents before children: a new directory takes its parent's default
    ACL as it is once put back)."""
    uid, roots, skip, files = (record[k] for k in ("uid", "roots", "skip", "files"))
    if not (isinstance(uid, int) and isinstance(roots, list) and isinstance(skip, list)):
        raise ValueError("not an ACL record")
    if not isinstance(files, list):
        raise ValueError("not an ACL record")
    known: dict[_Key, tuple[int, acl.Snapshot | None, object]] = {}
    for _, dev, ino, owner, snap, *born in files:
        put = None if snap is None else acl.Snapshot.from_json(snap)
        known[(dev, ino)] = (owner, put, born[0] if born else None)
    done: set[_Key] = set()
    mounted = [m for m in mount_points() if any(is_under(m, r) and m != r for r in roots)]
    state = os.path.realpath(ledger_dir().parent)
    for root in roots:
        if not os.path.lexists(root):
            continue
        for found in walk(root, [*skip, *mounted]):  # a mount made since: another tree
            st = found.st
            key = (st.st_dev, st.st_ino)
            if key in done:
                continue  # another name of a file put right already
            done.add(key)
            was = known.get(key)
            if was is not None and was[0] == st.st_uid and _same_birth(was[2], found.reach):
                if was[1] is not None:
                    acl.put_back(found.reach, was[1], stat.S_ISDIR(st.st_mode))
            elif found.path != root:
                # What a server made where ironcurtain keeps its state (a directory put in
                # the place of one above it) stays the server's: given to root, a record in
                # it would be trusted by the next start.
                _made_meanwhile(found, uid, give=not is_under(found.path, state))


def _same_birth(born: object, reach: str) -> bool:
    """Whether the file at ``reach`` was made when the recorded one was (unknown to either:
    taken to be): an inode number freed meanwhile may have gone to a file the session made."""
    if not isinstance(born, int):
        return True
    now = birth_time(reach)
    return now is None or now == born


def _made_meanwhile(found: Found, uid: int, give: bool = True) -> None:
    """A file the session made: without ``uid``'s entries, its parent's owner's (a set-id
    bit the sandbox set goes: it was never the owner's); with ``give`` False, still the
    server's."""
    path, st = found.reach, found.st
    is_dir = stat.S_ISDIR(st.st_mode)
    if is_dir or stat.S_ISREG(st.st_mode):
        acl.forget(path, uid, is_dir, acl.read_default(found.parent) if is_dir else None)
    if st.st_uid == uid and give:
        owner = os.stat(found.parent)
        os.chown(path, owner.st_uid, owner.st_gid)  # the file itself, even a symlink
        if not stat.S_ISLNK(st.st_mode):
            mode = stat.S_IMODE(os.stat(path).st_mode)
            # A set-id bit the sandbox set goes; a directory keeps set-group-id only as
            # its parent passes it on.
            keep = owner.st_mode & stat.S_ISGID if is_dir else 0
            os.chmod(path, (mode & ~0o6000) | keep)


def replay_stale() -> None:
    """Undo the records of sessions that ended without undoing their own (killed): a
    record nobody holds is one. Raises :class:`StartupError` when one cannot be undone."""
    directory = ledger_dir()
    if not directory.is_dir():
        return
    with _locked(directory):
        for aside in directory.glob("*" + _ASIDE):
            if not _held(aside):  # a start that died before it changed anything
                aside.unlink()
        for record in _records(directory):
            if _held(record):
                continue
            try:
                undo(json.loads(record.read_text(encoding="utf-8")))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise StartupError(
                    f"cannot undo what a session that ended without cleaning up opened to "
                    f"the sandbox's user ({record}): {exc}.\nTo fix: restore the files it "
                    f"lists by hand (getfacl/setfacl), then remove it"
                ) from None
            record.unlink()
