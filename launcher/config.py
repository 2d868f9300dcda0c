"""``mcp-servers.json``: models, lookup order, ``${VAR}`` expansion."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Literal

from launcher import dirs
from launcher.errors import ConfigError
from policy.cache import ContentCache, decode, encode
from policy.loader import describe_validation_error, json_path
from policy.schema import pyd, validate
from policy.variables import PlaceholderError
from policy.variables import expand as expand_placeholders


def _camel(name: str) -> str:
    """A field's JSON name: ``allow_read`` is written ``allowRead``.

    >>> _camel("allow_read"), _camel("command")
    ('allowRead', 'command')
    """
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


# What pydantic validates each class with. Unknown keys pass validation and are warned
# about afterwards (:func:`_unknown_keys`); the Python names are accepted too.
_LENIENT = {"alias_generator": _camel, "populate_by_name": True, "extra": "ignore"}


@dataclass(frozen=True, kw_only=True)
class FilesystemSandbox:
    """``sandbox.filesystem``: host paths shown to the server read-only or writable, and
    paths hidden or kept read-only inside those."""

    __pydantic_config__ = _LENIENT

    allow_read: list[str] = field(default_factory=list)
    deny_read: list[str] = field(default_factory=list)
    allow_write: list[str] = field(default_factory=list)
    deny_write: list[str] = field(default_factory=list)


def _addresses(value: dict[str, str]) -> dict[str, str]:
    for name, address in value.items():
        try:
            ipaddress.ip_address(address.strip("[]"))
        except ValueError:
            raise ValueError(
                f"hosts[{name!r}]: {address!r} is not an IP address (hosts pins names to "
                'addresses, like {"db.internal": "10.0.0.5"})'
            ) from None
    return {k: v.strip("[]") for k, v in value.items()}


@dataclass(frozen=True, kw_only=True)
class NetworkSandbox:
    """``sandbox.network``: the domains the server may reach through its egress proxy,
    and names pinned to addresses."""

    __pydantic_config__ = _LENIENT

    allowed_domains: list[str] = field(default_factory=list)
    denied_domains: list[str] = field(default_factory=list)
    hosts: Annotated[dict[str, str], pyd.AfterValidator(_addresses)] = field(default_factory=dict)


_SIZE = re.compile(r"(\d+)\s*([KMGT]?)(i?B)?", re.IGNORECASE)


def parse_size(value: int | str) -> int:
    """Bytes from ``536870912``, ``"512M"``, ``"2GiB"`` (powers of 1024).

    >>> parse_size("512M"), parse_size("1GiB"), parse_size(4096)
    (536870912, 1073741824, 4096)
    """
    if isinstance(value, int):
        return value
    match = _SIZE.fullmatch(value.strip())
    if not match:
        raise ValueError(f'{value!r} is not a size (examples: 536870912, "512M", "2G")')
    scale: int = 1 << (10 * " KMGT".index((match.group(2) or " ").upper()))
    return int(match.group(1)) * scale


# On unless the config says otherwise, far above what the reference servers use (measured:
# under 120 MiB resident each, fetch up to 2.5 GiB on a 10 MiB page; at most 3 processes,
# 14 threads, 23 open files). CPU time is not limited: a long session uses it legitimately.
DEFAULT_LIMITS: dict[str, int | None] = {
    "memory": 4 << 30,
    "open_files": 4096,
    "processes": 256,
    "cpu_seconds": None,
    "file_size": 1 << 30,
}


def _lifted(value: object) -> object:
    """``false`` lifts a limit (as ``null`` does); ``true`` is no limit at all."""
    if value is False:
        return None
    if value is True:
        raise ValueError("true is not a limit: give a number, or false to lift it")
    return value


def _size(value: object) -> object:
    """A size limit in bytes, from a number or a text with a K/M/G/T suffix."""
    value = _lifted(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # 1e9 is a number of bytes too
    if value is None or not isinstance(value, (int, str)):
        return value  # anything else is refused as not an integer
    size = parse_size(value)
    if size < 1024 * 1024:
        raise ValueError(f"{value!r} is too small: at least 1M")
    return size


@dataclass(frozen=True, kw_only=True)
class LimitsConfig:
    """``sandbox.limits``: memory and file sizes in bytes or with K/M/G/T suffixes. A field
    left out has its default (:data:`DEFAULT_LIMITS`); ``null`` or ``false`` lifts it."""

    __pydantic_config__ = _LENIENT

    memory: Annotated[int | None, pyd.BeforeValidator(_size)] = DEFAULT_LIMITS["memory"]
    open_files: Annotated[int | None, pyd.Field(ge=16), pyd.BeforeValidator(_lifted)] = (
        DEFAULT_LIMITS["open_files"]
    )
    processes: Annotated[int | None, pyd.Field(ge=1), pyd.BeforeValidator(_lifted)] = (
        DEFAULT_LIMITS["processes"]
    )
    cpu_seconds: Annotated[int | None, pyd.Field(ge=1), pyd.BeforeValidator(_lifted)] = (
        DEFAULT_LIMITS["cpu_seconds"]
    )
    file_size: Annotated[int | None, pyd.BeforeValidator(_size)] = DEFAULT_LIMITS["file_size"]


@dataclass(frozen=True, kw_only=True)
class SandboxConfig:
    """``sandbox``: what the server's sandbox shows it, where it may connect, its limits."""

    __pydantic_config__ = _LENIENT

    filesystem: FilesystemSandbox = field(default_factory=FilesystemSandbox)
    network: NetworkSandbox | Literal[False] | None = None
    # false: no limits at all.
    limits: LimitsConfig | Literal[False] = field(default_factory=LimitsConfig)


