"""Canonical filesystem paths for policy decisions.

Every path the policy sees goes through :func:`canonical_path`: tilde expansion, then a
symlink-aware real path. Containment is then a plain string test on canonical forms. A path
given to git may lead git elsewhere still: :func:`git_locations` says where.
"""

from __future__ import annotations

import os
import stat
import string
from collections.abc import Iterator

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
    destination). ``tests/test_paths.py`` checks the result against the tier-by-tier
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


# -- where git really reads and writes --------------------------------------------------------
#
# A path handed to git is not always where git works. ``<dir>/.git`` may be a file naming the
# git directory elsewhere (``gitdir: <path>``, as linked worktrees and submodules write it) or
# a symlink; ``<dir>`` may itself be a git directory (a bare repository); a git directory may
# name a common directory elsewhere (its ``commondir`` file, where config, hooks, objects and
# refs live); a worktree's administrative directory names its working tree (its ``gitdir``
# file); the repository's config may move the working tree (``core.worktree``) or the hooks
# (``core.hooksPath``), or read other config files (``include.path``, ``includeIf.*.path``);
# ``objects/info/alternates`` borrows objects from other repositories; and any top-level
# entry of a git directory may be a symlink out of it.
#
# `git_locations` finds those places with plain file reads (no git, no shell), bounded in
# bytes per file, in files per path and in hops from one repository to another. Whatever it
# cannot know for certain (an unreadable or malformed pointer, a link loop, a pointer to
# something that is not a directory, too many hops) raises `UnknownLocationError`, and the
# engine refuses the call.
#
# Not modelled: git's search of parent directories (the bundled git server opens exactly the
# path it is given), symlinks below the top level of a git directory, and environment
# variables such as ``GIT_DIR`` (the agent cannot set them).

_GIT_POINTER_BYTES = 4096  # a .git file, a commondir or gitdir file, an alternates list
_GIT_CONFIG_BYTES = 65536  # one config file
_GIT_MAX_FILES = 24  # files and directories examined for one path
_GIT_MAX_HOPS = 3  # repositories reached from another (a worktree's, a core.worktree)
_GIT_MAX_ENTRIES = 1000  # entries of one git directory looked at for symlinks

_GIT_KEY_CHARS = frozenset(string.ascii_letters + string.digits + "-")
_GIT_SPACE = " \t\n\r\f\v"
# Config words that can move git elsewhere; a config without any of them is not parsed.
_GIT_CONFIG_WORDS = ("worktree", "hookspath", "include")
ConfigEntry = tuple[str, str | None, str, str | None]


def git_locations(path: str) -> tuple[str, ...]:
    """The canonical places, other than canonical ``path`` itself, where git reads or writes
    when a tool runs it on ``path`` (see the comment above); raises
    :class:`UnknownLocationError` when they cannot be known. A path that is no repository
    gives ``()`` (git refuses it and touches nothing).

    >>> git_locations("/nonexistent/dir")
    ()
    """
    if not os.path.isabs(path):
        raise UnknownLocationError("is not an absolute path")
    walk = _Walk()
    walk.repository(path, 0)
    walk.found.pop(path, None)
    return tuple(walk.found)


