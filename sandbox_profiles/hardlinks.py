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
    protected path. The roots are walked only when a protected file has another name; a
    directory that cannot be listed then raises :class:`UnreadableConfig` (a link there
    could not be found)."""
    targets: dict[tuple[int, int], str] = {}
    for path in protected:
        for name, st in _linked_files(path, ()) if os.path.isdir(path) else _linked_file(path):
            targets.setdefault((st.st_dev, st.st_ino), name)
    if not targets:
        return {}
    found: dict[str, str] = {}
    for root in dict.fromkeys(writable):
        if not os.path.isdir(root) or any(is_under(root, r) and root != r for r in writable):
            continue  # a root inside another is walked with it
        for name, st in _linked_files(root, tuple(protected)):
            kept = targets.get((st.st_dev, st.st_ino))
            if kept is not None and name != kept and not _inside(name, protected):
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


def _linked_files(root: str, skip: tuple[str, ...]) -> list[tuple[str, os.stat_result]]:
    """Every regular file below ``root`` with more than one name (symlinks not followed),
    not descending into ``skip`` (what is protected whole already)."""
    found: list[tuple[str, os.stat_result]] = []
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError as exc:
            raise UnreadableConfig(
                directory,
                f"cannot be listed ({exc.strerror}), so a hard link of a protected file "
                "there could not be found",
            ) from None
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