@dataclass(frozen=True, kw_only=True)
class RestartConfig:
    """``restart``: start a server again after it exits, waiting ``backoffSeconds`` (doubled
    each time, at most 30 s) and giving up after ``maxRestarts`` restarts in a session."""

    __pydantic_config__ = _LENIENT

    max_restarts: Annotated[int, pyd.Field(ge=1)] = 3
    backoff_seconds: Annotated[float, pyd.Field(gt=0)] = 1.0


@dataclass(frozen=True, kw_only=True)
class ClientRequestsConfig:
    """``clientRequests``: what a server may ask of the client through ironcurtain.

    ``elicitation`` (allow by default): the question goes to the human, named as the
    server's, who can decline; it shows the server only what the human types in.
    ``sampling`` (ask by default): a server's text is put to the user's model and the
    server reads the answer, at the user's cost, so a human approves each one first
    (through the approval channels) unless this says ``allow``."""

    __pydantic_config__ = _LENIENT

    elicitation: Literal["allow", "deny"] = "allow"
    sampling: Literal["allow", "ask", "deny"] = "ask"


@dataclass(frozen=True, kw_only=True)
class ServerConfig:
    """One server of the config: how to start it and what its sandbox holds."""

    __pydantic_config__ = _LENIENT

    command: Annotated[str, pyd.Field(min_length=1)]
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    description: str | None = None
    disabled: bool = False
    timeout: Annotated[float | None, pyd.Field(gt=0)] = None
    sandbox: SandboxConfig | Literal[False] = field(default_factory=SandboxConfig)
    restart: RestartConfig | bool = False
    client_requests: ClientRequestsConfig = field(default_factory=ClientRequestsConfig)
    # Credentials in what the server sends the client are masked (policy.secrets).
    mask_secrets: bool = True

    @property
    def restart_policy(self) -> RestartConfig | None:
        if self.restart is True:
            return RestartConfig()
        return self.restart or None

    @property
    def sandboxed(self) -> bool:
        return self.sandbox is not False

    @property
    def allowed_domains(self) -> list[str]:
        if self.sandbox is False:
            return ["*"]
        net = self.sandbox.network
        return list(net.allowed_domains) if net else []


def _names(value: dict[str, ServerConfig] | None) -> dict[str, ServerConfig] | None:
    for name in value or {}:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or "__" in name or name.endswith("_"):
            raise ValueError(
                f"server name {name!r} must use letters, digits, '.', '-' or single '_' "
                "inside it (tools are exposed as <server>__<tool>: 'git_' with tool 'push' "
                "and 'git' with tool '_push' would both be git___push)"
            )
    return value


@dataclass(frozen=True, kw_only=True)
class ConfigFile:
    """``mcp-servers.json``: its servers, under ``mcpServers`` (or VS Code's ``servers``)."""

    __pydantic_config__ = _LENIENT

    mcp_servers: Annotated[dict[str, ServerConfig] | None, pyd.AfterValidator(_names)] = None
    servers: Annotated[dict[str, ServerConfig] | None, pyd.AfterValidator(_names)] = None


# Every class a cached config is built from (policy.cache.decode constructs only these).
_CACHED = (
    ConfigFile,
    ServerConfig,
    SandboxConfig,
    FilesystemSandbox,
    NetworkSandbox,
    LimitsConfig,
    RestartConfig,
    ClientRequestsConfig,
)


_UNION_TAGS = frozenset({"SandboxConfig", "NetworkSandbox", "RestartConfig", "LimitsConfig"})


@dataclass(frozen=True)
class LoadedConfig:
    """A server config file, read, validated and expanded, with its warnings."""

    path: Path
    source: str  # how it was found: --config, $IRONCURTAIN_CONFIG, ./, user, bundled
    servers: dict[str, ServerConfig]
    warnings: tuple[str, ...]
    key: str = "mcpServers"  # the top-level key the file used, for JSON paths


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
        return user, str(user)
    return dirs.bundled_config(), "bundled default"


def expand(value: str, variables: Mapping[str, str], where: Callable[[], str], file: str) -> str:
    """Expand ``${VAR}``, ``${VAR:-default}``; ``${workspace}`` comes from ``variables``.

    >>> expand("${A}-${B:-x}", {"A": "1"}, lambda: "$", "f")
    '1-x'
    """
    try:
        return expand_placeholders(value, variables)
    except PlaceholderError as exc:
        raise ConfigError(file, where(), str(exc)) from None


