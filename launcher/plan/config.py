"""``mcp-servers.json``: where it is found, reading and validating it (once per content:
the cache), ``${VAR}`` expansion. Its models are in :mod:`launcher.plan.config_schema`."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any

from launcher.plan.config_schema import CACHED, UNION_TAGS, ConfigFile, ServerConfig, json_name
from launcher.plan.remote_plan import checked_remote
from launcher.shared import dirs
from launcher.shared.user_errors import CallerNeeded, ConfigError
from policy.cache import ContentCache, encode, rebuild
from policy.json_text import NotJson, parse_json
from policy.loader import describe_validation_error, json_path
from policy.schema import pyd, validate
from policy.variables import PlaceholderError, placeholder_names
from policy.variables import expand as expand_placeholders
from sandbox_profiles.records import frozen

# How the bundled default config is named as a config's source.
BUNDLED_SOURCE = "bundled default"
# ``${caller}`` as it stands in a plan made for every caller (each gets its own name there).
CALLER = "${caller}"


@frozen
class LoadedConfig:
    """A server config file, read, validated and expanded, with its warnings."""

    path: Path
    source: str  # how it was found: --config, $IRONCURTAIN_CONFIG, ./, user, bundled
    servers: dict[str, ServerConfig]
    warnings: tuple[str, ...]
    key: str = "mcpServers"  # the top-level key the file used, for JSON paths
    # Servers whose placeholders cannot be expanded here (an unset variable), with why: an
    # error only for a session that starts them, so one server's secret left unset does
    # not stop every other server of the file.
    broken: Mapping[str, ConfigError] = field(default_factory=dict)
    # Servers whose values name ``${caller}``, with the JSON path of the first that does.
    per_caller: Mapping[str, str] = field(default_factory=dict)


def find_config(explicit: str | None, env: Mapping[str, str] | None = None) -> tuple[Path, str]:
    """The config file to use: the one given, $IRONCURTAIN_CONFIG, ./mcp-servers.json,
    the user's, then the bundled default."""
    env = os.environ if env is None else env
    if explicit:
        return Path(explicit), "--config"
    if env.get("IRONCURTAIN_CONFIG"):
        return Path(env["IRONCURTAIN_CONFIG"]), "$IRONCURTAIN_CONFIG"
    local = Path("mcp-servers.json")
    if local.is_file():
        return local, "./mcp-servers.json"
    user = dirs.config_dir() / "mcp-servers.json"
    if user.is_file():
        return user, "user config"
    return dirs.bundled_config(), BUNDLED_SOURCE


def expand(
    value: str,
    variables: Mapping[str, str],
    where: Callable[[], str],
    file: str,
    uses: list[str] | None = None,
) -> str:
    """Expand ``${VAR}``, ``${VAR:-default}``; ``${workspace}`` and ``${caller}`` come from
    ``variables`` (``uses``: where ``${caller}`` is named, appended to).

    >>> expand("${A}-${B:-x}", {"A": "1"}, lambda: "$", "f")
    '1-x'
    """
    if uses is not None and "caller" in placeholder_names(value):
        uses.append(where())
    try:
        return expand_placeholders(value, variables)
    except PlaceholderError as exc:
        if "caller" not in variables and "caller" in placeholder_names(value):
            raise CallerNeeded(file, where()) from None
        raise ConfigError(file, where(), str(exc)) from None


def _expand_path(
    value: str,
    variables: Mapping[str, str],
    where: Callable[[], str],
    file: str,
    uses: list[str] | None = None,
) -> str:
    out = os.path.expanduser(expand(value, variables, where, file, uses))
    if "\0" in out:
        raise ConfigError(file, where(), f"{value!r} holds a NUL character, which no path can")
    if not os.path.isabs(out):
        raise ConfigError(
            file,
            where(),
            f"relative path {value!r} cannot be resolved: sandbox paths and cwd must be absolute "
            "or start with ~ or ${workspace}",
        )
    return os.path.normpath(out)


# How deep the keys MCP clients share lie: the file's own and a server entry's (``$.mcpServers.X``).
# Below them (``sandbox`` and the rest of ironcurtain's own objects) every key narrows or
# widens what a server may do, so an unknown one there is a mistake, never a warning.
_SHARED_DEPTH = 2
# A server entry's own keys that narrow what its server may do, and the keys of ``sandbox``
# (written one level too high), each with where it belongs: a key close to one of the first
# is that key misspelt (``sandbx``, ``Sandbox``), one of the others spelt any way (``denyRead``,
# ``deny_read`` beside ``command``) is misplaced, and ignoring it would drop the restriction,
# so it is an error even where unknown keys only warn.
_NARROWING = {
    "sandbox": "sandbox",
    "clientRequests": "clientRequests",
    "maskSecrets": "maskSecrets",
    **{k: f"sandbox.{k}" for k in ("filesystem", "network", "limits")},
    **{k: f"sandbox.filesystem.{k}" for k in ("allowRead", "denyRead", "allowWrite", "denyWrite")},
    **{k: f"sandbox.network.{k}" for k in ("allowedDomains", "deniedDomains")},
}


