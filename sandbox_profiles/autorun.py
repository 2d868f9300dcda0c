"""What host tools load or run from a directory: the catalogue the guard neutralises.

A writable root is shared with the host. Whatever a sandboxed server writes there, the
user's own tools may later load or run without asking: ``git status`` in it, ``cd`` into it
with direnv, opening it in an editor or an AI client, ``npm install``, activating a
virtualenv. Every entry below names such a file by its place (a path suffix matched at any
depth, case-insensitively, since some filesystems fold case), by a name pattern, or by the
structure git and Python recognise (a directory git takes for a repository whatever it is
called; a virtualenv); the names, by tool family, with their sources, are the data of
``sandbox_profiles.autorun_names``. Each is neutralised the same way: present when a
server starts, it is mounted read-only; appearing later, it is moved out of the root
before the call that made it returns; at the end of a session a sweep checks again.

What the user runs on purpose (``make``, ``npm run``, ``pytest``) runs the project's own
code, which is the agent's work product: that is not in the catalogue.
"""

from __future__ import annotations

import fnmatch
import os
import unicodedata
from collections.abc import Callable, Iterator, Sequence

from sandbox_profiles.autorun_names import INSTRUCTION_NAMES, NAMES, SUFFIXES, expand
from sandbox_profiles.records import frozen


@frozen
class Entry:
    """One kind of file a host tool loads or runs."""

    match: str  # a path suffix (".git/hooks"), a name pattern ("*.pth"), or a structure
    loaded_by: str  # who loads or runs it, and when
    source: str  # where the entry comes from
    test: str  # the attack test that proves it is neutralised


# Inside a directory git takes for a repository (HEAD plus objects/ and refs/, or plus a
# commondir file), whatever its name: a bare repository, the target of a .git file's
# "gitdir:", a worktree's private directory.
GIT_DIR_MEMBERS: tuple[str, ...] = ("config", "config.worktree", "hooks", "commondir")
GIT_DIR_MARKERS: frozenset[str] = frozenset(("head", "objects", "refs", "commondir"))

GIT_DIR_ENTRY = Entry(
    "config, config.worktree, hooks, commondir of any directory git takes for a repository",
    "git reads a bare repository's or gitdir target's config and runs its hooks; commondir "
    "sends git to another directory's config",
    "git repository layout (gitrepository-layout(5))",
    "bare-repository, gitdir-file, commondir, read-only-git-dir",
)
GIT_FILE_ENTRY = Entry(
    ".git that is a file",
    "git follows its 'gitdir: <dir>' to a repository elsewhere, config and hooks included",
    "Codex CLI (follows .git files), gitrepository-layout(5)",
    "gitdir-file",
)
VENV_ENTRY = Entry(
    "a virtualenv, whole (a directory holding pyvenv.cfg)",
    "activating it sources bin/activate; its python runs the .pth files and the modules "
    "they import from site-packages at every start; pip reads its pip.conf",
    "venv docs",
    "venv-activate, venv-site-packages",
)
GIT_REFERENCE_ENTRY = Entry(
    "a file or directory a git configuration names (include.path, includeIf, core.hooksPath)",
    "git reads an included file as configuration, runs hooks from core.hooksPath",
    "git-config(1)",
    "global-include, moved-include-dir, moved-link-on-the-way, include-through-symlink, "
    "include-moved-into-place, include-chain, worktree-config-include, home-link-include, "
    "linked-worktree-hook, bom-hooks-path, bom-include, crlf-hooks-path, case-and-comment, "
    "quoted-escapes, continued-line, past-a-mib, include-if-onbranch, include-if-hasconfig, "
    "form-feed-kept, unreadable-include",
)
LEFTHOOK_REFERENCE_ENTRY = Entry(
    "a file or folder a lefthook configuration names (source_dir, source_dir_local, rc, "
    "lefthook, extends and its glob's folder, remotes' configs, run and runner programs "
    "by path), also from a repository that holds the root",
    "lefthook runs <source_dir>/<hook>/ scripts and merges what extends names; the hook it "
    "installs sources rc and runs the lefthook command; one that cannot be read for sure "
    "makes every writable root read-only",
    "lefthook docs (configuration); lefthook 2.2.2 (internal/config/loader.go)",
    "yaml-source-dir, toml-source-dir-local, jsonc-source-dir, rc, extends-glob, "
    "enclosing-repository, flow",
)

