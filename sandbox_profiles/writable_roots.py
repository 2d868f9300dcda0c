"""Whether a directory may be a writable root at all, judged whole: not only by what lies
below it (the guard's catalogue, matched inside every root) but by what it is and where it
lies.

A server may write anything in a writable root, its name included: a root that is a home
(or holds one) hands it the shell's rc files, ``~/.local/bin`` and every program's
settings; a root that is, or lies inside, a catalogue entry (``.git/hooks``, ``.vscode``,
``.claude``, ``.husky``) or a directory git takes for a repository makes everything in it
something a host tool runs, yet inside the root those files match nothing (``pre-commit``
in a root that is ``.git/hooks`` is just ``pre-commit``). Such a root is refused, never
mounted.

The root is judged as given (``..`` collapsed) and by its real path (links followed), and
the homes by path and by identity (a bind mount of a home, or its name in another case on a
file system that folds case, is still that home).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

from sandbox_profiles.autorun import (
    PROTECTED_NAMES,
    PROTECTED_PATTERNS,
    VENV_ENTRY,
    fold,
    is_git_dir,
    match,
    path_sibling,
)
from sandbox_profiles.ways import is_under

# Places a host tool keeps what it trusts: a file there makes it run a project's own file
# without asking (direnv loads an .envrc whose hash its allow list holds; mise a config
# file its trusted-configs names). Never a writable
# root, nor anything inside or on the way to one. Folded.
_TRUSTED: dict[tuple[str, ...], str] = {
    (".local", "share", "direnv"): "direnv's allow list: a file there loads an .envrc unasked",
    (".local", "state", "mise"): "mise's trusted configurations: a project's mise.toml unasked",
}

# The directories on the way to a catalogue entry of several components (``.hg`` of
# ``.hg/hgrc``, ``.cargo`` of ``.cargo/config.toml``), folded: a root that ends so holds
# the rest of the entry where the catalogue, matched below the root, would not see it. A
# virtualenv's ``bin`` is judged as the virtualenv it lies in.
_LEADING: dict[tuple[str, ...], str] = {}
for _name in (*PROTECTED_NAMES, *PROTECTED_PATTERNS):
    _parts = tuple(fold(p) for p in _name.split("/"))
    for _k in range(1, len(_parts)):
        if _parts[:_k] != ("bin",):
            _LEADING.setdefault(_parts[:_k], _name)
for _store in _TRUSTED:
    for _k in range(1, len(_store)):
        _LEADING.setdefault(_store[:_k], "/".join(_store))


def identity(path: str) -> tuple[int, int] | None:
    """(device, inode) of ``path``, links followed; None when it cannot be looked at."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _holders(path: str) -> list[str]:
    """``path`` and every directory holding it, innermost first."""
    found = [path]
    while path not in ("/", ""):
        path = os.path.dirname(path)
        found.append(path)
    return found


def home_problem(root: str, homes: Mapping[str, str]) -> str | None:
    """Why ``root`` (absolute) is refused as a home or a directory holding one (None: it
    is neither). ``homes``: each home directory, with whose it is (``"your home
    directory"``, ``"the home directory of alice"``).

    >>> home_problem("/home", {"/home/alice": "the home directory of alice"})
    'holds the home directory of alice (/home/alice)'
    >>> home_problem("/home/alice/work", {"/home/alice": "the home directory of alice"}) is None
    True
    """
    forms = dict.fromkeys((os.path.normpath(root), os.path.realpath(root)))
    mark = identity(root)
    for home, whose in homes.items():
        places = dict.fromkeys((os.path.normpath(home), os.path.realpath(home)))
        held = any(is_under(h, r) for h in places for r in forms)
        if not held and mark is not None:
            held = any(identity(p) == mark for p in _holders(os.path.realpath(home)))
        if not held:
            continue
        same = any(h == r for h in places for r in forms)
        same = same or (mark is not None and identity(home) == mark)
        return f"is {whose}" if same else f"holds {whose} ({home})"
    return _mounted_home(forms, homes)


