"""What a server's command needs to be visible inside the sandbox.

Follows the command to its real file, its interpreter (shebang, ``#!/usr/bin/env x``), the
interpreter's installation prefix, a Python virtualenv, and a Node package tree.

Some directories are never shown, whatever a program needs: the ones the launcher names
(the home, ``~/.local``, ``~/.config``, ironcurtain's own), any directory holding one of
them, and any directory with a ``.ssh`` entry. A command that lives in such a directory is
shown as the file alone; one that cannot run without such a directory (an interpreter whose
installation prefix is the home) is refused with :class:`NeedsHiddenDirectory`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence

from sandbox_profiles.ways import is_under

# Directories the base profile already shows read-only: nothing below them needs a mount.
SYSTEM_DIRS: tuple[str, ...] = ("/usr", "/bin", "/lib", "/lib64", "/sbin")


def which(command: str, search: Sequence[str]) -> str | None:
    """Absolute path of ``command``: as given when it has a ``/``, else the first executable
    match in ``search``."""
    if "/" in command:
        path = os.path.abspath(command)
        return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
    for directory in search:
        if not directory:
            continue
        candidate = os.path.join(directory, command)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _under_system(path: str) -> bool:
    return any(is_under(path, d) for d in SYSTEM_DIRS)


def read_shebang(path: str) -> list[str] | None:
    try:
        with open(path, "rb") as handle:
            head = handle.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    line = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").strip()
    return line.split() or None


def _prefix_of_interpreter(real: str) -> str | None:
    """``/opt/py/3.11/bin/python3.11`` -> ``/opt/py/3.11`` (the tree holding its stdlib)."""
    parent = os.path.dirname(real)
    if os.path.basename(parent) == "bin":
        return os.path.dirname(parent)
    return parent


def _venv_root(path: str) -> str | None:
    """The virtualenv a ``<venv>/bin/x`` path belongs to, found by its ``pyvenv.cfg``."""
    root = os.path.dirname(os.path.dirname(path))
    return root if os.path.isfile(os.path.join(root, "pyvenv.cfg")) else None


def _venv_home(venv: str) -> str | None:
    try:
        with open(os.path.join(venv, "pyvenv.cfg"), encoding="utf-8") as cfg:
            for line in cfg:
                key, _, value = line.partition("=")
                if key.strip() == "home":
                    return value.strip()
    except OSError:
        return None
    return None


def _node_tree(real: str) -> str | None:
    """The outermost ``node_modules`` directory above ``real`` (holds its dependencies)."""
    parts = real.split("/")
    if "node_modules" not in parts:
        return None
    index = parts.index("node_modules")
    return "/".join(parts[: index + 1])


class NeedsHiddenDirectory(Exception):
    """A program cannot run without a directory that is never shown to a server."""


# Programs that load their standard library from their installation prefix.
_INTERPRETER = re.compile(r"(python|pypy|node|nodejs|ruby|perl|php|lua|bun|deno)[0-9.]*")


def hidden_reason(directory: str, never_shown: Mapping[str, str]) -> str | None:
    """Why ``directory`` must never be shown to a server, or None when it may be.

    ``never_shown`` maps directories to what they are (``{"/home/me": "your home"}``); they
    and every directory holding one are refused, by the given path and by the real one.
    Any directory with a ``.ssh`` entry is refused too (looked up on the host).

    >>> hidden_reason("/home", {"/home/me": "your home"})
    'it holds your home (/home/me)'
    >>> hidden_reason("/home/me/venv", {"/home/me": "your home"}) is None
    True
    """
    for path in dict.fromkeys((directory, os.path.realpath(directory))):
        for hidden, label in never_shown.items():
            if is_under(hidden, path):
                return label if path == hidden else f"it holds {label} ({hidden})"
        if os.path.lexists(os.path.join(path, ".ssh")):
            return f"it holds {os.path.join(path, '.ssh')}"
    return None


class _Shown:
    """The (path, reason) pairs found so far for one command, and the directories never
    shown to a server."""

    def __init__(self, command_path: str, hidden: dict[str, str]) -> None:
        self.command_path = command_path
        self.hidden = hidden
        self.found: list[tuple[str, str]] = []

    def add(self, path: str, reason: str) -> None:
        # Skip what an earlier, wider mount already shows; a wider one replaces narrower ones.
        if any(is_under(path, d) for d, _ in self.found):
            return
        self.found[:] = [(d, r) for d, r in self.found if not is_under(d, path)]
        self.found.append((path, reason))

    def show(
        self,
        directory: str | None,
        reason: str,
        files: Sequence[tuple[str, str]] = (),
        needed: bool = True,
    ) -> None:
        """Show ``directory``; when it must stay hidden, show ``files`` ((path, what it is):
        those of it the program uses) instead, or skip a guess that is not ``needed``, or
        refuse."""
        if not directory or directory == "/" or _under_system(directory):
            return
        why = hidden_reason(directory, self.hidden)
        if why is None:
            self.add(directory, reason)
        elif files:
            for path, what in files:
                self.add(path, f"{what}, alone: its directory is never shown ({why})")
        elif needed:
            raise NeedsHiddenDirectory(
                f"{self.command_path} cannot run without {directory} ({reason}), and that "
                f"directory is never shown to a server ({why})"
            )


def _show_links(shown: _Shown, command_path: str) -> None:
    """The command, then each symlink on the way to its real file: their directories, or the
    links and the file alone."""
    hop, seen = command_path, set[str]()
    while hop not in seen and len(seen) < 40:
        seen.add(hop)
        link = " (a link)" if os.path.islink(hop) else ""
        shown.show(os.path.dirname(hop), f"holds the command {hop}", [(hop, f"the command{link}")])
        if not os.path.islink(hop):
            break
        hop = os.path.normpath(os.path.join(os.path.dirname(hop), os.readlink(hop)))


def _show_trees(shown: _Shown, command_path: str, real: str) -> None:
    """The command's virtualenv and its base Python, its Node package tree or else its real
    file's directory."""
    venv = _venv_root(command_path) or _venv_root(real)
    if venv:
        shown.show(venv, "the command's Python virtualenv")
        home = _venv_home(venv)
        if home:
            shown.show(
                _prefix_of_interpreter(os.path.realpath(os.path.join(home, "python3"))) or home,
                "the virtualenv's base Python installation",
            )
    node = _node_tree(real)
    if node:
        shown.show(node, "the command's Node package tree")
    elif real != command_path:
        shown.show(
            os.path.dirname(real),
            f"holds {real}, the command's real file",
            [(real, "the command's real file")],
        )


