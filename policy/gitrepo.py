"""Where git really reads and writes when a tool runs it on a path."""

from __future__ import annotations

import os
import stat

from policy.paths import UnknownLocationError, expand_tilde, resolve_real_path
from sandbox_profiles.gitconfig import GitConfigError
from sandbox_profiles.gitconfig import parse_config as _parse
from sandbox_profiles.regular_file import UNTRUSTED, NotRegular, read_regular

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

# Config words that can move git elsewhere; a config without any of them is not parsed.
_GIT_CONFIG_WORDS = ("worktree", "hookspath", "include")


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
        try:
            fd = os.open(path, UNTRUSTED)
        except OSError:
            raise UnknownLocationError(f"has a {what} that cannot be read") from None
        try:
            data, after = read_regular(fd, limit)
        except NotRegular as exc:
            raise UnknownLocationError(f"has a {what} that is {exc.reason}") from None
        except OSError:
            raise UnknownLocationError(f"has a {what} that cannot be read") from None
        finally:
            os.close(fd)
        if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
            raise UnknownLocationError(f"has a {what} that changed while it was read")
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


def parse_config(text: str) -> list[tuple[str, str | None, str, str | None]]:
    """The config's variables as git reads them; what git would refuse raises
    :class:`UnknownLocationError`."""
    try:
        return _parse(text)
    except GitConfigError as exc:
        raise UnknownLocationError(str(exc)) from None
