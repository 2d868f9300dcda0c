"""Lefthook configurations: what in them names a place lefthook, or the hook it installs,
reads or runs, read as lefthook reads them.

A lefthook configuration (any of its names, in YAML, JSON, JSONC or TOML) is itself in the
catalogue; this reads one that is there and says which other places it makes count:

- ``source_dir`` and ``source_dir_local``: the folders whose ``<hook>/`` scripts lefthook
  runs (relative to the repository's top);
- ``rc``: a shell file the installed hook sources before anything else;
- ``lefthook``: the command the installed hook runs lefthook with;
- ``extends``: files (or globs) merged in as more configuration, read in their turn;
- ``remotes``: configurations lefthook fetched into ``.git/info/lefthook-remotes/``, read
  in their turn (their ``configs``, ``lefthook.yml`` when none are given);
- ``run`` and ``runner``: a program named by a path, as the git worklist takes one.

Lefthook matches these keys without regard to case (``SOURCE_DIR`` works). YAML is read
line by line for these keys alone, at any depth (a key merged from an anchor counts too);
what cannot be read for sure (a flow mapping, an alias, a block scalar, a quoted string
over several lines, a shell variable in ``rc``, a file that is not UTF-8, JSON or TOML that
does not parse) raises :class:`~sandbox_profiles.gitconfig.UnreadableConfig`: the caller
protects as if it named anything.
"""

from __future__ import annotations

import glob
import json
import os
import re
from collections.abc import Iterator
from typing import Any

from sandbox_profiles.gitconfig import UnreadableConfig, read_config

# Keys whose values are paths: one that cannot be read makes the configuration unreadable.
PATH_KEYS = ("source_dir", "source_dir_local", "rc", "lefthook", "extends", "configs")
# Keys whose value is a command: its first word counts when it is a path; best effort.
COMMAND_KEYS = ("run", "runner")
_WANTED = frozenset((*PATH_KEYS, *COMMAND_KEYS, "remotes"))
REMOTES_DIR = os.path.join(".git", "info", "lefthook-remotes")
_MAX_DEPTH = 10  # extends of extends

Found = dict[str, list[str]]


def config_root(config_file: str) -> str:
    """The repository top a configuration of this name is read from."""
    directory = os.path.dirname(config_file)
    return os.path.dirname(directory) if os.path.basename(directory) == ".config" else directory


def lefthook_paths(config_file: str, home: str) -> list[str]:
    """Every file and folder ``config_file`` (and what it extends, and the remote
    configurations it uses) makes lefthook or its hook read or run. A glob in ``extends``
    gives the folder it searches (whatever comes to match there later counts too).

    >>> import tempfile, os, pathlib
    >>> d = tempfile.mkdtemp(); c = os.path.join(d, "lefthook.yml")
    >>> _ = pathlib.Path(c).write_text("Source_Dir: 'tools/hk' # scripts\\nextends: [cfg/*.yml]\\n")
    >>> sorted(p[len(d):] for p in lefthook_paths(c, "/h"))
    ['/cfg', '/tools/hk']
    """
    root = config_root(config_file)
    out: list[str] = []
    pending = [(config_file, root, 0)]
    seen: set[str] = set()
    while pending:
        path, base, depth = pending.pop()
        if path in seen or depth > _MAX_DEPTH:
            continue
        seen.add(path)
        found = read_lefthook(path)
        for key in ("source_dir", "source_dir_local"):
            out += [os.path.join(root, v) for v in found.get(key, ())]
        for value in found.get("rc", ()):
            out += _shell_path(value, root, home, path, strict=True)
        for key in ("lefthook", *COMMAND_KEYS):
            for value in found.get(key, ()):
                words = value.split()
                if words and "/" in words[0]:
                    out += _shell_path(words[0], root, home, path, strict=key == "lefthook")
        for value in found.get("extends", ()):
            pattern = os.path.join(base, value)
            if glob.has_magic(pattern):
                out.append(_glob_folder(pattern))
                pending += [(p, base, depth + 1) for p in sorted(glob.glob(pattern))]
            else:
                out.append(pattern)
                pending.append((pattern, base, depth + 1))
        if "remotes" in found or "configs" in found:
            names = found.get("configs") or ["lefthook.yml"]
            for remote in _remote_folders(root):
                for name in names:
                    remote_config = os.path.join(remote, name)
                    pending.append((remote_config, os.path.dirname(remote_config), depth + 1))
    return [os.path.normpath(p) for p in out]


