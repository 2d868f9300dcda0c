"""Canonical filesystem paths for policy decisions.

Every path the policy sees goes through :func:`canonical_path`: tilde expansion, then a
symlink-aware real path. Containment is then a plain string test on canonical forms.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

# Roots whose contents a tool must never be pointed at, whatever the compiled rules say.
SYSTEM_ROOTS: tuple[str, ...] = ("/proc", "/sys", "/dev", "/etc", "/boot")

_HEURISTIC_PREFIXES = ("/", "./", "../", "~")


def expand_tilde(value: str, home: str | None = None) -> str:
    """Expand a leading ``~`` or ``~user``.

    >>> expand_tilde("~/notes.txt", home="/home/ada")
    '/home/ada/notes.txt'
    """
    if value == "~" or value.startswith("~/"):
        base = home if home is not None else os.path.expanduser("~")
        return base + value[1:]
    if value.startswith("~"):
        return os.path.expanduser(value)
    return value


def resolve_real_path(path: str, cwd: str | None = None) -> str:
    """Where an access to ``path`` would really land, following every symlink.

    Three tiers: (1) the path exists: its real path; (2) its parent exists: the parent's
    real path plus the name; (3) otherwise the longest existing prefix resolved and the rest
    appended. A dangling symlink (at the end or in the middle) is followed to where a write
    would land, ``..`` is applied after the links before it, and a link loop is left
    unresolved rather than raising. Never raises.

    >>> resolve_real_path("/tmp/../tmp/x")
    '/tmp/x'
    """
    joined = path if os.path.isabs(path) else os.path.join(cwd or os.getcwd(), path)
    try:
        return os.path.realpath(joined, strict=True)
    except (OSError, ValueError):
        pass
    try:
        if os.path.islink(joined):
            # Dangling link: follow it; non-strict realpath walks the chain as far as it goes.
            return os.path.realpath(joined)
        parent, name = os.path.split(joined)
        if name not in ("", ".", ".."):
            return os.path.join(os.path.realpath(parent, strict=True), name)
    except (OSError, ValueError):
        pass
    try:
        return os.path.realpath(joined)
    except (OSError, ValueError):
        return os.path.normpath(joined)


def canonical_path(value: str, cwd: str | None = None, home: str | None = None) -> str:
    """Tilde expansion, then :func:`resolve_real_path`.

    >>> canonical_path("~/a/../b", home="/nonexistent-home")
    '/nonexistent-home/b'
    """
    return resolve_real_path(expand_tilde(value, home), cwd)


def is_within(path: str, directory: str) -> bool:
    """True when canonical ``path`` is ``directory`` or below it (no prefix confusion).

    >>> is_within("/ws-evil/x", "/ws"), is_within("/ws/x", "/ws")
    (False, True)
    """
    if path == directory:
        return True
    if directory == os.sep:
        return path.startswith(os.sep)
    return path.startswith(directory.rstrip(os.sep) + os.sep)


def looks_like_path(value: str) -> bool:
    """The defence-in-depth heuristic: strings that start like a filesystem path."""
    return value.startswith(_HEURISTIC_PREFIXES) or value in (".", "..")


def iter_strings(value: object) -> Iterator[str]:
    """Every string inside a JSON value (lists and objects walked)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from iter_strings(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from iter_strings(item)