class _Walk:
    def __init__(self) -> None:
        self.found: dict[str, None] = {}  # an ordered set
        self.files = 0
        self.seen: set[tuple[str, str]] = set()

    def _first(self, kind: str, path: str) -> bool:
        """True the first time ``(kind, path)`` is asked: each place is examined once."""
        key = (kind, path)
        if key in self.seen:
            return False
        self.seen.add(key)
        return True

    def _spend(self) -> None:
        self.files += 1
        if self.files > _GIT_MAX_FILES:
            raise UnknownLocationError(
                f"needs more than {_GIT_MAX_FILES} files examined to find where git works"
            )

    def add(self, path: str) -> None:
        self.found[path] = None

    # -- repositories and git directories ----------------------------------------------------

    def repository(self, directory: str, hops: int) -> None:
        """git opened at ``directory``: its ``.git`` (a directory, a symlink or a ``gitdir:``
        file), or ``directory`` itself when it is a git directory (a bare repository)."""
        if not self._first("repository", directory):
            return
        if hops > _GIT_MAX_HOPS:
            raise UnknownLocationError(
                f"its git directory is reached through more than {_GIT_MAX_HOPS} pointers"
            )
        dotgit = real = os.path.join(directory, ".git")  # ``directory`` is canonical
        self._spend()
        try:
            st: os.stat_result | None = os.lstat(dotgit)
            if st is not None and stat.S_ISLNK(st.st_mode):
                st = os.stat(dotgit)
                real = resolve_real_path(dotgit)
        except (FileNotFoundError, NotADirectoryError):
            st = None  # none, or a dangling symlink: git finds no repository there
        except (OSError, ValueError):
            raise UnknownLocationError(
                "has a .git entry that cannot be examined (a link loop, or no permission)"
            ) from None
        if st is not None and stat.S_ISREG(st.st_mode):
            target = _pointer(
                self.read(dotgit, _GIT_POINTER_BYTES, ".git file"), "gitdir: ", ".git file"
            )
            for git_dir in _places(directory, target):
                if not os.path.isdir(git_dir):
                    raise UnknownLocationError(
                        "has a .git file that names something other than a directory"
                    )
                self.git_dir(git_dir, directory, hops)
            return  # git uses the file's git directory, never ``directory`` itself
        if st is not None and stat.S_ISDIR(st.st_mode):
            self.git_dir(real, directory, hops)
        elif st is not None:
            raise UnknownLocationError("has a .git entry that is neither a directory nor a file")
        # No .git, or one git may find invalid: ``directory`` itself as a git directory.
        self._spend()
        if os.path.lexists(os.path.join(directory, "HEAD")):
            self.git_dir(directory, directory, hops)

    def git_dir(self, git_dir: str, worktree: str, hops: int) -> None:
        if not self._first("git dir", git_dir):
            return
        self.add(git_dir)
        names = self.entries(git_dir)
        commons = [git_dir]
        if "commondir" in names:
            text = self.read(
                os.path.join(git_dir, "commondir"), _GIT_POINTER_BYTES, "commondir file"
            )
            commons = list(_places(git_dir, _pointer(text, "", "commondir file")))
            for common in commons:
                if not os.path.isdir(common):
                    raise UnknownLocationError(
                        "has a commondir file that names something other than a directory"
                    )
            if "gitdir" in names:  # a linked worktree's administrative directory
                text = self.read(os.path.join(git_dir, "gitdir"), _GIT_POINTER_BYTES, "gitdir file")
                dotgit = _pointer(text, "", "gitdir file")
                for tree in _places(git_dir, os.path.dirname(dotgit) or "."):
                    self.add(tree)
                    self.repository(tree, hops + 1)
        configs = [os.path.join(git_dir, n) for n in ("config", "config.worktree") if n in names]
        for common in commons:
            if common != git_dir:
                self.add(common)
                common_names = self.entries(common)
                configs += [
                    os.path.join(common, n)
                    for n in ("config", "config.worktree")
                    if n in common_names
                ]
            self.alternates(os.path.join(common, "objects"))
        for config in configs:
            self.config(config, git_dir, worktree, hops)

    def entries(self, directory: str) -> frozenset[str]:
        """The names in a git directory; the real place of each symlink among them is a
        place git reaches."""
        self._spend()
        names = []
        links = []
        try:
            with os.scandir(directory) as listing:
                for entry in listing:
                    names.append(entry.name)
                    if len(names) > _GIT_MAX_ENTRIES:
                        raise UnknownLocationError(
                            f"has a git directory of more than {_GIT_MAX_ENTRIES} entries"
                        )
                    if entry.is_symlink():
                        links.append(entry.path)
        except OSError:
            raise UnknownLocationError("has a git directory that cannot be listed") from None
        for link in links:
            self.add(resolve_real_path(link))
        return frozenset(names)

    # -- config, alternates ---------------------------------------------------------------------

    def config(self, path: str, git_dir: str, worktree: str, hops: int) -> None:
        if not self._first("config", path):
            return
        text = self.read(path, _GIT_CONFIG_BYTES, "git config")
        if text is None:
            return
        lowered = text.lower()
        if not any(word in lowered for word in _GIT_CONFIG_WORDS):
            return
        for section, subsection, key, value in parse_config(text):
            if value is None:
                continue
            if section == "core" and subsection is None and key == "worktree":
                for tree in _places(git_dir, value, tilde=True):
                    self.add(tree)
                    self.repository(tree, hops + 1)
            elif section == "core" and subsection is None and key == "hookspath":
                for base in dict.fromkeys((worktree, git_dir)):
                    for hooks in _places(base, value, tilde=True):
                        self.add(hooks)
            elif key == "path" and (
                (section == "include" and subsection is None)
                or (section == "includeif" and subsection is not None)
            ):
                for included in _places(os.path.dirname(path), value, tilde=True):
                    self.add(included)
                    if os.path.isfile(included):
                        self.config(included, git_dir, worktree, hops)

    def alternates(self, objects: str) -> None:
        """``objects/info/alternates``: object directories read as this repository's own,
        and theirs in turn."""
        if not self._first("alternates", objects):
            return
        text = self.read(
            os.path.join(objects, "info", "alternates"), _GIT_POINTER_BYTES, "alternates"
        )
        for line in (text or "").splitlines():
            if not line or line.startswith("#"):
                continue
            if line.startswith('"'):
                raise UnknownLocationError("has an objects/info/alternates entry in quotes")
            for other in _places(objects, line):
                self.add(other)
                self.alternates(other)

    # -- reading ----------------------------------------------------------------------------

    def read(self, path: str, limit: int, what: str) -> str | None:
        """A regular file's text; None when there is none. Never opens anything else (a
        FIFO, a device), never reads more than ``limit`` bytes."""
        self._spend()
        try:
            before = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except (OSError, ValueError):
            raise UnknownLocationError(f"has a {what} that cannot be read") from None
        if not stat.S_ISREG(before.st_mode):
            raise UnknownLocationError(f"has a {what} that is not a regular file")
        if before.st_size > limit:
            raise UnknownLocationError(f"has a {what} larger than {limit} bytes")
        flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(path, flags | getattr(os, "O_NOCTTY", 0))
        except OSError:
            raise UnknownLocationError(f"has a {what} that cannot be read") from None
        try:
            after = os.fstat(fd)
            if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
                raise UnknownLocationError(f"has a {what} that changed while it was read")
            data = os.read(fd, limit + 1)
        except OSError:
            raise UnknownLocationError(f"has a {what} that cannot be read") from None
        finally:
            os.close(fd)
        if len(data) > limit:
            raise UnknownLocationError(f"has a {what} larger than {limit} bytes")
        return os.fsdecode(data)


