#!/usr/bin/env python3
"""Hold every function of the three packages to 60 lines: scripts/check_functions.py [path ...]

A function's length runs from its `def` line (decorators not counted) to its last line, blank
lines and comments inside it included; a function nested in another is counted in its own right
(and inside its parent's length too). Each function over the limit is printed as
`path:line name N lines`, and the exit status is 1; with none it is 0. Paths default to
launcher/, policy/ and sandbox_profiles/ beside this script; a directory is read for its *.py
files, recursively."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

LIMIT = 60
PACKAGES = ("launcher", "policy", "sandbox_profiles")


def python_files(paths: list[Path]) -> Iterator[Path]:
    for path in paths:
        if path.is_dir():
            yield from sorted(path.rglob("*.py"))
        else:
            yield path


def long_functions(path: Path, limit: int = LIMIT) -> Iterator[tuple[int, str, int]]:
    """(line, name, length) of each function in one file longer than limit, in line order."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            end = node.end_lineno if node.end_lineno is not None else node.lineno
            length = end - node.lineno + 1
            if length > limit:
                found.append((node.lineno, node.name, length))
    yield from sorted(found)


def main(argv: list[str]) -> int:
    root = Path(__file__).resolve().parent.parent
    paths = [Path(arg) for arg in argv] or [root / name for name in PACKAGES]
    offenders = 0
    for path in python_files(paths):
        shown = path.relative_to(root) if path.is_relative_to(root) else path
        for line, name, length in long_functions(path):
            print(f"{shown}:{line} {name} {length} lines")
            offenders += 1
    return 1 if offenders else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
