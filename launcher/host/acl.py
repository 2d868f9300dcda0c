"""POSIX ACLs written directly as ``system.posix_acl_*`` xattrs (no ``setfacl`` needed), one
file at a time: what a file's ACLs are (:class:`Snapshot`), opening it to one more user,
putting a snapshot back exactly, and taking a user's entries out of a file made meanwhile.

Used when ironcurtain runs as root: servers run as an unprivileged uid, and a root-owned
workspace is opened to that uid with an ACL entry for the session
(:mod:`launcher.host.acl_ledger` records and undoes it) rather than by changing anyone's
ownership. Opening never widens what another entry allows: when the mask must grow to let
the new entry in, every other entry it limits is tightened to what it was allowed before.
"""

from __future__ import annotations

import base64
import os
import stat
import struct

from launcher.host.oscalls import read_xattr, remove_xattr, write_xattr
from sandbox_profiles.records import frozen

ACCESS = "system.posix_acl_access"
DEFAULT = "system.posix_acl_default"
_VERSION = 2
_USER_OBJ, _USER, _GROUP_OBJ, _GROUP, _MASK, _OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
_GROUP_CLASS = (_USER, _GROUP_OBJ, _GROUP)  # the entries a mask limits
_UNDEFINED = 0xFFFFFFFF
# What the sandbox may do with an entry: read (and search), or read and write too.
READ, WRITE = "read", "write"

Entry = tuple[int, int, int]  # tag, perm, id


def _decode(data: bytes) -> list[Entry]:
    (version,) = struct.unpack_from("<I", data)
    if version != _VERSION or (len(data) - 4) % 8:
        raise ValueError(f"not a version {_VERSION} ACL")
    return [struct.unpack_from("<HHI", data, off) for off in range(4, len(data), 8)]


def _encode(entries: list[Entry]) -> bytes:
    entries = sorted(entries, key=lambda e: (e[0], e[2] if e[0] in (_USER, _GROUP) else 0))
    return struct.pack("<I", _VERSION) + b"".join(struct.pack("<HHI", *e) for e in entries)


def _from_mode(mode: int) -> list[Entry]:
    return [
        (_USER_OBJ, (mode >> 6) & 7, _UNDEFINED),
        (_GROUP_OBJ, (mode >> 3) & 7, _UNDEFINED),
        (_OTHER, mode & 7, _UNDEFINED),
    ]


def with_user(entries: list[Entry], uid: int, perm: int) -> list[Entry]:
    """``entries`` with user ``uid`` allowed ``perm``, and every other entry allowed what it
    was allowed before: the mask grows to let ``perm`` in, and each entry it limits is
    first narrowed to its old mask (``user:bob:rw-`` under ``mask::r--`` becomes
    ``user:bob:r--``, so the wider mask never makes bob's entry writable).

    >>> bob, nobody = 1000, 65534
    >>> limited = [(1, 6, _UNDEFINED), (2, 6, bob), (4, 4, _UNDEFINED), (16, 4, _UNDEFINED),
    ...            (32, 0, _UNDEFINED)]
    >>> sorted(with_user(limited, nobody, 6))  # doctest: +NORMALIZE_WHITESPACE
    [(1, 6, 4294967295), (2, 4, 1000), (2, 6, 65534), (4, 4, 4294967295), (16, 6, 4294967295),
     (32, 0, 4294967295)]
    """
    masks = [p for tag, p, _ in entries if tag == _MASK]
    old_mask = masks[0] if masks else 7
    kept: list[Entry] = []
    for tag, p, ident in entries:
        if tag == _MASK or (tag == _USER and ident == uid):
            continue
        kept.append((tag, p & old_mask if tag in _GROUP_CLASS else p, ident))
    kept.append((_USER, perm, uid))
    mask = 0
    for tag, p, _ in kept:
        if tag in _GROUP_CLASS:
            mask |= p
    return [*kept, (_MASK, mask, _UNDEFINED)]


def without_user(entries: list[Entry], uid: int) -> list[Entry] | None:
    """``entries`` with user ``uid``'s entry taken out; None when what is left says no more
    than a file's mode does (no named entry: the ACL is then removed)."""
    kept = [e for e in entries if not (e[0] == _USER and e[2] == uid) and e[0] != _MASK]
    if not any(tag in (_USER, _GROUP) for tag, _, _ in kept):
        return None
    mask = 0
    for tag, p, _ in kept:
        if tag in _GROUP_CLASS:
            mask |= p
    old_mask = next((p for tag, p, _ in entries if tag == _MASK), 7)
    return [*kept, (_MASK, mask & old_mask, _UNDEFINED)]  # never wider than it was


