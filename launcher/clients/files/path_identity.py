"""Where a path lies, by identity (its device and inode, links followed): a bind mount of a
directory at another path is still that directory, so the home bound elsewhere is still the
home."""

from __future__ import annotations

import os
from pathlib import Path

from sandbox_profiles.ways import is_under


def identity(path: str | Path) -> tuple[int, int] | None:
    """(device, inode) of ``path`` (links followed); None when it cannot be looked at."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def lineage(path: str | Path) -> list[tuple[int, int]]:
    """The identities of ``path`` and of every directory holding it (its real path's)."""
    real = Path(os.path.realpath(path))
    found = [identity(p) for p in (real, *real.parents)]
    return [i for i in found if i is not None]


def within(inner: str | Path, outer: str | Path) -> bool:
    """Whether ``inner`` is ``outer`` or lies inside it, by identity: a bind mount of
    ``outer`` at another path counts as ``outer``."""
    mark = identity(outer)
    return mark is not None and mark in lineage(inner)


def holds_home(path: str | Path, home: str | Path) -> bool:
    """Whether ``path`` is the home directory or a directory holding it (by identity, and
    by real path when the home cannot be looked at)."""
    if identity(home) is None:
        return is_under(os.path.realpath(home), os.path.realpath(path))
    return within(home, path)
