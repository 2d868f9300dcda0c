"""What a writable root holds, before a server starts, that host tools load or run: each
catalogue entry (``sandbox_profiles.autorun``), what they link to, and every file the git
configurations in play (the user's, the repositories', and what they include) make git read
or run. Shown read-only in the sandbox, or guarded when not there yet."""

from __future__ import annotations

import functools
import os
import stat
import sys
from collections.abc import Callable, Sequence
from dataclasses import field

from sandbox_profiles.autorun import GIT_DIR_ENTRY, GIT_FILE_ENTRY, find, fold, match
from sandbox_profiles.autorun_names import LEFTHOOK_CONFIGS, expand
from sandbox_profiles.direnv import dotenv_unasked, envrc_paths
from sandbox_profiles.gitconfig import (
    UnreadableConfig,
    git_config_includes,
    git_config_paths,
    host_git_configs,
)
from sandbox_profiles.hardlinks import other_names
from sandbox_profiles.lefthook import lefthook_paths
from sandbox_profiles.memory_imports import imported, imports_of
from sandbox_profiles.mise_env import configs_in, mise_paths, tool_versions_paths
from sandbox_profiles.records import mutable
from sandbox_profiles.ways import is_under


@mutable
class Protection:
    """What a writable root holds that host tools load or run, as it is before a server
    starts: paths to show read-only (with why), and paths that must not come into being."""

    read_only: dict[str, str]
    guarded: list[str]
    # Of ``read_only``, what the catalogue names (by name or by structure): the guard
    # quarantines whatever takes such a place. The rest (what links and git configurations
    # point at) is protected by where it is, so the way to it must stay as it is.
    by_name: set[str] = field(default_factory=set)
    # The links followed to get there, as the host names them: the way through each must
    # stay too (the link itself, and every symlink its target passes through).
    via: list[str] = field(default_factory=list)
    # Git configurations that are there but could not be read as git reads them (with
    # why): what they make git run is unknown, so every writable root is read-only.
    unreadable: list[str] = field(default_factory=list)
    # A repository's own .git/config, left writable where the guard runs: git changes it
    # by writing a new file renamed over it (a remote added, a URL set), which a read-only
    # mount refuses (EBUSY). The guard checks each change as git reads it and puts the
    # user's back when anything but what git writes for a remote or branch changed.
    by_content: list[str] = field(default_factory=list)


# How many entries inside one catalogue directory are looked at for symlinks.
_LINK_SCAN_LIMIT = 5000


def existing(writable: Sequence[str], home: str, xdg_config: str | None) -> Protection:
    """Every catalogue entry in ``writable``, and what entries point at: the target of a
    symlink among them or inside them (a hooks directory whose ``pre-commit`` links to
    ``scripts/pre-commit``), what git configurations (the user's, and the repositories')
    include, take hooks from or run, what a present ``.envrc`` (in a root or above one)
    makes direnv load, when that lies in a writable root; and every other name (hard link)
    in a root of a file so protected."""
    places = _Places(writable)
    readers = _Readers(loaders=_loaders_outside(writable, home))
    for top in _enclosing(writable):
        # A repository holding a root: its configurations may name places in the root.
        readers.configs.append((os.path.join(top, ".git", "config"), [top]))
        readers.lefthooks += [top + name for name in _LEFTHOOK_NAMES]
    for root in writable:
        _take_root(places, readers, root, home)
    tops = readers.tops
    tops += [t for t in _linked_worktrees(tops) if places.inside(t) and t not in tops]
    if home:
        for config in host_git_configs(home, xdg_config):
            readers.configs.append((config, tops))
            places.protect(config, "the user's git configuration")  # a link into a root
    _read_git_configs(places, readers.configs, home)
    for config in readers.lefthooks:
        try:
            for path in lefthook_paths(config, home):
                places.protect(path, f"named by the lefthook configuration {config}")
        except UnreadableConfig as exc:
            places.found.unreadable.append(str(exc))
    found = places.found
    _loaded_by_files(found, places.protect, readers.loaders, writable)
    _other_names_of_home_files(found, writable, home, xdg_config)
    found.unreadable += _dotenv_unasked(writable, home, xdg_config)
    if found.unreadable:
        return _fail_closed(writable, found.unreadable)
    return found