def read_default(path: str) -> bytes | None:
    """The default ACL of directory ``path`` as stored (None: it has none)."""
    return read_xattr(path, DEFAULT)


def names_user(data: bytes | None, uid: int) -> bool:
    """Whether the ACL ``data`` has an entry for user ``uid``."""
    return data is not None and any(t == _USER and i == uid for t, _, i in _decode(data))


@frozen
class Snapshot:
    """A file's permissions as they are: its mode, and its access and default ACLs as
    stored (None: it has none)."""

    mode: int
    access: bytes | None
    default: bytes | None

    @classmethod
    def of(cls, path: str, st: os.stat_result) -> Snapshot:
        is_dir = stat.S_ISDIR(st.st_mode)
        return cls(
            stat.S_IMODE(st.st_mode),
            read_xattr(path, ACCESS),
            read_xattr(path, DEFAULT) if is_dir else None,
        )

    def to_json(self) -> list[object]:
        return [self.mode, _b64(self.access), _b64(self.default)]

    @classmethod
    def from_json(cls, value: list[object]) -> Snapshot:
        mode, access, default = value
        if not isinstance(mode, int):
            raise ValueError(f"bad mode {mode!r}")
        return cls(mode, _unb64(access), _unb64(default))


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _unb64(text: object) -> bytes | None:
    if text is None:
        return None
    if not isinstance(text, str):
        raise ValueError(f"bad ACL {text!r}")
    data = base64.b64decode(text, validate=True)
    _decode(data)  # refuse what is not an ACL before it is ever written back
    return data


def open_to(path: str, uid: int, snap: Snapshot, is_dir: bool, access: str) -> None:
    """Let ``uid`` at ``path`` (``access``: :data:`READ` or :data:`WRITE`): read and search,
    plus write on :data:`WRITE`; a directory also passes that on to what is made in it."""
    perm = 4 | (2 if access == WRITE else 0) | (1 if is_dir or snap.mode & 0o111 else 0)
    current = _decode(snap.access) if snap.access is not None else _from_mode(snap.mode)
    write_xattr(path, ACCESS, _encode(with_user(current, uid, perm)))
    if is_dir:
        # A directory without a default ACL: what is made in it would get its mode from the
        # umask; a default ACL replaces the umask, so it says what this one would leave.
        base = _decode(snap.default) if snap.default is not None else _from_mode(0o777 & ~umask())
        write_xattr(path, DEFAULT, _encode(with_user(base, uid, perm)))


def umask() -> int:
    """This process's umask, read without changing it (``/proc``: another thread may be
    making files); ``022`` where it cannot be read."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def put_back(path: str, snap: Snapshot, is_dir: bool) -> None:
    """``path``'s ACLs and mode exactly as ``snap`` says (a file's mode last: setting an ACL
    sets the mode's group bits from its mask)."""
    _set(path, ACCESS, snap.access)
    if is_dir:
        _set(path, DEFAULT, snap.default)
    os.chmod(path, snap.mode)


def forget(path: str, uid: int, is_dir: bool, inherited: bytes | None) -> None:
    """Take ``uid``'s entries out of ``path``, made while it was let in (it inherited them):
    its access ACL loses the entry (or goes, with the mode's group bits what its group
    entry was allowed), a directory's default ACL becomes ``inherited`` (what its parent
    passes on now)."""
    data = read_xattr(path, ACCESS)
    if data is not None and names_user(data, uid):
        entries = _decode(data)
        kept = without_user(entries, uid)
        if kept is None:
            masks = [p for tag, p, _ in entries if tag == _MASK]
            group = next(p for tag, p, _ in entries if tag == _GROUP_OBJ) & (masks or [7])[0]
            remove_xattr(path, ACCESS)
            mode = stat.S_IMODE(os.stat(path).st_mode)
            os.chmod(path, (mode & ~0o070) | group << 3)
        else:
            write_xattr(path, ACCESS, _encode(kept))
    if is_dir:
        _set(path, DEFAULT, inherited)


def _set(path: str, name: str, value: bytes | None) -> None:
    if value is None:
        remove_xattr(path, name)
    else:
        write_xattr(path, name, value)