# A home's own bin/ (on PATH in its login shells) is told from a project's bin/ by what is
# beside it: a shell profile.
HOME_MARKERS: tuple[str, ...] = (
    ".profile",
    ".bash_profile",
    ".bash_login",
    ".bashrc",
    ".zshrc",
    ".zprofile",
    ".zshenv",
    ".zlogin",
    ".kshrc",
    ".mkshrc",
    ".cshrc",
    ".tcshrc",
    ".login",
)
HOME_BIN_ENTRY = Entry(
    "bin beside a shell's start file (a home's bin: .profile, .bash_profile, .bash_login, "
    ".bashrc, .zshrc, .zprofile, .zshenv, .zlogin, .kshrc, .mkshrc, .cshrc, .tcshrc, .login)",
    "on PATH in every login shell when it exists (Debian's and Ubuntu's .profile): a planted "
    "git there runs instead of the real one",
    "Debian skel .profile",
    "home-bin",
)
DIRENV_REFERENCE_ENTRY = Entry(
    "a file or directory a present .envrc loads or watches (dotenv, dotenv_if_exists, "
    "source_env, source_env_if_exists, source_up, watch_file, watch_dir, source, PATH_add, "
    "path_add, load_prefix, layout node, php and pipenv, use vim, VIRTUAL_ENV, PATH-like, "
    "file and program variables: GIT_EDITOR, NODE_OPTIONS...), also from an .envrc above "
    "the root; a CR ending a line stays in the name, as bash reads it",
    "direnv, on cd, with no new direnv allow: dotenv loads a .env's variables (GIT_CONFIG_*, "
    "LD_PRELOAD), source_env runs a file, PATH_add puts a directory's programs first on "
    "PATH; an .envrc that cannot be read for sure makes every writable root read-only",
    "direnv-stdlib(1); direnv 2.32 (stdlib.sh)",
    "dotenv, dotenv-if-exists, dotenv-default, source-env, path-add, envrc-local, "
    "envrc-unreadable, envrc-crlf, envrc-virtualenv, envrc-editor, envrc-export-output, "
    "envrc-relative-path, envrc-moved-dir, envrc-linked-dir",
)
MISE_REFERENCE_ENTRY = Entry(
    "a file or directory a present mise configuration or .tool-versions loads ([env] "
    "_.file, _.source, _.path, env_file; a path: tool version)",
    "mise, on cd: loads the file's variables, sources the script, puts the directories on "
    "PATH; one that cannot be read for sure makes every writable root read-only",
    "mise docs (environments: env._ directives; tools: path: versions)",
    "mise-env",
)
INSTRUCTION_IMPORT_ENTRY = Entry(
    "a file an agent instruction file imports (@path in CLAUDE.md, CLAUDE.local.md, "
    "GEMINI.md, also above the root, five hops deep)",
    "Claude Code and Gemini CLI load it as instructions with the importing file",
    "Claude Code docs (memory: CLAUDE.md imports); Gemini CLI docs (memory import processor)",
    "instruction-imports",
)
HARDLINK_ENTRY = Entry(
    "another name (hard link) in a writable root of a protected file",
    "writing through the other name changes the protected file: each such name is "
    "protected as the file is, or the start refused naming them when they cannot all be "
    "found",
    "link(2)",
    "hard-linked-hook, hard-link-made",
)