def _pointer(text: str | None, prefix: str, what: str) -> str:
    """The one path a pointer file holds (after ``prefix``), as git reads it: trailing line
    ends dropped, anything else is part of the path.

    >>> _pointer("gitdir: ../x/.git\\n", "gitdir: ", ".git file")
    '../x/.git'
    """
    if text is None:
        raise UnknownLocationError(f"has a {what} that vanished while it was read")
    line = text.rstrip("\r\n")
    target = line[len(prefix) :]
    if not line.startswith(prefix) or not target or "\n" in target or "\0" in target:
        raise UnknownLocationError(f"has a malformed {what}")
    return target


def _places(base: str, value: str, tilde: bool = False) -> tuple[str, ...]:
    """Where ``value``, relative to ``base`` or absolute, really lands; both readings when
    they differ: the kernel's (``..`` after the symlinks before it, as git does) and a
    lexical one (``..`` first, as GitPython does).

    >>> _places("/nonexistent/a", "../b/./c")
    ('/nonexistent/b/c',)
    """
    values = [value]
    if tilde and value.startswith("~"):
        values.append(expand_tilde(value))
    found: dict[str, None] = {}
    for v in values:
        joined = os.path.join(base, v)
        found[resolve_real_path(joined)] = None
        found[resolve_real_path(os.path.normpath(joined))] = None
    return tuple(found)


