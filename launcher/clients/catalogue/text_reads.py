"""Where a client reads something other than what ironcurtain reads: files it changes before
it parses them, and files it loads that ironcurtain does not look at. What such a file
holds cannot be judged, so it is not read and its servers count as not protected.

- **opencode** replaces every ``{env:NAME}`` and ``{file:PATH}`` in its file's raw text
  before it parses it: one that holds a quote, a backslash, a line break or a comment's
  marks could end a string or a comment for opencode and not for ironcurtain (an entry seen
  by one only). It also loads its files from every directory above the one it starts in.
- **Continue** fills each ``${{ ... }}`` into the file's text from its secrets and ``.env``
  files, which a project can write too: the file is read as written, each entry holding
  one is left alone (its value cannot be said in ironcurtain's config), and the file is
  named as one a filled value could change after that value (:func:`fills_text`).
- A project's YAML file over ``PROJECT_YAML_MAX`` is not read: a server's block is a few
  hundred bytes, and parsing YAML costs far more than JSON (seconds for a large file).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from launcher.clients.catalogue.table import BY_NAME, Client
from launcher.clients.files.file_io import Source
from launcher.clients.files.path_identity import holds_home

PROJECT_YAML_MAX = 64 * 1024
_OPENCODE_FILLED = re.compile(r"\{(?:env|file):([^}]*)\}")
_OPENCODE_BREAKS = ('"', "\\", "\n", "\r", "/*", "*/", "//")
# Files a client also loads from every directory above the one it starts in.
_LOADED_ABOVE = {"opencode": ("opencode.json", "opencode.jsonc", ".opencode/opencode.json",
                              ".opencode/opencode.jsonc")}  # fmt: skip


def read_otherwise(client: Client, source: Source, scope: str, syntax: str) -> str | None:
    """Why ``client`` would read ``source`` otherwise than ironcurtain (so it is not read),
    or None."""
    if client.variables == "opencode":
        for match in _OPENCODE_FILLED.finditer(source.text):
            if any(mark in match.group(1) for mark in _OPENCODE_BREAKS):
                return (
                    f"{match.group(0)[:60]!r} holds a quote, a backslash, a line break or a "
                    "comment mark; opencode fills it in before it reads the file, so it would "
                    "read the file differently from ironcurtain: left alone"
                )
    if scope == "project" and syntax == "yaml" and len(source.text) > PROJECT_YAML_MAX:
        return f"a project's YAML file of more than {PROJECT_YAML_MAX // 1024} KiB is not read"
    return None


def fills_text(client: Client, text: str) -> str:
    """Why ``client`` fills values into ``text`` before it reads it (empty: it does not)."""
    if client.name == "continue" and "${{" in text:
        return (
            "Continue fills each ${{ ... }} into this file's text before it reads it (from "
            "its secrets and .env files, a project's too): an entry holding one cannot be "
            "said in ironcurtain's config and is left alone; a filled value could change "
            "the entries that follow it"
        )
    return ""


def loaded_above(home: Path, project: Path) -> list[tuple[Client, str]]:
    """The client files above the project (up to the home, or the root) that a client
    started in it loads too: not read, so their servers count as not protected."""
    out: list[tuple[Client, str]] = []
    for name, relatives in _LOADED_ABOVE.items():
        for parent in project.parents:
            if parent == home or holds_home(parent, home):
                break
            for relative in relatives:
                if os.path.lexists(parent / relative):
                    why = "loaded from a directory above the project; not read, not counted"
                    out.append((BY_NAME[name], f"{parent / relative}: {why}"))
    return out
