"""Canonical filesystem paths for policy decisions.

Every path the policy sees goes through :func:`canonical_path`: tilde expansion, then a
symlink-aware real path. Containment is then a plain string test on canonical forms
(:func:`is_under`, the sandbox's own, re-exported here). A path given to git may lead git
elsewhere still: :func:`policy.gitrepo.git_locations` says where.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from sandbox_profiles.ways import is_under as is_under

# Roots whose contents a tool must never be pointed at, whatever the compiled rules say.
SYSTEM_ROOTS: tuple[str, ...] = ("/proc", "/sys", "/dev", "/etc", "/boot")

_HEURISTIC_PREFIXES = ("/", "./", "../", "~")


class UnknownLocationError(Exception):
    """Where an access to a path would really land cannot be known (a git repository whose
    ``.git`` file is malformed, say). The message says what the path has or is ("has a
    malformed .git file"); the policy refuses the call with it, so it never quotes a path."""


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

    One non-strict ``realpath`` walk is all three tiers at once: it resolves each existing
    component (following links, dangling ones too) and appends the missing rest as it is.
    On Linux the kernel resolves the common cases first, in three system calls and no
    Python loop: an existing path, or a new name in an existing directory (a call's
    destination). ``tests/unit/policy/test_paths.py`` checks the result against the tier-by-tier
    reading over a table of links, loops and missing paths.

    >>> resolve_real_path("/tmp/../tmp/x")
    '/tmp/x'
    """
    joined = path if os.path.isabs(path) else os.path.join(cwd or os.getcwd(), path)
    if _O_PATH:
        real = _kernel_real_path(joined)
        if real is not None:
            return real
        parent, name = os.path.split(joined)
        if name not in ("", ".", "..") and not os.path.lexists(joined):
            real = _kernel_real_path(parent)
            if real is not None:
                return os.path.join(real, name)
    try:
        return os.path.realpath(joined)
    except (OSError, ValueError):  # a NUL byte; a link that vanished while being read
        return os.path.normpath(joined)


_O_PATH = getattr(os, "O_PATH", 0) if os.path.isdir("/proc/self/fd") else 0


def _kernel_real_path(path: str) -> str | None:
    """Where the kernel resolves an existing ``path`` to: opened with ``O_PATH`` (which
    reads nothing and opens no device), then its ``/proc/self/fd`` link. None if it
    does not exist or cannot be read that way."""
    try:
        fd = os.open(path, _O_PATH | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    finally:
        os.close(fd)
    # Not "(unreachable)/..." (outside this root), nor a file removed meanwhile.
    if not real.startswith("/") or real.endswith(" (deleted)"):
        return None
    return real


def canonical_path(value: str, cwd: str | None = None, home: str | None = None) -> str:
    """Tilde expansion, then :func:`resolve_real_path`.

    >>> canonical_path("~/a/../b", home="/nonexistent-home")
    '/nonexistent-home/b'
    """
    return resolve_real_path(expand_tilde(value, home), cwd)


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


# -- where git really reads and writes --------------------------------------------------------
#