def _close_matches(key: str, known: Sequence[str]) -> list[str]:
    """The known key nearest ``key``, if one is near (difflib loaded only for a key that is
    not known: a config without mistakes never needs it)."""
    import difflib

    return difflib.get_close_matches(key, known, n=1)


def _misplaced_narrowing(key: str) -> str | None:
    """Where server-entry key ``key`` (not a known one) belongs when it is one of
    :data:`_NARROWING` misspelt or written too high (None: it is not).

    >>> [_misplaced_narrowing(k) for k in ("Sandbox", "sand_box", "denyRead", "headers")]
    ['sandbox', 'sandbox', 'sandbox.filesystem.denyRead', None]
    """
    folded = {k.lower(): k for k in _NARROWING}
    own = [k for k, place in _NARROWING.items() if k == place]  # misspelt, not only misplaced
    near = _close_matches(key, own)
    match = near[0] if near else folded.get(key.lower().replace("_", "").replace("-", ""))
    return None if match is None else _NARROWING[match]


# An unknown key's location, the JSON names known where it stands, and the other spelling
# of the same key when the key is known but given twice (``deny_read`` and ``denyRead``).
_Unknown = tuple[tuple[str | int, ...], list[str], str | None]


def _unknown_keys(value: object, raw: object, loc: tuple[str | int, ...]) -> list[_Unknown]:
    """Each key in ``raw`` (the file's JSON) that ``value`` (what it was validated into) has
    no field for, and each field given under both its spellings (one would be dropped)."""
    if is_dataclass(value) and isinstance(raw, dict):
        names = {f.name: json_name(f.name) for f in fields(value)}
        known = set(names) | set(names.values())
        shown = sorted(names.values())
        found: list[_Unknown] = [((*loc, key), shown, None) for key in raw if key not in known]
        found += [
            ((*loc, name), shown, alias)
            for name, alias in names.items()
            if name != alias and name in raw and alias in raw
        ]
        for name, alias in names.items():
            key = alias if alias in raw else name
            if key in raw:
                found += _unknown_keys(getattr(value, name), raw[key], (*loc, key))
        return found
    if isinstance(value, dict) and isinstance(raw, dict):
        return [
            path
            for key, item in value.items()
            for path in _unknown_keys(item, raw.get(key), (*loc, key))
        ]
    return []


def _refuse_unknown(file: str, loc: tuple[str | int, ...], known: list[str]) -> ConfigError:
    """The error for an unknown key inside ironcurtain's own objects, naming the nearest
    known key (or all of them, when none is near).

    >>> loc = ("mcpServers", "a", "sandbox", "denyReed")
    >>> print(_refuse_unknown("c.json", loc, ["denyRead"]))
    c.json: $.mcpServers.a.sandbox.denyReed: unknown key "denyReed": did you mean "denyRead"?
    """
    key = str(loc[-1])
    near = _close_matches(key, known)
    hint = f'did you mean "{near[0]}"?' if near else "known keys: " + ", ".join(known)
    return ConfigError(file, json_path(loc), f'unknown key "{key}": {hint}')


class _Object(dict[str, Any]):
    """A JSON object as read, with the keys it held more than once (JSON keeps the last)."""

    twice: list[str]


def _object(pairs: list[tuple[str, Any]]) -> _Object:
    found = _Object()
    found.twice = []
    for key, value in pairs:
        if key in found:
            found.twice.append(key)
        found[key] = value
    return found


