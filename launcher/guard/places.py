"""The places in the writable roots the guard keeps that the catalogue does not name.

- *guarded*: paths that must not come into being (denyWrite, ironcurtain's own files, what a
  git configuration names that is not there yet), as named and as the host resolves them
  now (through a symlink of the user's on the way);
- *ways*: the directories on the way to a guarded path: only a directory may appear there
  (a symlink would lead the host's tool elsewhere);
- *anchored*: what is protected by where it is, and the way to it (a symlink on it, which no
  mount can pin): kept by identity.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from launcher.host.nofollow import Parts
from sandbox_profiles.ways import is_under

GUARDED = "protected path (denyWrite, ironcurtain's, or named by a git configuration)"
ANCHORED = "in the place of a protected path, or of a directory on the way to one"
WAY = "not a directory, on the way to a protected path"


class Places:
    def __init__(self, roots: Sequence[str], guarded: Iterable[str], anchored: Iterable[str]):
        named = {os.path.normpath(p) for p in guarded}
        self.guarded = named | {os.path.realpath(p) for p in named}
        self.ways = {w for p in self.guarded for w in _ways_in(p, roots)}
        self.anchored = {os.path.normpath(p) for p in anchored}

    def why(self, path: str, is_dir: bool) -> tuple[str, bool] | None:
        """Why ``path`` (a directory or not) is kept, and whether the guard stops there (it
        goes on below an anchored directory); None when it is no such place."""
        if path in self.guarded:
            return GUARDED, True
        if path in self.anchored:
            return ANCHORED, False
        if path in self.ways and not is_dir:
            return WAY, True
        return None

    def known_by_identity(self, root: str) -> list[str]:
        """Those in ``root`` that are known by identity from the start."""
        return [p for p in (*self.anchored, *self.ways) if inside(p, root)]

    def in_root(self, root: str) -> list[str]:
        """Every one in ``root``, outermost first (the sweep's order)."""
        found = {p for p in (*self.anchored, *self.ways, *self.guarded) if inside(p, root)}
        return sorted(found, key=lambda p: p.count("/"))


def inside(path: str, root: str) -> bool:
    """``path`` is strictly inside ``root`` (not ``root`` itself)."""
    return path != root and is_under(path, root)


def _ways_in(path: str, roots: Sequence[str]) -> list[str]:
    """The directories strictly between the outermost root holding ``path`` and it (a
    root inside another is one of them)."""
    holding = [r for r in roots if inside(path, r)]
    if not holding:
        return []
    root = min(holding, key=len).rstrip("/")
    parts = path[len(root) + 1 :].split("/")
    return [os.path.join(root, *parts[:i]) for i in range(1, len(parts))]


def outermost(paths: list[tuple[str, Parts]]) -> list[tuple[str, Parts]]:
    """Each (root, parts) once, and none inside another of the list: a rescan covers what
    is below it (a storm of renames must not make the guard scan one tree many times)."""
    unique = sorted(set(paths), key=lambda p: (p[0], len(p[1])))
    kept: list[tuple[str, Parts]] = []
    seen: set[tuple[str, Parts]] = set()
    for root, parts in unique:
        if any((root, parts[:i]) in seen for i in range(len(parts))):
            continue
        seen.add((root, parts))
        kept.append((root, parts))
    return kept