_NAMED: tuple[Entry, ...] = tuple(Entry(*row) for row in NAMES)
# Files that steer an AI agent: a sandbox's are the catalogue's, a call the user approved
# may still write one.
INSTRUCTION_ENTRIES: frozenset[Entry] = frozenset(
    e for e in _NAMED if e.match in {row[0] for row in INSTRUCTION_NAMES}
)
_PATTERNED: tuple[Entry, ...] = tuple(Entry(*row) for row in SUFFIXES)
CATALOGUE: tuple[Entry, ...] = (
    *_NAMED,
    *_PATTERNED,
    GIT_DIR_ENTRY,
    GIT_FILE_ENTRY,
    VENV_ENTRY,
    GIT_REFERENCE_ENTRY,
    LEFTHOOK_REFERENCE_ENTRY,
    HOME_BIN_ENTRY,
    DIRENV_REFERENCE_ENTRY,
    MISE_REFERENCE_ENTRY,
    INSTRUCTION_IMPORT_ENTRY,
    HARDLINK_ENTRY,
)

# Every name the entries stand for, one by one: exact path suffixes; endings of the last
# component (``*.pth``); and last components with a ``*`` elsewhere (``mise.*.toml``).
_EXPANDED: tuple[tuple[str, Entry], ...] = tuple(
    (name, entry) for entry in _NAMED for name in expand(entry.match)
)
PROTECTED_NAMES: tuple[str, ...] = tuple(n for n, _ in _EXPANDED if "*" not in n)
PROTECTED_SUFFIXES: tuple[str, ...] = tuple(
    name for entry in _PATTERNED for name in expand(entry.match)
)
PROTECTED_PATTERNS: tuple[str, ...] = tuple(n for n, _ in _EXPANDED if "*" in n)

# Lookup by the last component, lower-cased: (the whole suffix's parts, entry).
_BY_LAST: dict[str, list[tuple[tuple[str, ...], Entry]]] = {}
_WILD: list[tuple[tuple[str, ...], Entry]] = []
for _name, _entry in _EXPANDED:
    _parts = tuple(_name.lower().split("/"))
    if "*" in _parts[-1]:
        _WILD.append((_parts, _entry))
    else:
        _BY_LAST.setdefault(_parts[-1], []).append((_parts, _entry))
_BY_SUFFIX: tuple[tuple[str, Entry], ...] = tuple(
    (name[1:].lower(), entry) for entry in _PATTERNED for name in expand(entry.match)
)
# The directories on the way to an entry of several components (".cargo" of
# ".cargo/config.toml"), by their last component: a symlink or a file in that place would
# send the host tool elsewhere, so it counts as the entry.
_BY_LEADING: dict[str, list[tuple[tuple[str, ...], Entry]]] = {}
for _parts, _entry in [*(p for entries in _BY_LAST.values() for p in entries), *_WILD]:
    for _k in range(1, len(_parts)):
        _BY_LEADING.setdefault(_parts[_k - 1], []).append((_parts[:_k], _entry))

Exists = Callable[[str], bool]