def _show_interpreter(shown: _Shown, search: Sequence[str], depth: int, shebang: list[str]) -> None:
    """What the script's interpreter (its shebang's, through ``env`` by the search path)
    needs itself."""
    interpreter = shebang[0]
    if os.path.basename(interpreter) == "env":
        rest = [a for a in shebang[1:] if not a.startswith("-")]
        interpreter = (which(rest[0], search) or "") if rest else ""
    if interpreter:
        try:
            needs = program_dirs(interpreter, search, depth + 1, shown.hidden)
        except NeedsHiddenDirectory as exc:
            raise NeedsHiddenDirectory(f"{shown.command_path}: its interpreter {exc}") from None
        for directory, reason in needs:
            shown.add(directory, reason if depth else f"interpreter: {reason}")


def program_dirs(
    command_path: str,
    search: Sequence[str],
    depth: int = 0,
    never_shown: Mapping[str, str] | None = None,
) -> list[tuple[str, str]]:
    """(path, reason) pairs to show read-only so ``command_path`` can run: directories, and
    the command file itself (with each symlink on the way to it) where its directory must
    not be shown (see :func:`hidden_reason`). Raises :class:`NeedsHiddenDirectory` when the
    program cannot run without such a directory."""
    shown = _Shown(command_path, dict(never_shown or {}))
    real = os.path.realpath(command_path)
    _show_links(shown, command_path)
    _show_trees(shown, command_path, real)
    shebang = read_shebang(real)
    if shebang and depth < 3:
        _show_interpreter(shown, search, depth, shebang)
    else:
        prefix = _prefix_of_interpreter(real)
        if prefix and os.path.isdir(os.path.join(prefix, "lib")):
            # An interpreter needs its prefix (its standard library is there); for another
            # program the prefix is a guess, left out when it must stay hidden.
            needed = depth > 0 or bool(_INTERPRETER.fullmatch(os.path.basename(real)))
            shown.show(prefix, f"installation prefix of {os.path.basename(real)}", needed=needed)
    return shown.found


