"""What a server's command needs to be visible inside the sandbox.

Follows the command to its real file, its interpreter (shebang, ``#!/usr/bin/env x``), the
interpreter's installation prefix, a Python virtualenv, and a Node package tree.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

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
    return any(path == d or path.startswith(d + "/") for d in SYSTEM_DIRS)


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


def program_dirs(command_path: str, search: Sequence[str], depth: int = 0) -> list[tuple[str, str]]:
    """(directory, reason) pairs to show read-only so ``command_path`` can run."""
    found: list[tuple[str, str]] = []

    def add(directory: str | None, reason: str) -> None:
        if not directory or directory == "/" or _under_system(directory):
            return
        # Skip what an earlier, wider mount already shows; a wider one replaces narrower ones.
        if any(directory == d or directory.startswith(d + "/") for d, _ in found):
            return
        found[:] = [(d, r) for d, r in found if not d.startswith(directory + "/")]
        found.append((directory, reason))

    real = os.path.realpath(command_path)
    add(os.path.dirname(command_path), f"holds the command {command_path}")
    venv = _venv_root(command_path) or _venv_root(real)
    if venv:
        add(venv, "the command's Python virtualenv")
        home = _venv_home(venv)
        if home:
            add(
                _prefix_of_interpreter(os.path.realpath(os.path.join(home, "python3"))) or home,
                "the virtualenv's base Python installation",
            )
    node = _node_tree(real)
    if node:
        add(node, "the command's Node package tree")
    elif real != command_path:
        add(os.path.dirname(real), f"holds {real}, the command's real file")
    shebang = read_shebang(real)
    if shebang and depth < 3:
        interpreter = shebang[0]
        if os.path.basename(interpreter) == "env":
            rest = [a for a in shebang[1:] if not a.startswith("-")]
            interpreter = (which(rest[0], search) or "") if rest else ""
        if interpreter:
            for directory, reason in program_dirs(interpreter, search, depth + 1):
                add(directory, reason if depth else f"interpreter: {reason}")
    else:
        prefix = _prefix_of_interpreter(real)
        if prefix and os.path.isdir(os.path.join(prefix, "lib")):
            add(prefix, f"installation prefix of {os.path.basename(real)}")
    return found
