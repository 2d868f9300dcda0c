"""``mcp-servers.json``: models, lookup order, ``${VAR}`` expansion."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from launcher import dirs
from launcher.errors import ConfigError
from policy.loader import describe_validation_error, json_path
from policy.variables import PlaceholderError
from policy.variables import expand as expand_placeholders


class _Model(BaseModel):
    # Unknown keys are kept aside so they can be warned about, then ignored.
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class FilesystemSandbox(_Model):
    allow_read: list[str] = Field(default_factory=list, alias="allowRead")
    deny_read: list[str] = Field(default_factory=list, alias="denyRead")
    allow_write: list[str] = Field(default_factory=list, alias="allowWrite")
    deny_write: list[str] = Field(default_factory=list, alias="denyWrite")


class NetworkSandbox(_Model):
    allowed_domains: list[str] = Field(default_factory=list, alias="allowedDomains")
    denied_domains: list[str] = Field(default_factory=list, alias="deniedDomains")
    hosts: dict[str, str] = Field(default_factory=dict)

    @field_validator("hosts")
    @classmethod
    def _addresses(cls, value: dict[str, str]) -> dict[str, str]:
        for name, address in value.items():
            try:
                ipaddress.ip_address(address.strip("[]"))
            except ValueError:
                raise ValueError(
                    f"hosts[{name!r}]: {address!r} is not an IP address (hosts pins names to "
                    'addresses, like {"db.internal": "10.0.0.5"})'
                ) from None
        return {k: v.strip("[]") for k, v in value.items()}


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


class LimitsConfig(_Model):
    """``sandbox.limits``: memory and file sizes in bytes or with K/M/G/T suffixes. A field
    left out has its default (:data:`DEFAULT_LIMITS`); ``null`` or ``false`` lifts it."""

    memory: int | str | None = DEFAULT_LIMITS["memory"]
    open_files: int | None = Field(default=DEFAULT_LIMITS["open_files"], alias="openFiles", ge=16)
    processes: int | None = Field(default=DEFAULT_LIMITS["processes"], ge=1)
    cpu_seconds: int | None = Field(default=DEFAULT_LIMITS["cpu_seconds"], alias="cpuSeconds", ge=1)
    file_size: int | str | None = Field(default=DEFAULT_LIMITS["file_size"], alias="fileSize")

    @field_validator("*", mode="before")
    @classmethod
    def _lifted(cls, value: object) -> object:
        if value is False:
            return None
        if value is True:
            raise ValueError("true is not a limit: give a number, or false to lift it")
        return value

    @field_validator("memory", "file_size")
    @classmethod
    def _size(cls, value: int | str | None) -> int | None:
        if value is None:
            return None
        size = parse_size(value)
        if size < 1024 * 1024:
            raise ValueError(f"{value!r} is too small: at least 1M")
        return size


class SandboxConfig(_Model):
    filesystem: FilesystemSandbox = Field(default_factory=FilesystemSandbox)
    network: NetworkSandbox | Literal[False] | None = None
    # false: no limits at all.
    limits: LimitsConfig | Literal[False] = Field(default_factory=LimitsConfig)


class RestartConfig(_Model):
    """``restart``: start a server again after it exits, waiting ``backoffSeconds`` (doubled
    each time, at most 30 s) and giving up after ``maxRestarts`` restarts in a session."""

    max_restarts: int = Field(default=3, alias="maxRestarts", ge=1)
    backoff_seconds: float = Field(default=1.0, alias="backoffSeconds", gt=0)


class ClientRequestsConfig(_Model):
    """``clientRequests``: what a server may ask of the client through ironcurtain.

    ``elicitation`` (allow by default): the question goes to the human, named as the
    server's, who can decline; it shows the server only what the human types in.
    ``sampling`` (ask by default): a server's text is put to the user's model and the
    server reads the answer, at the user's cost, so a human approves each one first
    (through the approval channels) unless this says ``allow``."""

    elicitation: Literal["allow", "deny"] = "allow"
    sampling: Literal["allow", "ask", "deny"] = "ask"


class ServerConfig(_Model):
    command: str = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    description: str | None = None
    disabled: bool = False
    timeout: float | None = Field(default=None, gt=0)
    sandbox: SandboxConfig | Literal[False] = Field(default_factory=SandboxConfig)
    restart: RestartConfig | bool = False
    client_requests: ClientRequestsConfig = Field(
        default_factory=ClientRequestsConfig, alias="clientRequests"
    )
    # Credentials in what the server sends the client are masked (policy.secrets).
    mask_secrets: bool = Field(default=True, alias="maskSecrets")

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


class ConfigFile(_Model):
    mcp_servers: dict[str, ServerConfig] | None = Field(default=None, alias="mcpServers")
    servers: dict[str, ServerConfig] | None = None

    @field_validator("mcp_servers", "servers")
    @classmethod
    def _names(cls, value: dict[str, ServerConfig] | None) -> dict[str, ServerConfig] | None:
        for name in value or {}:
            if not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or "__" in name or name.endswith("_"):
                raise ValueError(
                    f"server name {name!r} must use letters, digits, '.', '-' or single '_' "
                    "inside it (tools are exposed as <server>__<tool>: 'git_' with tool 'push' "
                    "and 'git' with tool '_push' would both be git___push)"
                )
        return value


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


def _unknown_keys(model: BaseModel, loc: tuple[str | int, ...]) -> list[str]:
    found = [json_path((*loc, key)) for key in (model.model_extra or {})]
    for name in type(model).model_fields:
        child = getattr(model, name)
        alias = type(model).model_fields[name].alias or name
        if isinstance(child, BaseModel):
            found += _unknown_keys(child, (*loc, alias))
        elif isinstance(child, dict):
            for key, item in child.items():
                if isinstance(item, BaseModel):
                    found += _unknown_keys(item, (*loc, alias, key))
    return found


def _parse(path: Path) -> tuple[ConfigFile, str]:
    file = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(file, "", "no such file") from None
    except OSError as exc:
        raise ConfigError(file, "", f"cannot read: {exc.strerror}") from None
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            file, f"line {exc.lineno} column {exc.colno}", f"invalid JSON: {exc.msg}"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(file, "$", f"expected an object, found {type(data).__name__}")
    if "mcpServers" not in data and "servers" not in data:
        raise ConfigError(file, "$", 'expected a "mcpServers" (or "servers") object')
    try:
        return ConfigFile.model_validate(data), file
    except ValidationError as exc:
        loc, detail = describe_validation_error(exc, _UNION_TAGS)
        raise ConfigError(file, loc, detail) from None


def load_config(
    path: Path,
    source: str,
    workspace: str,
    env: Mapping[str, str] | None = None,
) -> LoadedConfig:
    """Read, validate and expand a config; every problem is a :class:`ConfigError`."""
    parsed, file = _parse(path)
    key = "mcpServers" if parsed.mcp_servers is not None else "servers"
    raw = parsed.mcp_servers if parsed.mcp_servers is not None else parsed.servers
    assert raw is not None
    warnings = [f"{file}: {loc}: unknown key, ignored" for loc in _unknown_keys(parsed, ())]
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
            field: [
                _expand_path(p, variables, at("sandbox", "filesystem", alias, i), file)
                for i, p in enumerate(getattr(fs, field))
            ]
            for field, alias in (
                ("allow_read", "allowRead"),
                ("deny_read", "denyRead"),
                ("allow_write", "allowWrite"),
                ("deny_write", "denyWrite"),
            )
        }
        update["sandbox"] = server.sandbox.model_copy(
            update={"filesystem": fs.model_copy(update=fs_update)}
        )
    return server.model_copy(update=update)


def warn(message: str) -> None:
    print(f"ironcurtain: warning: {message}", file=sys.stderr)


def load_and_warn(explicit: str | None, workspace: str) -> LoadedConfig:
    """Find and load the config, warning once on stderr about each unknown key."""
    path, source = find_config(explicit)
    config = load_config(path, source, workspace)
    for message in config.warnings:
        warn(message)
    return config