class PackageNotInstalled(Exception):
    """``npx PKG`` names a package that is not on this machine (npx would download it)."""


_NPX_FLAGS_WITH_VALUE = ("-p", "--package", "-c", "--call", "--registry", "--cache")


def npx_package(args: Sequence[str]) -> tuple[str, list[str]] | None:
    """(package spec, arguments for its program) from an ``npx`` argv.

    >>> npx_package(["-y", "@scope/srv@1.2", "/ws"])
    ('@scope/srv@1.2', ['/ws'])
    """
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            i += 1
            break
        if arg in _NPX_FLAGS_WITH_VALUE:
            return None  # -p/-c forms: not a plain "npx PKG args"
        if not arg.startswith("-"):
            break
        i += 1
    if i >= len(args):
        return None
    return args[i], list(args[i + 1 :])


def _split_spec(spec: str) -> tuple[str, str | None]:
    """``@scope/name@1.2`` -> (``@scope/name``, ``1.2``)."""
    at = spec.rfind("@")
    if at > 0:
        return spec[:at], spec[at + 1 :] or None
    return spec, None


def _package_bin(package_dir: str, name: str) -> str | None:
    import json

    try:
        with open(os.path.join(package_dir, "package.json"), encoding="utf-8") as handle:
            meta = json.load(handle)
    except (OSError, ValueError):
        return None
    bins = meta.get("bin")
    rel: object
    if isinstance(bins, str):
        rel = bins
    elif isinstance(bins, dict) and bins:
        short = name.rsplit("/", 1)[-1]
        rel = bins.get(short) or (next(iter(bins.values())) if len(bins) == 1 else None)
    else:
        return None
    return os.path.normpath(os.path.join(package_dir, rel)) if isinstance(rel, str) else None


def resolve_npx(args: Sequence[str], roots: Sequence[str]) -> tuple[str, list[str]] | None:
    """The installed program ``npx ARGS`` would run: (path of its script, its arguments).

    Looks in ``roots``: directories holding ``node_modules`` (npx's cache entries
    ``~/.npm/_npx/*``, the global prefix's ``lib``, the current directory). A sandboxed
    server has no network, so npx must not need to download anything: when the package is
    not found, :class:`PackageNotInstalled` says how to install it.
    """
    parsed = npx_package(args)
    if parsed is None:
        return None
    spec, rest = parsed
    name, version = _split_spec(spec)
    for root in roots:
        package_dir = os.path.join(root, "node_modules", name)
        script = _package_bin(package_dir, name)
        if script and os.path.isfile(script):
            if version and not _version_matches(package_dir, version):
                continue
            return script, rest
    raise PackageNotInstalled(
        f"npx would download {spec} when the server starts, and a sandboxed server has no "
        f"network; install it first (npm install -g {spec}), or run it once outside the "
        f"sandbox (npx -y {spec} --help) so it is in npx's cache"
    )


def _version_matches(package_dir: str, version: str) -> bool:
    import json

    if version in ("latest", "*") or not version[0].isdigit():
        return True
    try:
        with open(os.path.join(package_dir, "package.json"), encoding="utf-8") as handle:
            installed = str(json.load(handle).get("version", ""))
    except (OSError, ValueError):
        return False
    return installed == version or installed.startswith(version + ".")


def npx_roots(home: str, npm_cache: str | None, prefixes: Sequence[str]) -> list[str]:
    """Where npx finds packages without downloading: its cache entries (newest first), the
    global install prefixes' ``lib``."""
    cache = os.path.join(npm_cache or os.path.join(home, ".npm"), "_npx")
    try:
        entries = [os.path.join(cache, e) for e in os.listdir(cache)]
    except OSError:
        entries = []
    entries.sort(key=lambda p: os.stat(p).st_mtime if os.path.exists(p) else 0, reverse=True)
    return [*entries, *(os.path.join(p, "lib") for p in prefixes)]