def parse_config(text: str) -> list[ConfigEntry]:
    """``(section, subsection, key, value)`` of every variable of a git config file, as git
    reads it: section and key lower-cased, ``[a.b]`` read as section ``a`` subsection ``b``,
    a key without ``=`` has the value None. What git would refuse to read raises
    :class:`UnknownLocationError`.

    >>> parse_config('[core]\\n\\tWorkTree = "../a b" ; c\\n[includeIf "gitdir:x"] path=y')
    [('core', None, 'worktree', '../a b'), ('includeif', 'gitdir:x', 'path', 'y')]
    """
    text = text.replace("\r\n", "\n")
    entries: list[ConfigEntry] = []
    section: tuple[str, str | None] = ("", None)  # keys before any header: git reads them
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in _GIT_SPACE:
            i += 1
        elif c in "#;":
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
        elif c == "[":
            section, i = _header(text, i + 1)
        elif c in _GIT_KEY_CHARS and c.isalpha():
            j = i
            while j < n and text[j] in _GIT_KEY_CHARS:
                j += 1
            key = text[i:j].lower()
            while j < n and text[j] in " \t":
                j += 1
            if j >= n or text[j] == "\n":
                entries.append((*section, key, None))
                i = j
            elif text[j] == "=":
                value, i = _value(text, j + 1)
                entries.append((*section, key, value))
            else:
                raise _bad_config()
        else:
            raise _bad_config()
    return entries


def _bad_config() -> UnknownLocationError:
    return UnknownLocationError("has a git config that git cannot read")


def _header(text: str, i: int) -> tuple[tuple[str, str | None], int]:
    """``[name]``, ``[name "sub"]`` or ``[name.sub]`` from just after the ``[``."""
    n = len(text)
    j = i
    while j < n and (text[j] in _GIT_KEY_CHARS or text[j] == "."):
        j += 1
    name = text[i:j].lower()
    if not name or j >= n:
        raise _bad_config()
    subsection: str | None = None
    if text[j] in _GIT_SPACE and text[j] != "\n":
        while j < n and text[j] in _GIT_SPACE and text[j] != "\n":
            j += 1
        if j >= n or text[j] != '"':
            raise _bad_config()
        j += 1
        chars = []
        while True:
            if j >= n or text[j] == "\n":
                raise _bad_config()
            if text[j] == '"':
                break
            if text[j] == "\\":
                j += 1
                if j >= n or text[j] == "\n":
                    raise _bad_config()
            chars.append(text[j])
            j += 1
        subsection = "".join(chars)
        j += 1
    elif "." in name:
        name, subsection = name.split(".", 1)
    if j >= n or text[j] != "]":
        raise _bad_config()
    return (name, subsection), j + 1


_GIT_ESCAPES = {"t": "\t", "b": "\b", "n": "\n", "\\": "\\", '"': '"'}


def _value(text: str, i: int) -> tuple[str, int]:
    """A value from just after the ``=`` to the end of its (possibly continued) line:
    quotes removed, escapes applied, comments and surrounding blanks dropped."""
    n = len(text)
    out: list[str] = []
    keep = 0  # length of ``out`` without its trailing unquoted blanks
    quoted = False
    while i < n:
        c = text[i]
        i += 1
        if c == "\n":
            break
        if c in _GIT_SPACE and not quoted:
            if out:
                out.append(" ")  # as git: each unquoted blank inside a value is a space
            continue
        if c in "#;" and not quoted:
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
            break
        if c == "\\":
            if i >= n:
                raise _bad_config()
            escaped = text[i]
            i += 1
            if escaped == "\n":
                continue
            if escaped not in _GIT_ESCAPES:
                raise _bad_config()
            out.append(_GIT_ESCAPES[escaped])
        elif c == '"':
            quoted = not quoted
        else:
            out.append(c)
        keep = len(out)
    if quoted:
        raise _bad_config()
    return "".join(out[:keep]), i
