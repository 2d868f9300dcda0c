"""Whether a file ``wrap`` rewrites is tracked by git (a committed ``.mcp.json``): the rewrite
puts this machine's paths in it, and a commit would share them.

Read from the repository's index with plain file reads: git is never run in a project wrap
reads (its config could make git run a program of the project's). Whatever cannot be read
or parsed counts as not known to be tracked.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

MAX_INDEX = 64 << 20  # bytes read of an index at most


def _git_dir(top: Path) -> Path | None:
    """The git directory of the working tree at ``top`` (``.git``, or the directory a
    ``.git`` file names), or None."""
    dot = top / ".git"
    if dot.is_dir():
        return dot
    try:
        text = dot.read_text(encoding="utf-8", errors="replace")[:4096]
    except OSError:
        return None
    if not text.startswith("gitdir: "):
        return None
    target = Path(text[len("gitdir: ") :].strip())
    return target if target.is_absolute() else top / target


def tracked(path: Path) -> bool:
    """Whether ``path`` is in the index of the git working tree that holds it."""
    here = Path(os.path.abspath(path))
    for top in here.parents:
        if (top / ".git").exists():
            git = _git_dir(top)
            if git is None:
                return False
            name = here.relative_to(top).as_posix().encode("utf-8", "surrogateescape")
            return name in index_names(git / "index")
    return False


def index_names(index: Path) -> set[bytes]:
    """The paths a git index (versions 2 to 4) holds; empty when it cannot be read."""
    try:
        with open(index, "rb") as handle:
            data = handle.read(MAX_INDEX)
        if data[:4] != b"DIRC":
            return set()
        version, count = struct.unpack(">II", data[4:12])
        return _entries(data, version, count) if version in (2, 3, 4) else set()
    except (OSError, struct.error, ValueError, IndexError):
        return set()


def _entries(data: bytes, version: int, count: int) -> set[bytes]:
    names: set[bytes] = set()
    at, previous = 12, b""
    for _ in range(count):
        start = at
        (flags,) = struct.unpack(">H", data[at + 60 : at + 62])
        at += 62 + (2 if version >= 3 and flags & 0x4000 else 0)
        if version == 4:
            strip, at = _varint(data, at)
            end = data.index(b"\0", at)
            name = previous[: len(previous) - strip] + data[at:end]
            at = end + 1
        else:
            end = data.index(b"\0", at)
            name = data[at:end]
            at = start + ((end - start + 8) // 8) * 8  # NUL-padded to a multiple of 8
        names.add(name)
        previous = name
    return names


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """Git's offset encoding (as its index version 4 strips a shared prefix)."""
    byte = data[at]
    value = byte & 0x7F
    while byte & 0x80:
        at += 1
        byte = data[at]
        value = ((value + 1) << 7) | (byte & 0x7F)
    return value, at + 1
