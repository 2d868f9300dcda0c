"""What an agent instruction file imports: Claude Code's and Gemini CLI's ``@path`` imports.

``CLAUDE.md``, ``CLAUDE.local.md`` and ``GEMINI.md`` may import other files with
``@path/to/file`` (a word starting with ``@``, relative to the importing file, ``~/`` for the
home, absolute; not inside a code span or block; imported files import in turn, five hops
deep). What is imported is loaded as instructions just as the importing file is, so it is
protected as the file is. A directory is never imported.
"""

from __future__ import annotations

import os
import re

from sandbox_profiles.autorun import fold
from sandbox_profiles.gitconfig import read_bounded

IMPORTING = frozenset({"claude.md", "claude.local.md", "gemini.md"})
MAX_BYTES = 1 << 20
_HOPS = 5
_FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,}).*?^\1\2[^\S\n]*$", re.M | re.S)
_SPAN = re.compile(r"(`+).*?\1", re.S)
_IMPORT = re.compile(r"(?:^|(?<=\s))@(\S+)")


def imported(path: str, home: str) -> list[tuple[str, str]]:
    """(path, why) of every file ``path`` imports, directly or through another import;
    :class:`UnreadableConfig` when one there cannot be read."""
    found: list[tuple[str, str]] = []
    pending, seen = [(os.path.abspath(path), 0)], set[str]()
    while pending:
        current, hops = pending.pop()
        if current in seen or hops > _HOPS:
            continue
        seen.add(current)
        for target in import_paths(_read(current), os.path.dirname(current), home):
            if os.path.isdir(target):
                continue
            found.append((target, f"imported by {current}"))
            if os.path.isfile(target):
                pending.append((target, hops + 1))
    return list(dict.fromkeys(found))


def import_paths(text: str, directory: str, home: str) -> list[str]:
    """The paths the ``@`` imports of ``text`` name, as given and without trailing
    punctuation, resolved from ``directory``.

    >>> import_paths("See @docs/agent.md, and `@not/this` or user@example.com.", "/p", "/h")
    ['/p/docs/agent.md,', '/p/docs/agent.md']
    """
    text = _SPAN.sub(" ", _FENCE.sub(" ", text))
    paths: list[str] = []
    for word in _IMPORT.findall(text):
        for name in dict.fromkeys((word, word.rstrip(".,;:!?)]}\"'"))):
            if not name:
                continue
            if name == "~" or name.startswith("~/"):
                name = home + name[1:]
            paths.append(os.path.normpath(os.path.join(directory, name)))
    return list(dict.fromkeys(paths))


def imports_of(name: str) -> bool:
    """Whether a file so named is one whose ``@`` imports are loaded."""
    return fold(name) in IMPORTING


def _read(path: str) -> str:
    return read_bounded(path, MAX_BYTES).decode("utf-8", "surrogateescape")