def match(parts: Sequence[str], is_dir: bool, sibling: Exists) -> Entry | None:
    """The catalogue entry a root-relative path is, if any. ``sibling(name)`` says whether
    the path's directory holds ``name`` (for the structural entries).

    >>> match(["src", ".git", "hooks"], True, lambda n: False).match
    '.git/hooks'
    >>> match(["notes", "bashrc.d"], True, lambda n: False) is None
    True
    >>> match(["me", "bin"], True, {".profile"}.__contains__).test
    'home-bin'
    >>> match(["proj", "bin"], True, lambda n: False) is None
    True
    >>> match(["repo.git", "config"], False, {"HEAD", "objects", "refs"}.__contains__).test
    'bare-repository, gitdir-file, commondir, read-only-git-dir'

    A symlink (or anything but a directory) where an entry has a directory on its way is
    that entry: the host tool would follow it.

    >>> match(["crate", ".cargo"], False, lambda n: False).match
    '.cargo/config{,.toml}'
    >>> match(["crate", ".cargo"], True, lambda n: False) is None
    True
    """
    if not parts:
        return None
    parts = [fold(p) for p in parts]
    low = parts[-1]
    for suffix, entry in _BY_LAST.get(low, ()):
        if _ends_with(parts, suffix):
            return entry
    for ending, entry in _BY_SUFFIX:
        if low.endswith(ending):
            return entry
    for suffix, entry in _WILD:
        if fnmatch.fnmatchcase(low, suffix[-1]) and _ends_with(parts[:-1], suffix[:-1]):
            return entry
    if low == ".git" and not is_dir:
        return GIT_FILE_ENTRY
    if not is_dir:
        for leading, entry in _BY_LEADING.get(low, ()):
            if _ends_with(parts, leading):
                return entry
    if low in GIT_DIR_MEMBERS and is_git_dir(sibling):
        return GIT_DIR_ENTRY
    if low == "bin" and any(sibling(m) for m in HOME_MARKERS):
        return HOME_BIN_ENTRY
    return None


def fold(name: str) -> str:
    """A name as a file system that folds it may take it: case folded (``ſ`` is ``s``, the
    Kelvin sign ``k``), Unicode compatibility-decomposed (a Mac's file system ignores
    normalisation; ext4's case-folding directories decompose), trailing dots and blanks
    dropped (Windows shares drop them). More names count as an entry, never fewer.

    >>> fold(".BA\u017fHRC. ") == fold(".bashrc") == ".bashrc"
    True
    """
    if name.isascii():  # nearly every name: nothing to decompose, casefold is lower
        return name.lower().rstrip(". ")
    return unicodedata.normalize("NFKD", name).casefold().rstrip(". ")


def _ends_with(parts: Sequence[str], suffix: tuple[str, ...]) -> bool:
    n = len(suffix)
    if n == 0:
        return True
    return len(parts) >= n and all(p == s for p, s in zip(parts[-n:], suffix, strict=True))


def is_git_dir(has: Exists) -> bool:
    """Whether git would take a directory holding these names for a repository."""
    return has("HEAD") and (has("commondir") or (has("objects") and has("refs")))


def path_sibling(directory: str) -> Exists:
    return lambda name: os.path.lexists(os.path.join(directory, name))


def find(
    root: str,
    on_error: Callable[[str, OSError], None] | None = None,
    open_up: Callable[[str], bool] | None = None,
) -> Iterator[tuple[str, Entry]]:
    """Every catalogue match below ``root`` (not descending into a match, nor following
    symlinks), in a stable order; a match that is itself a symlink is reported too. A
    directory that cannot be listed is given to ``open_up`` (which may make it readable)
    and tried once more, else goes to ``on_error`` (a sweep must not pass it by)."""
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            entries = _listing(directory, open_up)
        except OSError as exc:
            if on_error is not None and not isinstance(exc, FileNotFoundError):
                on_error(directory, exc)
            continue
        rel = os.path.relpath(directory, root)
        base = [] if rel == "." else rel.split(os.sep)
        names = {e.name for e in entries}
        subdirs: list[str] = []
        for item in entries:
            try:
                is_dir = item.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            found = match([*base, item.name], is_dir, names.__contains__)
            if found is None and is_dir and os.path.isfile(os.path.join(item.path, "pyvenv.cfg")):
                found = VENV_ENTRY
            if found is not None:
                yield item.path, found
            elif is_dir:
                subdirs.append(item.path)
        stack.extend(reversed(subdirs))


def _listing(directory: str, open_up: Callable[[str], bool] | None) -> list[os.DirEntry[str]]:
    try:
        return sorted(os.scandir(directory), key=lambda e: e.name)
    except PermissionError:
        if open_up is None or not open_up(directory):
            raise
        return sorted(os.scandir(directory), key=lambda e: e.name)
