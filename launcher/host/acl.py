"""POSIX ACLs written directly as ``system.posix_acl_*`` xattrs (no ``setfacl`` needed).

Used when ironcurtain runs as root: servers run as an unprivileged uid, and a root-owned
workspace is opened to that uid with an ACL entry (plus a default entry on directories, so
what is created later inherits it) rather than by changing anyone's ownership.
"""

from __future__ import annotations

import os
import stat
import struct

from launcher.host.oscalls import read_xattr, write_xattr

ACCESS = "system.posix_acl_access"
DEFAULT = "system.posix_acl_default"
_VERSION = 2
_USER_OBJ, _USER, _GROUP_OBJ, _GROUP, _MASK, _OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
_UNDEFINED = 0xFFFFFFFF

Entry = tuple[int, int, int]  # tag, perm, id


def _decode(data: bytes) -> list[Entry]:
    (version,) = struct.unpack_from("<I", data)
    if version != _VERSION:
        raise ValueError(f"unknown ACL version {version}")
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


def _with_user(entries: list[Entry], uid: int, perm: int) -> list[Entry]:
    """``entries`` with user ``uid`` granted ``perm`` and the mask widened to cover it."""
    kept = [e for e in entries if not (e[0] == _USER and e[2] == uid) and e[0] != _MASK]
    kept.append((_USER, perm, uid))
    mask = 0
    for tag, p, _ in kept:
        if tag in (_USER, _GROUP, _GROUP_OBJ):
            mask |= p
    return [*kept, (_MASK, mask, _UNDEFINED)]


def _read(path: str, name: str) -> list[Entry] | None:
    data = read_xattr(path, name)
    return None if data is None else _decode(data)


def grant(path: str, uid: int) -> None:
    """Give ``uid`` read and write (and search, on directories and executables) on ``path``
    and everything below it; directories also pass the grant on to new entries.

    Symlinks are not followed. Raises OSError (``ENOTSUP`` where the filesystem has no ACLs).
    """
    for directory, subdirs, files in os.walk(path):
        _grant_one(directory, uid, is_dir=True)
        for name in files:
            full = os.path.join(directory, name)
            st = os.lstat(full)
            if stat.S_ISREG(st.st_mode):
                _grant_one(full, uid, is_dir=False, mode=st.st_mode)
        subdirs[:] = [d for d in subdirs if not os.path.islink(os.path.join(directory, d))]


def _grant_one(path: str, uid: int, is_dir: bool, mode: int | None = None) -> None:
    if mode is None:
        mode = os.lstat(path).st_mode
    perm = 7 if is_dir or mode & 0o111 else 6
    current = _read(path, ACCESS) or _from_mode(mode)
    write_xattr(path, ACCESS, _encode(_with_user(current, uid, perm)))
    if is_dir:
        default = _read(path, DEFAULT) or _from_mode(mode | 0o700)
        write_xattr(path, DEFAULT, _encode(_with_user(default, uid, 7)))
