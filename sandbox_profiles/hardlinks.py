"""Other names of protected files: hard links inside the writable roots.

A file host tools run (``.git/hooks/pre-commit``) may have a second name elsewhere in a
writable root (``innocent``): it is the same file, so writing through that name changes the
hook, and the read-only mount of the hook does not stop it. Every such name is protected as
the file is. A sandbox cannot make a new one: ``link(2)`` from a read-only mount to another
mount fails (``EXDEV``), whatever the file system.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence

from sandbox_profiles.gitconfig import UnreadableConfig
from sandbox_profiles.ways import is_under


def other_names(protected: Mapping[str, str], writable: Sequence[str]) -> dict[str, str]:
    """{other name: why} of every regular file in ``writable`` that is a hard link of a file
    in ``protected`` (files, and directories protected whole) and is not itself inside a
    protected path. The roots are walked first: a name there with no other name is nobody's
    second one, so the protected trees (a home's ``.pyenv`` may hold 100 000 files) are
    walked only when some file in the roots has several names, or a directory there cannot
    be listed. A directory that cannot be listed, in the roots or the protected trees,
    raises :class:`UnreadableConfig` (a link there could not be found) when what it could
    hide matters: a protected file with another name, or a name in the roots to match."""
    skip = tuple(protected)
    candidates: list[tuple[str, os.stat_result]] = []
    unlisted: list[UnreadableConfig] = []
    for root in dict.fromkeys(writable):
        if not os.path.isdir(root) or any(is_under(root, r) and root != r for r in writable):
            continue  # a root inside another is walked with it
        candidates += _linked_files(root, skip, unlisted)
    candidates = [(name, st) for name, st in candidates if not _inside(name, protected)]
    if not candidates and not unlisted:
        return {}
    targets: dict[tuple[int, int], str] = {}
    for path in protected:
        for name, st in _linked_files(path, ()) if os.path.isdir(path) else _linked_file(path):
            targets.setdefault((st.st_dev, st.st_ino), name)
    if not targets:
        return {}
    if unlisted:
        raise unlisted[0]
    found: dict[str, str] = {}
    for name, st in candidates:
        kept = targets.get((st.st_dev, st.st_ino))
        if kept is not None and name != kept:
            found[name] = f"another name (hard link) of {kept}, which is protected"
    return found


def _inside(path: str, protected: Mapping[str, str]) -> bool:
    return path in protected or any(is_under(path, p) for p in protected)


def _linked_file(path: str) -> list[tuple[str, os.stat_result]]:
    try:
        st = os.lstat(path)
    except OSError:
        return []
    return [(path, st)] if stat.S_ISREG(st.st_mode) and st.st_nlink > 1 else []


def _linked_files(
    root: str, skip: tuple[str, ...], unlisted: list[UnreadableConfig] | None = None
) -> list[tuple[str, os.stat_result]]:
    """Every regular file below ``root`` with more than one name (symlinks not followed),
    not descending into ``skip`` (what is protected whole already). A directory that cannot
    be listed raises :class:`UnreadableConfig`, or is added to ``unlisted`` when given."""
    found: list[tuple[str, os.stat_result]] = []
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError as exc:
            error = UnreadableConfig(
                directory,
                f"cannot be listed ({exc.strerror}), so a hard link of a protected file "
                "there could not be found",
            )
            if unlisted is None:
                raise error from None
            unlisted.append(error)
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    if entry.path not in skip:
                        stack.append(entry.path)
                    continue
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                found.append((entry.path, st))
    return found