# The largest repository configuration the guard keeps, to check changes against and put
# back (``launcher.guard.gitmade``).
CHANGED_BY_GIT_LIMIT = 1 << 20


def changed_by_git(path: str) -> bool:
    """Whether a repository's ``.git/config`` is left for git to change, checked by the
    guard (inotify: Linux): a regular file of one name, small enough to keep a copy of."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_size <= CHANGED_BY_GIT_LIMIT


class _Places:
    """What is protected so far (:class:`Protection`), and how a path is added to it."""

    def __init__(self, writable: Sequence[str]) -> None:
        self.writable = writable
        self.found = Protection({}, [])
        self.seen: set[str] = set()

    def inside(self, path: str) -> bool:
        return any(is_under(path, r) for r in self.writable)

    def protect(self, path: str, reason: str) -> None:
        """``path`` read-only when there (what a link there leads to, the link kept as the
        way), guarded when not; outside every root, what it links to in one."""
        found = self.found
        if path in self.seen:
            return
        if not self.inside(path):
            # Outside every root, but maybe a link into one (a dotfile of the home linking
            # into the workspace): what it leads to is protected, the way through kept.
            real = os.path.realpath(path)
            if real != path and self.inside(real):
                self.seen.add(path)
                found.via.append(path)
                self.protect(real, f"{reason}, through the link {path}")
            return
        self.seen.add(path)
        if os.path.islink(path):
            found.via.append(path)
            self.protect(os.path.realpath(path), f"{reason}, through the link {path}")
        elif os.path.lexists(path):
            found.read_only.setdefault(path, reason)
            if os.path.isdir(path):
                self._links_inside(path, reason)
        elif path not in found.guarded:
            found.guarded.append(path)

    def _links_inside(self, directory: str, reason: str) -> None:
        count = 0
        for current, subdirs, files in os.walk(directory):
            for name in [*subdirs, *files]:
                count += 1
                path = os.path.join(current, name)
                if os.path.islink(path):
                    self.found.via.append(path)
                    self.protect(os.path.realpath(path), f"{reason}, through the link {path}")
            if count > _LINK_SCAN_LIMIT:
                return


@mutable
class _Readers:
    """What the catalogue entries found make worth reading: git configurations (with the
    worktrees they apply to), the tops of repositories, lefthook configurations, and the
    readers of what other files load."""

    loaders: list[Loader]
    configs: list[tuple[str, list[str]]] = field(default_factory=list)
    tops: list[str] = field(default_factory=list)
    lefthooks: list[str] = field(default_factory=list)


def _take_root(places: _Places, readers: _Readers, root: str, home: str) -> None:
    """Each catalogue entry of ``root`` protected (a link's target, the link kept as the
    way), and what it makes worth reading noted in ``readers``."""
    for path, entry in find(root):
        rel = os.path.relpath(path, root)
        if os.path.islink(path):
            # The link cannot be mounted (the guard knows it by identity); its target is.
            places.found.via.append(path)
            places.protect(os.path.realpath(path), f"always protected: {rel}, through its link")
        elif entry.match == ".git/config" and changed_by_git(path):
            places.found.by_content.append(path)
            places.found.by_name.add(path)
        else:
            places.protect(path, f"always protected: {rel}")
            places.found.by_name.add(path)
        name = os.path.basename(path)
        if ("/" + rel.lower()).endswith(_LEFTHOOK_NAMES):
            readers.lefthooks.append(path)
        readers.loaders += _readers(path, entry.match, home)
        tops = readers.tops
        if "/.git/" in path:
            top = path.split("/.git/", 1)[0]
            if top not in tops:
                tops.append(top)
            if entry.match == ".git/config" or name == "config.worktree":
                readers.configs.append((path, [top, *_linked_worktrees([top])]))
        elif entry is GIT_DIR_ENTRY and name in ("config", "config.worktree"):
            readers.configs.append((path, [os.path.dirname(path)]))
            tops.append(os.path.dirname(path))
        elif entry is GIT_FILE_ENTRY:
            tops.append(os.path.dirname(path))  # a linked worktree's top


def _read_git_configs(places: _Places, configs: list[tuple[str, list[str]]], home: str) -> None:
    """What each configuration, and each file one includes (as git reads them: to a depth
    of 10), makes git read or run, protected."""
    pending = [(config, worktrees, 0) for config, worktrees in configs]
    parsed: set[str] = set()
    while pending:
        config, worktrees, depth = pending.pop()
        if config in parsed:
            continue
        parsed.add(config)
        try:
            for path in git_config_paths(config, home, worktrees):
                places.protect(path, f"named by the git config {config}")
            if depth < _INCLUDE_DEPTH:
                pending += [(i, worktrees, depth + 1) for i in git_config_includes(config, home)]
        except UnreadableConfig as exc:
            places.found.unreadable.append(str(exc))


# What a file makes a host tool load: (what loads it, the reader of the file, the file).
Loader = tuple[str, Callable[[str], list[tuple[str, str]]], str]


def _loaded_by_files(
    found: Protection,
    protect: Callable[[str, str], None],
    loaders: Sequence[Loader],
    writable: Sequence[str],
) -> None:
    """What each ``.envrc`` and mise configuration loads and each agent instruction file
    imports, protected; then the other names (hard links) in the roots of every file
    protected so far. What cannot be known is said in ``unreadable``."""
    seen: set[tuple[str, str]] = set()
    for label, reader, path in loaders:
        if (label, path) in seen:
            continue
        seen.add((label, path))
        try:
            for place, why in reader(path):
                protect(place, f"{label}: {why}")
        except UnreadableConfig as exc:
            found.unreadable.append(str(exc))
    try:
        found.read_only.update(other_names(found.read_only, writable))
    except UnreadableConfig as exc:
        found.unreadable.append(str(exc))


def _other_names_of_home_files(
    found: Protection, writable: Sequence[str], home: str, xdg_config: str | None
) -> None:
    """The other names (hard links) in the roots of the user's own files that the catalogue
    names (a ``~/.gitconfig`` hard-linked into a dotfiles repository in the workspace:
    writing through that name changes the user's), protected as theirs would be."""
    if not home or found.unreadable:
        return
    mine = {p: "the user's own" for p in _home_entries(home, xdg_config)}
    mine = {p: why for p, why in mine.items() if not any(is_under(p, r) for r in writable)}
    try:
        found.read_only.update(
            {n: why for n, why in other_names(mine, writable).items() if n not in mine}
        )
    except UnreadableConfig as exc:
        found.unreadable.append(str(exc))


def _home_entries(home: str, xdg_config: str | None) -> list[str]:
    """The catalogue's entries at the top of the user's home and of its configuration
    directory (``.bashrc``, ``.gitconfig``, ``.ssh``, ``.config/git``...), and the git
    configurations in play."""
    config = xdg_config or os.path.join(home, ".config")
    found = list(host_git_configs(home, xdg_config))
    for base, lead in ((home, ()), (config, (".config",))):
        try:
            names = sorted(os.listdir(base))
        except OSError:
            continue
        has = set(names).__contains__
        for name in names:
            path = os.path.join(base, name)
            entry = match([*lead, name], os.path.isdir(path) and not os.path.islink(path), has)
            if entry is not None and not os.path.islink(path):
                found.append(path)
    return found


# The reason of a file an agent instruction file imports: an approved call may write it, as
# it may write the instruction file (launcher.relay.approving.grants).
INSTRUCTIONS = "always protected: an agent instruction file"

# The reason of every writable root made read-only because a configuration could not be
# read (the launcher says so at start).
FAIL_CLOSED = (
    "read-only: a configuration that names what git, its hooks or direnv run cannot be read"
)


def _fail_closed(writable: Sequence[str], unreadable: list[str]) -> Protection:
    """A git, lefthook or direnv configuration that cannot be read may name any path as a
    hook, an include or a program git runs (and a directory where a hard link of a protected
    file could be cannot be searched): every writable root is shown read-only, and nothing
    else is needed (a server that can write nothing plants nothing)."""
    why = f"{FAIL_CLOSED} as they read it, so what it makes them run is unknown (" + (
        "; ".join(unreadable) + ")"
    )
    roots = [r for r in dict.fromkeys(writable) if os.path.isdir(r)]
    return Protection({root: why for root in roots}, [], unreadable=list(unreadable))


_INCLUDE_DEPTH = 10  # git's own limit on nested includes
_LEFTHOOK_NAMES = tuple("/" + name for name in expand(LEFTHOOK_CONFIGS))


def _enclosing(writable: Sequence[str]) -> list[str]:
    """The tops of the repositories (a ``.git`` there) above each root, outside every
    root: git and lefthook read their configurations when the user commits there, and a
    relative place they name may lie in the root."""
    tops: list[str] = []
    for root in writable:
        current = os.path.dirname(os.path.normpath(root))
        while True:
            if os.path.lexists(os.path.join(current, ".git")) and current not in tops:
                tops.append(current)
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
    return tops


def _dotenv_unasked(writable: Sequence[str], home: str, xdg_config: str | None) -> list[str]:
    """Why no ``.env`` in a root can be protected: direnv loads every one below a place
    that holds or lies in a root, without asking (its names are not the catalogue's)."""
    try:
        places = dotenv_unasked(home, xdg_config) if home else []
    except UnreadableConfig as exc:
        return [str(exc)]
    return [
        f"{config}: direnv loads every .env below {place} without asking (load_dotenv with a "
        "whitelist)"
        for place, config in places
        if any(is_under(root, place) or is_under(place, root) for root in writable)
    ]


def _loaders_outside(writable: Sequence[str], home: str) -> list[Loader]:
    """The readers of the files outside the roots that load from them: ``.envrc`` and
    instruction files above a root, the user's own memory files (loaded in every
    session)."""
    direnv = functools.partial(envrc_paths, home=home)
    memory = functools.partial(imported, home=home)
    above = _enclosing_named(writable, ("CLAUDE.md", "CLAUDE.local.md", "GEMINI.md"))
    mine = [os.path.join(home, ".claude", "CLAUDE.md"), os.path.join(home, ".gemini", "GEMINI.md")]
    above += [p for p in mine if home and os.path.isfile(p)]
    return [
        *(("loaded by direnv", direnv, e) for e in _enclosing_named(writable, (".envrc",))),
        *((INSTRUCTIONS, memory, p) for p in above),
    ]


def _readers(path: str, match: str, home: str) -> list[Loader]:
    """The readers of what a catalogue entry found in a root loads: an ``.envrc`` (from
    where it is and, a link, where it leads), an instruction file's imports, mise's
    configurations and ``.tool-versions``."""
    name = fold(os.path.basename(path))
    if name == ".envrc" and os.path.isfile(path):
        direnv = functools.partial(envrc_paths, home=home)
        return [("loaded by direnv", direnv, p) for p in (path, os.path.realpath(path))]
    if imports_of(name) and os.path.isfile(path):
        return [(INSTRUCTIONS, functools.partial(imported, home=home), path)]
    if match == ".tool-versions" and os.path.isfile(path):
        return [("loaded by mise", tool_versions_paths, path)]
    if "mise" not in match:
        return []
    if os.path.isdir(path) and not os.path.islink(path):
        return [("loaded by mise", mise_paths, p) for p in configs_in(path)]
    if path.endswith(".toml") and os.path.isfile(path):
        return [("loaded by mise", mise_paths, path)]
    return []


def _enclosing_named(writable: Sequence[str], names: Sequence[str]) -> list[str]:
    """The files of these names above each root, outside every root (``.envrc``, which
    direnv loads on ``cd`` into the root; ``CLAUDE.md``, which Claude Code loads in every
    directory below): a relative place they load may lie in the root. Each as found and,
    a link, where it leads."""
    found: list[str] = []
    for root in writable:
        current = os.path.dirname(os.path.normpath(root))
        while True:
            for name in names:
                path = os.path.join(current, name)
                if os.path.isfile(path) and not any(is_under(path, r) for r in writable):
                    found += [path, os.path.realpath(path)]
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
    return found


def _linked_worktrees(tops: Sequence[str]) -> list[str]:
    """The tops of the worktrees a repository lists (``.git/worktrees/*/gitdir`` names each
    one's ``.git`` file): git runs a relative ``core.hooksPath`` there too."""
    found: list[str] = []
    for top in tops:
        listing = os.path.join(top, ".git", "worktrees")
        try:
            names = os.listdir(listing)
        except OSError:
            continue
        for name in names:
            try:
                with open(os.path.join(listing, name, "gitdir"), "rb") as handle:
                    gitfile = os.fsdecode(handle.read(4096).strip())  # a path: its bytes
            except OSError:
                continue
            if os.path.isabs(gitfile):
                found.append(os.path.dirname(os.path.normpath(gitfile)))
    return found