def _mounted_home(forms: Iterable[str], homes: Mapping[str, str]) -> str | None:
    """Why a root whose real path is among ``forms`` holds a home through a mount below it
    (a bind mount of the home, or of a directory holding it, inside the root: bwrap mounts
    a root with what is mounted inside it). None: no mount below it shows one."""
    points = [p for p in mount_points() if any(is_under(p, r) and p != r for r in forms)]
    for point in points:
        mark = identity(point)
        if mark is None:
            continue
        for home, whose in homes.items():
            if any(identity(p) == mark for p in _holders(os.path.realpath(home))):
                return f"holds {whose} ({home}), mounted at {point}"
    return None


def mount_points(table: str = "/proc/self/mountinfo") -> list[str]:
    """Every mount point the kernel lists (its escapes undone); none where it lists none.

    >>> mount_points("/nonexistent")
    []
    """
    try:
        with open(table, "rb") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        fields = line.split()
        if len(fields) > 4:
            raw = re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), fields[4])
            found.append(os.fsdecode(raw))
    return found


def _catalogue_problem(path: str) -> str | None:
    """Why ``path`` (absolute, as given or real) is, or lies inside, a place host tools
    load or run from (None: it is not)."""
    parts = [p for p in path.split("/") if p]
    for i, name in enumerate(parts):
        here = "/" + "/".join(parts[: i + 1])
        where = "is" if i == len(parts) - 1 else f"lies in {here},"
        entry = match(parts[: i + 1], True, path_sibling(os.path.dirname(here)))
        if fold(name) == ".git" or is_git_dir(path_sibling(here)):
            return f"{where} a git directory (git runs its hooks, reads its config)"
        if entry is None and os.path.isfile(os.path.join(here, "pyvenv.cfg")):
            entry = VENV_ENTRY
        if entry is not None:
            return f"{where} {entry.match} ({entry.loaded_by})"
    folded = tuple(fold(p) for p in parts)
    for store, why in _TRUSTED.items():
        for i in range(len(folded) - len(store) + 1):
            if folded[i : i + len(store)] == store:
                at = "/" + "/".join(parts[: i + len(store)])
                where = "is" if i + len(store) == len(parts) else f"lies in {at},"
                return f"{where} {'/'.join(store)} ({why})"
    for k in range(1, len(folded) + 1):
        whole = _LEADING.get(folded[-k:])
        if whole is not None:
            return f"is the {'/'.join(parts[-k:])}/ of {whole}, which a host tool loads or runs"
    return None


def root_problem(
    root: str, homes: Mapping[str, str], places: Mapping[str, tuple[str, str]] | None = None
) -> str | None:
    """Why ``root`` (an absolute path, existing or not) may not be a writable root: it is a
    home or holds one (``homes``, see :func:`home_problem`), or it is or lies inside a
    catalogue entry, a git directory (a ``.git``, a bare repository, a worktree's private
    directory, the common directory of a worktree) or a virtualenv; None when it may be.

    ``places``: where the environment moves a directory the catalogue knows by its usual
    place in the home (``XDG_CONFIG_HOME``, the ``.config`` of fish, direnv, nvim, git): each
    path with its variable and that usual place. A root that is or holds one is refused as
    a home is; a root inside one is judged where the tools reading it take it to be
    (``$XDG_CONFIG_HOME/direnv`` as ``.config/direnv``).

    >>> root_problem("/nonexistent/p/.git/hooks", {})[:50]
    'lies in /nonexistent/p/.git, a git directory (git '
    >>> root_problem("/nonexistent/p/.VSCode", {})[:11]
    'is .vscode '
    >>> root_problem("/nonexistent/p/src", {"/nonexistent/h": "your home directory"}) is None
    True
    """
    why = home_problem(root, homes)
    if why is not None:
        return why
    places = places or {}
    why = home_problem(root, {p: f"your {u} (${v})" for p, (v, u) in places.items()})
    if why is not None:
        return why
    for form in dict.fromkeys((os.path.normpath(root), os.path.realpath(root))):
        why = _catalogue_problem(form)
        if why is not None:
            return why
        for place, (variable, usual) in places.items():
            for at in dict.fromkeys((os.path.normpath(place), os.path.realpath(place))):
                if is_under(form, at) and form != at:
                    seen = f"/{usual}/{os.path.relpath(form, at)}"
                    why = _catalogue_problem(seen)
                    if why is not None:
                        return f"is {seen[1:]} to the tools that read ${variable} ({at}): {why}"
    return None