def _expand_path(
    value: str, variables: Mapping[str, str], where: Callable[[], str], file: str
) -> str:
    out = os.path.expanduser(expand(value, variables, where, file))
    if not os.path.isabs(out):
        raise ConfigError(
            file,
            where(),
            f"relative path {value!r} cannot be resolved: sandbox paths and cwd must be absolute "
            "or start with ~ or ${workspace}",
        )
    return os.path.normpath(out)


def _unknown_keys(value: object, raw: object, loc: tuple[str | int, ...]) -> list[str]:
    """The JSON paths of the keys in ``raw`` (the file's JSON) that ``value`` (what it
    was validated into) has no field for."""
    if is_dataclass(value) and isinstance(raw, dict):
        found: list[str] = []
        names = {f.name: _camel(f.name) for f in fields(value)}
        known = set(names) | set(names.values())
        found += [json_path((*loc, key)) for key in raw if key not in known]
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


def content_cache(directory: Path) -> ContentCache:
    """Where validated configs are kept across starts: keyed by the file's bytes and the
    code that validated it (this module's included)."""
    return ContentCache(directory, "config", (Path(__file__).resolve(),))


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
    known = _from_plain(store.get(key)) if store else None
    if known is not None:
        return known
    try:
        data: Any = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(file, f"byte {exc.start}", "not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(
            file, f"line {exc.lineno} column {exc.colno}", f"invalid JSON: {exc.msg}"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(file, "$", f"expected an object, found {type(data).__name__}")
    if "mcpServers" not in data and "servers" not in data:
        raise ConfigError(file, "$", 'expected a "mcpServers" (or "servers") object')
    try:
        parsed = validate(ConfigFile, data)
    except pyd.ValidationError as exc:
        loc, detail = describe_validation_error(exc, _UNION_TAGS)
        raise ConfigError(file, loc, detail) from None
    unknown = _unknown_keys(parsed, data, ())
    if store:
        store.put(key, encode([parsed, unknown]))
    return parsed, unknown


def _from_plain(data: Any) -> tuple[ConfigFile, list[str]] | None:
    """What :func:`_parse` cached, built again (the file was validated before it was
    written); None for anything else."""
    if data is None:
        return None
    try:
        parsed, unknown = decode(data, _CACHED)
    except (TypeError, ValueError):
        return None
    if not isinstance(parsed, ConfigFile) or not isinstance(unknown, list):
        return None
    if not all(isinstance(path, str) for path in unknown):
        return None
    return parsed, unknown


def load_config(
    path: Path,
    source: str,
    workspace: str,
    env: Mapping[str, str] | None = None,
    cache: Path | None = None,
) -> LoadedConfig:
    """Read, validate and expand a config; every problem is a :class:`ConfigError`."""
    file = str(path)
    parsed, unknown = _parse(path, cache)
    key = "mcpServers" if parsed.mcp_servers is not None else "servers"
    raw = parsed.mcp_servers if parsed.mcp_servers is not None else parsed.servers
    assert raw is not None
    warnings = [f"{file}: {loc}: unknown key, ignored" for loc in unknown]
    variables = dict(os.environ if env is None else env)
    variables["workspace"] = workspace
    servers: dict[str, ServerConfig] = {}
    for name, server in raw.items():
        servers[name] = _expand_server(server, (key, name), variables, file)
    return LoadedConfig(path, source, servers, tuple(warnings), key)


def _expand_server(
    server: ServerConfig, loc: tuple[str, ...], variables: Mapping[str, str], file: str
) -> ServerConfig:
    def at(*parts: str | int) -> Callable[[], str]:
        return lambda: json_path((*loc, *parts))

    update: dict[str, Any] = {
        "command": expand(server.command, variables, at("command"), file),
        "args": [expand(a, variables, at("args", i), file) for i, a in enumerate(server.args)],
        "env": {k: expand(v, variables, at("env", k), file) for k, v in server.env.items()},
        "cwd": _expand_path(server.cwd, variables, at("cwd"), file) if server.cwd else None,
    }
    if server.sandbox is not False:
        fs = server.sandbox.filesystem
        fs_update = {
            name: [
                _expand_path(p, variables, at("sandbox", "filesystem", alias, i), file)
                for i, p in enumerate(getattr(fs, name))
            ]
            for name, alias in (
                ("allow_read", "allowRead"),
                ("deny_read", "denyRead"),
                ("allow_write", "allowWrite"),
                ("deny_write", "denyWrite"),
            )
        }
        update["sandbox"] = replace(server.sandbox, filesystem=replace(fs, **fs_update))
    return replace(server, **update)


def warn(message: str) -> None:
    print(f"ironcurtain: warning: {message}", file=sys.stderr)


def load_and_warn(explicit: str | None, workspace: str) -> LoadedConfig:
    """Find and load the config, warning once on stderr about each unknown key."""
    path, source = find_config(explicit)
    config = load_config(path, source, workspace, cache=dirs.cache_dir())
    for message in config.warnings:
        warn(message)
    return config
