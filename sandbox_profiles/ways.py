"""Keeping the way to what a sandbox shows read-only (or hides) by where it is, inside a
writable root: the directories on it pinned, the symlinks on it handed to the guard."""

from __future__ import annotations

import os
from collections.abc import Sequence

from sandbox_profiles.model import Mount, SandboxProfile

PINNED = "pinned"


def is_under(path: str, root: str) -> bool:
    """``path`` is ``root`` or inside it (no prefix confusion: ``/ws-x`` is not in ``/ws``)."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def deepest_mount(profile: SandboxProfile, path: str) -> Mount | None:
    """The mount that decides what ``path`` is inside the sandbox: the last, deepest one
    whose destination holds it (None: only the sandbox's empty root)."""
    found: Mount | None = None
    for mount in profile.mounts:
        if is_under(path, mount.dest) and (found is None or len(mount.dest) >= len(found.dest)):
            found = mount
    return found


def ways(paths: Sequence[str], writable: Sequence[str]) -> tuple[list[Mount], list[str]]:
    """What keeps each of ``paths`` (shown read-only or hidden inside a writable root, by
    where it is rather than by its name) the path the host names.

    A server could otherwise rename a directory on the way (the mount moves with it) and
    make a new one in its place, with its own file where the protected one was: the
    user's link or git configuration, unchanged, would then lead to it. So every real
    directory between the root and the path is bound onto itself, read-write as before: a
    mount point cannot be renamed or removed (EBUSY), and a rename across it fails (EXDEV).
    A symlink on the way, or the path itself when it is a symlink, cannot be pinned: each,
    with the directories on the way, is returned to be anchored (the guard quarantines
    whatever takes one of those places with another identity). The path itself is not,
    otherwise: its mount keeps it, and the user may edit it."""
    pins: dict[str, str] = {}
    anchored: dict[str, None] = {}
    for path in paths:
        for named in forms(path):
            # From the outermost root holding it: a writable root inside another is a
            # mount point, but the directories above it are not.
            roots = [r for r in writable if is_under(named, r) and named != r]
            if not roots:
                continue
            root = min(roots, key=len)
            parts = named[len(root.rstrip("/")) + 1 :].split("/")
            for i in range(1, len(parts) + 1):
                way = os.path.join(root, *parts[:i])
                if not os.path.lexists(way):
                    break
                if i < len(parts) or os.path.islink(way):
                    anchored.setdefault(way, None)
                if i < len(parts) and os.path.isdir(way) and not os.path.islink(way):
                    pins.setdefault(way, path)
    mounts = [
        Mount("bind", way, way, f"{PINNED}: on the way to {target}, so it stays where it is")
        for way, target in sorted(pins.items(), key=lambda item: item[0].count("/"))
    ]
    return mounts, list(anchored)


def forms(path: str, hops: int = 40) -> list[str]:
    """``path`` as the host names it, then after each symlink on it is followed, one at a
    time (the first one on the way, its target read as the host would), ending with the real
    path: every name the host's lookup passes through.

    >>> forms("/nonexistent/a/b")
    ['/nonexistent/a/b']
    """
    forms = [path]
    current = path
    for _ in range(hops):
        parts = current.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            prefix = "/" + "/".join(parts[:i])
            if os.path.islink(prefix):
                try:
                    link = os.readlink(prefix)
                except OSError:
                    return list(dict.fromkeys([*forms, os.path.realpath(path)]))
                current = os.path.normpath(os.path.join(os.path.dirname(prefix), link, *parts[i:]))
                forms.append(current)
                break
        else:
            break
    return list(dict.fromkeys([*forms, os.path.realpath(path)]))