def _remote_folders(root: str) -> list[str]:
    folder = os.path.join(root, REMOTES_DIR)
    try:
        return [os.path.join(folder, n) for n in sorted(os.listdir(folder))]
    except OSError:
        return []


def _glob_folder(pattern: str) -> str:
    """The deepest folder of a glob with no wildcard in it."""
    parts = pattern.split(os.sep)
    for i, part in enumerate(parts):
        if glob.has_magic(part):
            return os.sep.join(parts[:i]) or os.sep
    return pattern


def _shell_path(word: str, root: str, home: str, config_file: str, strict: bool) -> list[str]:
    """Where a word the installed hook's shell reads as a path lands (from the
    repository's top, where git runs hooks): ``~`` and ``$HOME`` are the home; any other
    expansion (a variable, a glob, a quote, a blank) is not known here."""
    for prefix in ("~/", "$HOME/", "${HOME}/"):
        if word.startswith(prefix):
            word = os.path.join(home, word[len(prefix) :])
            break
    if re.search(r"[$`~\\*?\[\s'\"]", word):
        if strict:
            raise UnreadableConfig(config_file, f"names {word!r}, which the shell expands")
        return []
    return [os.path.join(root, word)]


def read_lefthook(config_file: str) -> Found:
    """The values of the keys lefthook reads as places, at any depth, by lower-cased key."""
    text = read_config(config_file)
    if not text:
        return {}
    if re.search("[\udc80-\udcff]", text):
        raise UnreadableConfig(config_file, "is not UTF-8")
    text = text.removeprefix("\ufeff")
    ext = os.path.splitext(config_file)[1].lower()
    try:
        if ext == ".toml":
            import tomllib  # lazy: only a directory with a lefthook.toml reads one

            return _collect(tomllib.loads(text), config_file)
        if ext in (".json", ".jsonc"):
            data = json.loads(_strip_jsonc(text) if ext == ".jsonc" else text)
            return _collect(data, config_file)
    except ValueError as exc:  # tomllib.TOMLDecodeError and json.JSONDecodeError are ones
        raise UnreadableConfig(config_file, f"cannot be parsed: {exc}") from None
    return _read_yaml(text, config_file)


def _collect(data: Any, config_file: str, found: Found | None = None) -> Found:
    found = {} if found is None else found
    for key, value in _items(data):
        name = key.casefold()
        if name not in _WANTED:
            _collect(value, config_file, found)
            continue
        values = value if isinstance(value, list) else [value]
        found.setdefault(name, [])
        for item in values:
            # A table of this name (a command called "rc") is no path: its keys are read.
            if item is not None and not isinstance(item, (dict, list)):
                found[name].append(str(item).lower() if isinstance(item, bool) else str(item))
        _collect(value, config_file, found)
    return found


