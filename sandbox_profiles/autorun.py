"""What host tools load or run from a directory: the catalogue the guard neutralises.

A writable root is shared with the host. Whatever a sandboxed server writes there, the
user's own tools may later load or run without asking: ``git status`` in it, ``cd`` into it
with direnv, opening it in an editor or an AI client, ``npm install``, activating a
virtualenv. Every entry below names such a file by its place (a path suffix matched at any
depth, case-insensitively, since some filesystems fold case), by a name pattern, or by the
structure git and Python recognise (a directory git takes for a repository whatever it is
called; a virtualenv). Each is neutralised the same way: present when a server starts, it
is mounted read-only; appearing later, it is moved out of the root before the call that
made it returns; at the end of a session a sweep checks again.

What the user runs on purpose (``make``, ``npm run``, ``pytest``) runs the project's own
code, which is the agent's work product: that is not in the catalogue.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence

from sandbox_profiles.records import frozen


@frozen
class Entry:
    """One kind of file a host tool loads or runs."""

    match: str  # a path suffix (".git/hooks"), a name pattern ("*.pth"), or a structure
    loaded_by: str  # who loads or runs it, and when
    source: str  # where the entry comes from
    test: str  # the attack test that proves it is neutralised


# Matched at any depth as whole trailing components: ".git/hooks" matches a/.git/hooks.
_NAMES: tuple[tuple[str, str, str, str], ...] = (
    # git
    (".git/hooks", "git runs hooks on commit, checkout, merge, push", "srt, Codex CLI", "name"),
    (
        ".git/config",
        "git reads it on every command: core.fsmonitor, core.hooksPath, aliases, filters, "
        "pager and editor run programs",
        "srt, Codex CLI",
        "deep-git-config",
    ),
    (".gitconfig", "git's user configuration, when a writable root is a home", "srt", "name"),
    (".gitmodules", "git submodule: URLs and update modes", "srt", "name"),
    (".hg/hgrc", "Mercurial runs [hooks] from it", "Mercurial hgrc(5)", "name"),
    # shells
    (".bashrc", "bash, at every interactive start", "srt, shell manuals", "name"),
    (".bash_profile", "bash login shells", "srt", "name"),
    (".bash_login", "bash login shells", "bash(1)", "name"),
    (".bash_logout", "bash, when a login shell exits", "bash(1)", "name"),
    (".profile", "sh, dash, bash and ksh login shells", "srt", "name"),
    (".zshrc", "zsh, at every interactive start", "srt", "name"),
    (".zshenv", "zsh, at every start", "zsh(1)", "name"),
    (".zprofile", "zsh login shells", "srt", "name"),
    (".zlogin", "zsh login shells", "zsh(1)", "name"),
    (".zlogout", "zsh, when a login shell exits", "zsh(1)", "name"),
    (".kshrc", "ksh interactive shells", "ksh(1)", "name"),
    (".cshrc", "csh and tcsh at every start", "tcsh(1)", "name"),
    (".tcshrc", "tcsh at every start", "tcsh(1)", "name"),
    (".login", "csh login shells", "tcsh(1)", "name"),
    (".logout", "csh, when a login shell exits", "tcsh(1)", "name"),
    (".config/fish", "fish runs config.fish and conf.d/ at every start", "fish docs", "name"),
    # directory hooks and environment managers
    (".envrc", "direnv, on cd (after direnv allow)", "direnv docs", "name"),
    (".mise.toml", "mise, on cd: [env] and [hooks] run commands", "mise docs", "name"),
    ("mise.toml", "mise, on cd", "mise docs", "name"),
    (".mise.local.toml", "mise, on cd", "mise docs", "name"),
    ("mise.local.toml", "mise, on cd", "mise docs", "name"),
    ("mise/config.toml", "mise, on cd", "mise docs", "name"),
    (".mise/config.toml", "mise, on cd", "mise docs", "name"),
    (".config/mise", "mise, on cd", "mise docs", "name"),
    # editors and IDEs
    (".vscode", "VS Code: tasks that run on folder open, settings naming programs", "srt", "name"),
    (".idea", "JetBrains IDEs: run configurations, external tools", "srt", "name"),
    (
        ".devcontainer",
        "Dev Containers: initializeCommand runs on the host",
        "containers.dev",
        "name",
    ),
    (".zed", "Zed: project tasks and language servers", "Zed docs", "name"),
    (".helix", "Helix: languages.toml names language-server commands", "Helix docs", "name"),
    (
        ".exrc",
        "vim and neovim with 'exrc' set, on start in the directory",
        "vim :help exrc",
        "name",
    ),
    (".vimrc", "vim with 'exrc' set", "vim :help exrc", "name"),
    (".nvimrc", "neovim with 'exrc' set", "neovim :help exrc", "name"),
    (".nvim.lua", "neovim with 'exrc' set", "neovim :help exrc", "name"),
    (".dir-locals.el", "Emacs: directory-local variables, eval forms", "Emacs manual", "name"),
    (".dir-locals-2.el", "Emacs: directory-local variables", "Emacs manual", "name"),
    # AI clients
    (".mcp.json", "Claude Code: project MCP servers it starts", "srt", "name"),
    (".claude", "Claude Code: hooks and status line in settings, commands, agents", "srt", "name"),
    (".cursor", "Cursor: mcp.json servers, rules", "Cursor docs", "name"),
    (".gemini", "Gemini CLI: settings.json MCP servers and tools", "Gemini CLI docs", "name"),
    (".codex", "Codex CLI: config.toml", "Codex CLI (read-only in its sandbox)", "name"),
    (".windsurf", "Windsurf: rules and workflows", "Windsurf docs", "name"),
    (".continue", "Continue: config with MCP servers", "Continue docs", "name"),
    (".roo", "Roo Code: mcp.json servers", "Roo Code docs", "name"),
    (".amazonq", "Amazon Q: mcp.json servers", "Amazon Q docs", "name"),
    (".kiro", "Kiro: hooks and MCP settings", "Kiro docs", "name"),
    (".aider.conf.yml", "aider: lint-cmd and test-cmd it runs", "aider docs", "name"),
    # git hook managers
    (".husky", "husky: the hooks directory git runs (core.hooksPath)", "husky docs", "name"),
    (".pre-commit-config.yaml", "pre-commit: hooks run on git commit", "pre-commit docs", "name"),
    ("lefthook.yml", "lefthook: hooks run by git", "lefthook docs", "name"),
    (".lefthook.yml", "lefthook: hooks run by git", "lefthook docs", "name"),
    # Python
    ("sitecustomize.py", "Python imports it at every start when on sys.path", "site docs", "name"),
    ("usercustomize.py", "Python imports it at every start when on sys.path", "site docs", "name"),
    ("pyvenv.cfg", "makes a directory a virtualenv (its home names the Python)", "venv", "name"),
    (".pdbrc", "pdb runs its commands when debugging in the directory", "pdb docs", "name"),
    ("bin/activate", "sourced to activate a virtualenv", "venv docs", "name"),
    ("bin/activate.fish", "sourced to activate a virtualenv (fish)", "venv docs", "name"),
    ("bin/activate.csh", "sourced to activate a virtualenv (csh)", "venv docs", "name"),
    # Node
    (".npmrc", "npm: node-options, script-shell and git name programs", "npm docs", "name"),
    (".yarnrc", "yarn 1: yarn-path runs the given script", "yarn docs", "name"),
    (".yarnrc.yml", "yarn 2+: yarnPath and plugins run code", "yarn docs", "name"),
    (".pnpmfile.cjs", "pnpm: hooks run on install", "pnpm docs", "name"),
    ("bunfig.toml", "bun: preload scripts", "bun docs", "name"),
    # other tools
    (".ripgreprc", "ripgrep (RIPGREP_CONFIG_PATH): --pre runs a program", "srt", "name"),
    (".gdbinit", "gdb auto-loads it (where auto-load safe-path allows)", "gdb manual", "name"),
    (
        ".devcontainer.json",
        "Dev Containers: initializeCommand runs on the host",
        "containers.dev",
        "name",
    ),
    (
        ".cargo/config.toml",
        "cargo: rustc-wrapper, runners and aliases run programs",
        "cargo docs",
        "name",
    ),
    (".cargo/config", "cargo (older name of config.toml)", "cargo docs", "name"),
    ("rust-toolchain.toml", "rustup: a toolchain path it runs", "rustup docs", "name"),
    ("rust-toolchain", "rustup: a toolchain path it runs", "rustup docs", "name"),
    (".rprofile", "R sources it at start in the directory", "R docs", "name"),
    (".irbrc", "irb loads it from the directory", "irb docs", "name"),
    (".pryrc", "pry loads it from the directory", "pry docs", "name"),
    (".ghci", "GHCi runs it from the directory", "GHC docs", "name"),
    (".octaverc", "Octave runs it at start in the directory", "Octave docs", "name"),
    (".lazy.lua", "lazy.nvim loads it from the directory", "lazy.nvim docs", "name"),
    (".jj/repo/config.toml", "Jujutsu: repository config (aliases, programs)", "jj docs", "name"),
    (".hg/sharedpath", "Mercurial: sends hg to another repository's hgrc", "Mercurial", "name"),
    (".git/rebase-merge", "git rebase --continue runs its todo list's exec lines", "git", "name"),
    (".git/rebase-apply", "git am and rebase state", "git", "name"),
    (".git/sequencer", "git cherry-pick and revert --continue: their todo list", "git", "name"),
    (".ssh", "ssh: config ProxyCommand, authorized_keys, when a root is a home", "ssh(1)", "name"),
)

# Name patterns for the last component.
_SUFFIXES: tuple[tuple[str, str, str, str], ...] = (
    ("*.pth", "Python runs its import lines at start (in a site directory)", "site docs", "name"),
    ("*.code-workspace", "VS Code workspace: settings and tasks", "VS Code docs", "name"),
    ("*.sublime-project", "Sublime Text: build systems", "Sublime docs", "name"),
)

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
    "linked-worktree-hook",
)

CATALOGUE: tuple[Entry, ...] = (
    *(Entry(*row) for row in _NAMES),
    *(Entry(*row) for row in _SUFFIXES),
    GIT_DIR_ENTRY,
    GIT_FILE_ENTRY,
    VENV_ENTRY,
    GIT_REFERENCE_ENTRY,
)

# The path suffixes and name patterns alone (renderers that match paths by pattern).
PROTECTED_NAMES: tuple[str, ...] = tuple(row[0] for row in _NAMES)
PROTECTED_SUFFIXES: tuple[str, ...] = tuple(row[0] for row in _SUFFIXES)

# Lookup by the last component, lower-cased: (the whole suffix's parts, entry).
_BY_LAST: dict[str, list[tuple[tuple[str, ...], Entry]]] = {}
for _entry in CATALOGUE[: len(_NAMES)]:
    _parts = tuple(_entry.match.lower().split("/"))
    _BY_LAST.setdefault(_parts[-1], []).append((_parts, _entry))
_BY_SUFFIX: tuple[tuple[str, Entry], ...] = tuple(
    (entry.match[1:].lower(), entry) for entry in CATALOGUE[len(_NAMES) : len(_NAMES) + 3]
)
# The directories on the way to an entry of several components (".cargo" of
# ".cargo/config.toml"), by their last component: a symlink or a file in that place would
# send the host tool elsewhere, so it counts as the entry.
_BY_LEADING: dict[str, list[tuple[tuple[str, ...], Entry]]] = {}
for _parts, _entry in [p for entries in _BY_LAST.values() for p in entries]:
    for _k in range(1, len(_parts)):
        _BY_LEADING.setdefault(_parts[_k - 1], []).append((_parts[:_k], _entry))

Exists = Callable[[str], bool]


def match(parts: Sequence[str], is_dir: bool, sibling: Exists) -> Entry | None:
    """The catalogue entry a root-relative path is, if any. ``sibling(name)`` says whether
    the path's directory holds ``name`` (for the structural entries).

    >>> match(["src", ".git", "hooks"], True, lambda n: False).match
    '.git/hooks'
    >>> match(["notes", ".bashrc.d"], True, lambda n: False) is None
    True
    >>> match(["repo.git", "config"], False, {"HEAD", "objects", "refs"}.__contains__).test
    'bare-repository, gitdir-file, commondir, read-only-git-dir'

    A symlink (or anything but a directory) where an entry has a directory on its way is
    that entry: the host tool would follow it.

    >>> match(["crate", ".cargo"], False, lambda n: False).match
    '.cargo/config'
    >>> match(["crate", ".cargo"], True, lambda n: False) is None
    True
    """
    if not parts:
        return None
    name = parts[-1]
    low = name.lower()
    for suffix, entry in _BY_LAST.get(low, ()):
        if _ends_with(parts, suffix):
            return entry
    for ending, entry in _BY_SUFFIX:
        if low.endswith(ending):
            return entry
    if low == ".git" and not is_dir:
        return GIT_FILE_ENTRY
    if not is_dir:
        for leading, entry in _BY_LEADING.get(low, ()):
            if _ends_with(parts, leading):
                return entry
    if name in GIT_DIR_MEMBERS and is_git_dir(sibling):
        return GIT_DIR_ENTRY
    return None


def _ends_with(parts: Sequence[str], suffix: tuple[str, ...]) -> bool:
    n = len(suffix)
    return len(parts) >= n and all(p.lower() == s for p, s in zip(parts[-n:], suffix, strict=True))


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
