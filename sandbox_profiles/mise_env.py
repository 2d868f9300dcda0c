"""What a present mise configuration, or ``.tool-versions``, makes mise load on ``cd``.

mise, activated in the user's shell, reads its configuration on every ``cd`` into the
directory (and its ``[env]`` without asking, unless the user turned trust checks on): its
``[env]`` directives load a ``.env``-style file (``_.file``), source a shell script
(``_.source``) and put directories first on ``PATH`` (``_.path``); a tool version
``path:DIR`` (in ``[tools]`` or ``.tool-versions``) puts ``DIR``'s programs on ``PATH``. So
each such place in a writable root is protected as the configuration is. Relative paths
are taken from the configuration's directory and from its project root (``.config/mise``,
``.mise`` and ``mise`` are not the root: the directory holding them is).

What cannot be known from the text (a template other than ``{{config_root}}``, a
configuration that is not TOML) raises :class:`UnreadableConfig`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from sandbox_profiles.gitconfig import UnreadableConfig, read_bounded

MAX_BYTES = 1 << 20
_ROOT_SUFFIXES = (("", ".config", "mise"), ("", ".config"), ("", "mise"), ("", ".mise"))


def mise_paths(config: str) -> list[tuple[str, str]]:
    """(path, what loads it) of every place a mise configuration (TOML) makes mise load."""
    data = _toml(config)
    found: list[tuple[str, str]] = []
    bases = _bases(config)
    for key in ("env_file", "dotenv", "env_path"):  # the older top-level forms
        for value in _values(data.get(key)):
            found += [(p, f"{key} in {config}") for p in _resolve(value, bases, config)]
    env = data.get("env", {})
    for table in env if isinstance(env, list) else [env]:
        directives = table.get("_", {}) if isinstance(table, dict) else {}
        for key in ("file", "source", "path"):
            for value in _values(directives.get(key) if isinstance(directives, dict) else None):
                found += [(p, f"env._.{key} in {config}") for p in _resolve(value, bases, config)]
    tools = data.get("tools", {})
    for version in _tool_versions(tools if isinstance(tools, dict) else {}):
        found += [(p, f"tools path: in {config}") for p in _resolve(version, bases, config)]
    return list(dict.fromkeys(found))


def configs_in(directory: str) -> list[str]:
    """The configurations mise reads in its own folder (``.mise``, ``.config/mise``)."""
    found = []
    for sub in ("", "conf.d"):
        try:
            names = sorted(os.listdir(os.path.join(directory, sub)))
        except OSError:
            continue
        found += [os.path.join(directory, sub, n) for n in names if n.endswith(".toml")]
    return [p for p in found if os.path.isfile(p)]


def tool_versions_paths(path: str) -> list[tuple[str, str]]:
    """The ``path:DIR`` versions of a ``.tool-versions`` file (asdf's format)."""
    text = read_bounded(path, MAX_BYTES).decode("utf-8", "surrogateescape")
    found: list[tuple[str, str]] = []
    for line in text.splitlines():
        for word in line.split("#", 1)[0].split()[1:]:
            if word.startswith("path:"):
                found += [(p, f"path: in {path}") for p in _resolve(word[5:], _bases(path), path)]
    return found


def _tool_versions(tools: dict[str, object]) -> Iterator[str]:
    for value in tools.values():
        for item in value if isinstance(value, list) else [value]:
            version = item.get("version") if isinstance(item, dict) else item
            if isinstance(version, str) and version.startswith("path:"):
                yield version[5:]


def _values(value: object) -> list[str]:
    """A directive's paths: a string, a list, or tables with a ``path``."""
    items = value if isinstance(value, list) else [] if value is None else [value]
    found = []
    for item in items:
        path = item.get("path") if isinstance(item, dict) else item
        found += (
            _values(path) if isinstance(path, list) else [path] if isinstance(path, str) else []
        )
    return found


def _bases(config: str) -> list[str]:
    """The configuration's directory, and its project root when that is another."""
    directory = os.path.dirname(os.path.abspath(config))
    bases = [directory]
    for suffix in _ROOT_SUFFIXES:
        tail = "/".join(suffix)
        if directory.endswith(tail):
            bases.append(directory[: -len(tail)] or "/")
            break
    return list(dict.fromkeys(bases))


def _resolve(value: str, bases: list[str], config: str) -> list[str]:
    for root in ("{{config_root}}", "{{ config_root }}"):
        if value.startswith(root):
            return [os.path.normpath(bases[-1] + value[len(root) :])]
    if "{{" in value or "{%" in value or "$" in value:
        raise UnreadableConfig(config, f"{value!r} is not a plain path")
    if value == "~" or value.startswith("~/"):
        return [os.path.normpath(os.path.expanduser(value))]
    return [os.path.normpath(os.path.join(base, value)) for base in bases]


def _toml(path: str) -> dict[str, object]:
    import tomllib  # lazy: only a directory with a mise file reads one

    try:
        return tomllib.loads(read_bounded(path, MAX_BYTES).decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UnreadableConfig(path, f"cannot be read as TOML: {exc}") from None