def _duplicates(value: object, loc: tuple[str | int, ...]) -> Iterator[tuple[str | int, ...]]:
    """Where ``value`` (a file read with :func:`_object`) holds a key twice."""
    if isinstance(value, _Object):
        yield from ((*loc, key) for key in value.twice)
        for key, item in value.items():
            yield from _duplicates(item, (*loc, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _duplicates(item, (*loc, index))


def content_cache(directory: Path) -> ContentCache:
    """Where validated configs are kept across starts: keyed by the file's bytes and the
    code that validated it (this module's included)."""
    here = Path(__file__).resolve()
    return ContentCache(directory, "config", (here, here.with_name("config_schema.py")))


def _parse(path: Path, cache: Path | None) -> tuple[ConfigFile, list[str]]:
    """The file validated, and the JSON paths of its unknown keys. With a ``cache``
    directory, a file validated before (the same bytes, the same code) is read from there
    without validating it again."""
    file = str(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(file, "", "no such file") from None
    except OSError as exc:
        raise ConfigError(file, "", f"cannot read: {exc.strerror}") from None
    store = content_cache(cache) if cache is not None else None
    key = store.key(raw) if store else ""
    known = rebuild(store.get(key), CACHED, ConfigFile, list) if store else None
    if known is not None and all(isinstance(path, str) for path in known[1]):
        return known[0], known[1]
    try:
        data: Any = parse_json(raw, object_pairs_hook=_object)
    except NotJson as exc:
        raise ConfigError(file, exc.location, exc.detail) from None
    if not isinstance(data, dict):
        raise ConfigError(file, "$", f"expected an object, found {type(data).__name__}")
    if "mcpServers" not in data and "servers" not in data:
        raise ConfigError(file, "$", 'expected a "mcpServers" (or "servers") object')
    twice = next(_duplicates(data, ()), None)
    if twice is not None:  # the first would be dropped silently (a restriction, a sandbox)
        detail = f'"{twice[-1]}" is given twice: write it once (JSON keeps only the last)'
        raise ConfigError(file, json_path(twice), detail)
    try:
        parsed = validate(ConfigFile, data)
    except pyd.ValidationError as exc:
        loc, detail = describe_validation_error(exc, UNION_TAGS)
        raise ConfigError(file, loc, detail) from None
    unknown: list[str] = []
    for where, known_names, also in _unknown_keys(parsed, data, ()):
        if also is not None:  # validation read one of the two and dropped the other
            detail = f'"{where[-1]}" is given twice, also as "{also}": write it once'
            raise ConfigError(file, json_path(where), detail)
        if len(where) > _SHARED_DEPTH + 1:
            raise _refuse_unknown(file, where, known_names)
        place = _misplaced_narrowing(str(where[-1])) if len(where) == _SHARED_DEPTH + 1 else None
        if place is not None:
            detail = f'unknown key "{where[-1]}": did you mean "{place}"?'
            raise ConfigError(file, json_path(where), detail)
        unknown.append(json_path(where))
    if store:
        store.put(key, encode([parsed, unknown]))
    return parsed, unknown


def load_config(
    path: Path,
    source: str,
    workspace: str,
    env: Mapping[str, str] | None = None,
    cache: Path | None = None,
    caller: str | None = None,
) -> LoadedConfig:
    """Read, validate and expand a config; every problem is a :class:`ConfigError`.
    ``caller``: what ``${caller}`` stands for (a caller's name made safe for a path, or
    :data:`CALLER` in a plan for every caller); None: the session has no caller, and a
    ``${caller}`` without a default is an error for a server that names it."""
    file = str(path)
    parsed, unknown = _parse(path, cache)
    key = "mcpServers" if parsed.mcp_servers is not None else "servers"
    raw = parsed.mcp_servers if parsed.mcp_servers is not None else parsed.servers
    assert raw is not None
    warnings = [f"{file}: {loc}: unknown key, ignored" for loc in unknown]
    variables = dict(os.environ if env is None else env)
    variables["workspace"] = workspace
    variables.pop("caller", None)  # never an environment variable's
    if caller is not None:
        variables["caller"] = caller
    servers: dict[str, ServerConfig] = {}
    broken: dict[str, ConfigError] = {}
    per_caller: dict[str, str] = {}
    for name, server in raw.items():
        server = checked_remote(server, file, (key, name))
        uses: list[str] = []
        try:
            servers[name] = _expand_server(server, (key, name), variables, file, uses)
        except ConfigError as exc:
            servers[name], broken[name] = server, exc
        if uses:
            per_caller[name] = uses[0]
    return LoadedConfig(path, source, servers, tuple(warnings), key, broken, per_caller)


def _expand_server(
    server: ServerConfig,
    loc: tuple[str, ...],
    variables: Mapping[str, str],
    file: str,
    uses: list[str],
) -> ServerConfig:
    def at(*parts: str | int) -> Callable[[], str]:
        return lambda: json_path((*loc, *parts))

    def one(value: str, *parts: str | int) -> str:
        return expand(value, variables, at(*parts), file, uses)

    update: dict[str, Any] = {
        "command": one(server.command, "command") if server.command is not None else None,
        "args": [one(a, "args", i) for i, a in enumerate(server.args)],
        "env": {k: one(v, "env", k) for k, v in server.env.items()},
        "cwd": _expand_path(server.cwd, variables, at("cwd"), file, uses) if server.cwd else None,
    }
    if server.sandbox is not False:
        fs = server.sandbox.filesystem
        fs_update = {
            name: [
                _expand_path(p, variables, at("sandbox", "filesystem", alias, i), file, uses)
                for i, p in enumerate(getattr(fs, name))
            ]
            for name, alias in (
                ("allow_read", "allowRead"),
                ("deny_read", "denyRead"),
                ("allow_write", "allowWrite"),
                ("deny_write", "denyWrite"),
                ("workspace", "workspace"),
            )
        }
        update["sandbox"] = replace(server.sandbox, filesystem=replace(fs, **fs_update))
    return replace(server, **update)


def warn(message: str) -> None:
    print(f"ironcurtain: warning: {message}", file=sys.stderr)


def load_and_warn(explicit: str | None, workspace: str, caller: str | None = None) -> LoadedConfig:
    """Find and load the config, warning once on stderr about each unknown key."""
    path, source = find_config(explicit)
    config = load_config(path, source, workspace, cache=dirs.cache_dir(), caller=caller)
    for message in config.warnings:
        warn(message)
    return config