def _items(data: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(data, dict):
        yield from ((str(k), v) for k, v in data.items())
    elif isinstance(data, list):
        for item in data:
            yield from _items(item)


# JSONC as lefthook's reader takes it: comments and trailing commas go, strings stay.
_JSONC_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|//[^\n]*|/\*.*?\*/|,(?=\s*[}\]])', re.S)


def _strip_jsonc(text: str) -> str:
    return _JSONC_TOKEN.sub(lambda m: m.group(0) if m.group(0)[0] == '"' else " ", text)


# -- YAML, for these keys alone ------------------------------------------------------------

_KEY = r"""(?P<key>"(?:[^"\\]|\\.)*"|'(?:[^']|'')*'|[^\s#'"{}\[\],:][^#]*?)"""
_KEY_LINE = re.compile(r"^(?P<lead>[ ]*(?:-[ ]+)*)" + _KEY + r"[ \t]*:(?:[ \t]+(?P<value>.*))?$")
_ITEM_LINE = re.compile(r"^(?P<lead>[ ]*)-(?:[ \t]+(?P<value>.*))?$")
# Any mention of a wanted key as a key (followed by a colon), in any form.
_MENTION = re.compile(
    r"""(?<![\w-])['"]?(""" + "|".join(sorted(_WANTED, key=len, reverse=True)) + r""")['"]?\s*:"""
)


def _read_yaml(text: str, config_file: str) -> Found:
    lines = text.replace("\r\n", "\n").split("\n")
    found: Found = {}
    read: set[int] = set()  # lines read as a key line of a wanted key
    for number, line in enumerate(lines):
        match = _KEY_LINE.match(line)
        if match is None:
            continue
        key = _unquote(match.group("key"), config_file).casefold()
        if key not in _WANTED:
            continue
        read.add(number)
        found.setdefault(key, [])
        strict = key in PATH_KEYS
        value = (match.group("value") or "").strip()
        if value and not value.startswith("#"):
            found.setdefault(key, []).extend(_scalars(value, config_file, strict))
            if strict and _continues(lines, number, len(match.group("lead"))):
                raise UnreadableConfig(config_file, f"line {number + 1}: a {key} over lines")
            continue
        indent = len(match.group("lead"))
        for later in lines[number + 1 :]:
            if not later.strip() or later.lstrip().startswith("#"):
                continue
            item = _ITEM_LINE.match(later)
            deeper = len(later) - len(later.lstrip(" ")) > indent
            if item is not None and len(item.group("lead")) >= indent:
                found.setdefault(key, []).extend(
                    _scalars((item.group("value") or "").strip(), config_file, strict)
                )
            elif deeper and strict and _KEY_LINE.match(later) is None:
                # A scalar over several lines (a mapping of this name, a command called
                # "rc", is no path: its own keys are read as lines of their own)
                raise UnreadableConfig(config_file, f"line {number + 1}: a {key} not read here")
            else:
                break
    for number, line in enumerate(lines):
        low = re.sub(r"(^|\s)#.*", "", line.casefold())  # a comment may name anything
        for mention in _MENTION.finditer(low):
            if mention.group(1) in PATH_KEYS and number not in read:
                where = f"line {number + 1}"
                raise UnreadableConfig(config_file, f"{where}: a {mention.group(1)} not read here")
    return found


def _continues(lines: list[str], number: int, indent: int) -> bool:
    for later in lines[number + 1 :]:
        if not later.strip() or later.lstrip().startswith("#"):
            continue
        return len(later) - len(later.lstrip(" ")) > indent and not later.lstrip().startswith("-")
    return False


def _scalars(value: str, config_file: str, strict: bool) -> list[str]:
    """The plain or quoted scalars of a value, or of a one-line flow sequence of them."""
    if value.startswith("[") and "]" in value:
        inner, rest = value[1:].split("]", 1)
        if rest.strip() and not rest.strip().startswith("#"):
            return _refuse(value, config_file, strict)
        items = [i.strip() for i in inner.split(",") if i.strip()]
        return [s for i in items for s in _scalars(i, config_file, strict)]
    if value[0] in "\"'":
        quoted = re.match(r""""(?:[^"\\]|\\.)*"|'(?:[^']|'')*'""", value)
        if quoted is None:
            return _refuse(value, config_file, strict)
        rest = value[quoted.end() :].strip()
        if rest and not rest.startswith("#"):
            return _refuse(value, config_file, strict)
        return [_unquote(quoted.group(0), config_file)]
    if value[0] in "{[*&!|>%@`":
        return _refuse(value, config_file, strict)
    plain = re.split(r"\s#", value, maxsplit=1)[0].strip()
    return [] if plain in ("~", "null", "Null", "NULL") else [plain]


def _refuse(value: str, config_file: str, strict: bool) -> list[str]:
    if strict:
        raise UnreadableConfig(config_file, f"has a value not read here: {value[:80]!r}")
    return []


def _unquote(scalar: str, config_file: str) -> str:
    if scalar.startswith("'"):
        return scalar[1:-1].replace("''", "'")
    if scalar.startswith('"'):
        try:
            return str(json.loads(scalar))  # YAML's escapes that JSON shares
        except ValueError:
            raise UnreadableConfig(
                config_file, f"has a string not read here: {scalar[:80]!r}"
            ) from None
    return scalar.strip()
