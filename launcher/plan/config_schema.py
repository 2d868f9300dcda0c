"""The models of ``mcp-servers.json``: plain frozen dataclasses whose JSON names, bounds and
validators are in their annotations, for pydantic to validate a file with (loaded only then:
:mod:`policy.schema`)."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import field
from typing import Annotated, Literal

from policy.schema import pyd
from sandbox_profiles.records import frozen


def json_name(name: str) -> str:
    """A field's JSON name: ``allow_read`` is written ``allowRead``.

    >>> json_name("allow_read"), json_name("command")
    ('allowRead', 'command')
    """
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


# What pydantic validates each class with. Unknown keys pass validation and are warned
# about afterwards (:func:`_unknown_keys`); the Python names are accepted too.
_LENIENT = {"alias_generator": json_name, "populate_by_name": True, "extra": "ignore"}


@frozen(kw_only=True)
class FilesystemSandbox:
    """``sandbox.filesystem``: host paths shown to the server read-only or writable, and
    paths hidden or kept read-only inside those."""

    __pydantic_config__ = _LENIENT

    # Host paths it sees read-only. Each is shown where it really is (a link followed); one reached
    # through a link may not lead into a dot-directory of your home, a `.ssh`, your home itself or
    # the system's own trees, and none may hold the directory where sessions keep their sockets
    # (`$XDG_RUNTIME_DIR`, `/tmp`).
    allow_read: list[str] = field(default_factory=list)
    # Paths hidden inside what it sees, including ones that only appear later.
    deny_read: list[str] = field(default_factory=list)
    # Host paths it may write. Inside them, what host tools load or run (git hooks and configs,
    # shell rc files, editor and AI-client configs...) and ironcurtain's own state stay read-only.
    # Naming the workspace makes it writable even for a server whose tools only read. A home or a
    # directory holding one, and a path that is or lies inside a git directory, a virtualenv or
    # a place host tools load or run from (`.git/hooks`, `.vscode`, `.claude`...), is refused.
    allow_write: list[str] = field(default_factory=list)
    # Paths kept read-only inside the writable places, at any depth: an existing one is mounted
    # read-only, a new one is moved to the quarantine as it appears.
    deny_write: list[str] = field(default_factory=list)
    # Directories of `allowWrite` that are this server's workspace for the policy too: every rule
    # `within` `${workspace}` applies in each as in the session's workspace (the bundled policy
    # allows reads and writes there instead of denying or escalating them). Each must also be in
    # `allowWrite`, named as the directory itself (not through a link: one put in its place
    # later would carry the grant). `ironcurtain wrap` names here the directories a user's own
    # entry names.
    workspace: list[str] = field(default_factory=list)


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


@frozen(kw_only=True)
class NetworkSandbox:
    """``sandbox.network``: the domains the server may reach through its egress proxy,
    and names pinned to addresses."""

    __pydantic_config__ = _LENIENT

    # The names it may connect to, through its egress proxy. `*` is any name (never an IP address),
    # `*.example.com` that domain and its subdomains, `host:port` one port. An IP address is allowed
    # only when an entry names it with its port. A name that resolves to a loopback, private,
    # link-local, CGNAT, multicast, reserved or cloud-metadata address, or to this machine's own, is
    # refused. The policy sees them too: a URL argument outside them is escalated to a human.
    allowed_domains: list[str] = field(default_factory=list)
    # Names refused even when `allowedDomains` matches them; checked first.
    denied_domains: list[str] = field(default_factory=list)
    # Names pinned to IP addresses: the proxy connects there without a lookup, and the address is
    # exempt from the refusal of private addresses for that name only, on every port its
    # `allowedDomains` entry allows (give the entry a port).
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


@frozen(kw_only=True)
class LimitsConfig:
    """``sandbox.limits``: memory and file sizes in bytes or with K/M/G/T suffixes. A field
    left out has its default (:data:`DEFAULT_LIMITS`); ``null`` or ``false`` lifts it."""

    __pydantic_config__ = _LENIENT

    # Memory: each process's data segment (RLIMIT_DATA) and the resident memory of the server's
    # whole process tree.
    memory: Annotated[int | None, pyd.BeforeValidator(_size)] = DEFAULT_LIMITS["memory"]
    # Open file descriptors per process (RLIMIT_NOFILE).
    open_files: Annotated[int | None, pyd.Field(ge=16), pyd.BeforeValidator(_lifted)] = (
        DEFAULT_LIMITS["open_files"]
    )
    # Processes: RLIMIT_NPROC on top of what the server's user already runs, and the process tree's
    # count.
    processes: Annotated[int | None, pyd.Field(ge=1), pyd.BeforeValidator(_lifted)] = (
        DEFAULT_LIMITS["processes"]
    )
    # CPU seconds per process (RLIMIT_CPU: SIGXCPU, then SIGKILL a second later). Off by default: a
    # long session uses CPU legitimately.
    cpu_seconds: Annotated[int | None, pyd.Field(ge=1), pyd.BeforeValidator(_lifted)] = (
        DEFAULT_LIMITS["cpu_seconds"]
    )
    # The largest file it may write (RLIMIT_FSIZE).
    file_size: Annotated[int | None, pyd.BeforeValidator(_size)] = DEFAULT_LIMITS["file_size"]


@frozen(kw_only=True)
class SandboxConfig:
    """``sandbox``: what the server's sandbox shows it, where it may connect, its limits."""

    __pydantic_config__ = _LENIENT

    # What of the host it sees beyond the workspace and its own program.
    filesystem: FilesystemSandbox = field(default_factory=FilesystemSandbox)
    # Where it may connect. Absent, `null` or `false`: nowhere (loopback only).
    network: NetworkSandbox | Literal[False] | None = None
    # Resource limits, on by default: a server over one is stopped and its calls are answered with
    # an error naming the limit. `false`: no limits at all.
    limits: LimitsConfig | Literal[False] = field(default_factory=LimitsConfig)


@frozen(kw_only=True)
class RestartConfig:
    """``restart``: start a server again after it exits, waiting ``backoffSeconds`` (doubled
    each time, at most 30 s) and giving up after ``maxRestarts`` restarts in a session."""

    __pydantic_config__ = _LENIENT

    max_restarts: Annotated[int, pyd.Field(ge=1)] = 3
    backoff_seconds: Annotated[float, pyd.Field(gt=0)] = 1.0


@frozen(kw_only=True)
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


@frozen(kw_only=True)
class SecretConfig:
    """One of ``secrets``: a credential the server uses without ever holding it."""

    __pydantic_config__ = _LENIENT

    # Where ironcurtain reads the value: `env:NAME` (a variable of ironcurtain's own environment) or
    # `file:PATH` (a file's content, one trailing newline dropped). `keyring:` is refused: no OS
    # keyring library is installed with ironcurtain.
    from_: Annotated[str, pyd.Field(pattern=r"^(env|file|keyring):.+")]
    # The hosts (`name` or `name:port`, each within `allowedDomains`) the value is sent to: the
    # egress proxy opens TLS for these alone and puts the value in place of the sentinel there.
    # Required for a local server's secret; a remote server's is sent to its `url` alone (as
    # `${secret:NAME}` in its `headers` or URL query), and names none.
    hosts: list[str] = field(default_factory=list)
    # How the server is handed the sentinel: `env`, as the variable named by this secret's key.
    as_: Literal["env"] = "env"
    # `true`: the sentinel is also replaced in request bodies sent to `hosts` (else a body
    # holding it is refused). Headers (`Bearer`, `Basic`, any other) always are.
    body: bool = False


@frozen(kw_only=True)
class ClientSecretConfig:
    """``auth.clientSecret``: where the secret of a pre-registered OAuth client is read."""

    __pydantic_config__ = _LENIENT

    # `env:NAME` (a variable of ironcurtain's own environment) or `file:PATH` (a file's content,
    # one trailing newline dropped). Never the secret itself.
    from_: Annotated[str, pyd.Field(pattern=r"^(env|file):.+")]


@frozen(kw_only=True)
class AuthConfig:
    """``auth`` of a remote server: the OAuth client `ironcurtain auth login` logs in as."""

    __pydantic_config__ = _LENIENT

    # The client to log in as: one registered with the authorization server beforehand, or an
    # `https://` URL, a client ID metadata document (used when the authorization server accepts
    # those). Unset: the client registers itself (dynamic registration) where the server allows it.
    client_id: Annotated[str | None, pyd.Field(min_length=1)] = None
    # A pre-registered client's secret, read from where this says (sent HTTP Basic to the token
    # endpoint). A client ID metadata document has none.
    # (A string here, the secret itself, is refused without being repeated.)
    client_secret: ClientSecretConfig | str | None = None
    # The scopes asked for (default: those the server names).
    scopes: list[Annotated[str, pyd.Field(pattern=r"^[!#-\[\]-~]+$")]] = field(default_factory=list)
    # Whose login signs the requests in gateway mode: `caller` (each caller's own, logged in
    # with `ironcurtain auth login NAME --caller SUB --issuer URL`; a caller without one is not
    # served by the server) or `shared` (the one login of `ironcurtain auth login NAME`, used
    # for every caller). Outside gateway mode there is one login, the user's, either way.
    login: Literal["caller", "shared"] = "caller"


def _detectors(value: list[str]) -> list[str]:
    # Imported here: the scan's detectors are loaded after a session's servers start, not
    # before (a config that names none does not need them to be read).
    from policy.argument_scan import DETECTOR_NAMES

    for name in value:
        if name not in DETECTOR_NAMES:
            raise ValueError(f"{name!r} is not a detector (one of: {', '.join(DETECTOR_NAMES)})")
    return value


@frozen(kw_only=True)
class ArgumentScanConfig:
    """``scanArguments`` as an object: the scan of what the agent sends the server, with
    detectors left out for known false positives."""

    __pydantic_config__ = _LENIENT

    # Detectors not run on this server's arguments: a detector's name (`jwt`,
    # `aws-access-key-id`...: the table in docs/secrets.md), or `configured-secret` for the
    # values of the config's `secrets`.
    skip: Annotated[list[str], pyd.AfterValidator(_detectors)] = field(default_factory=list)


@frozen(kw_only=True)
class ServerConfig:
    """One server of the config: how to start it and what its sandbox holds."""

    __pydantic_config__ = _LENIENT

    # The program to start: a name found on `PATH` (or next to ironcurtain's own Python), or a path.
    # `npx -y PACKAGE` runs the package from npx's cache or a global install, since a sandbox cannot
    # download it. A remote server has a `url` instead.
    command: Annotated[str | None, pyd.Field(min_length=1)] = None
    # A remote server's endpoint (`https://`, or `http://` to this machine only), instead of a
    # `command`: spoken to over streamable HTTP (or the legacy SSE transport with `"type": "sse"`),
    # through the same policy, approvals, audit and masking as a local server, with no sandbox.
    url: Annotated[str | None, pyd.Field(min_length=1)] = None
    # How a remote server is reached: `http` (streamable HTTP, the default for a `url`) or `sse`
    # (the legacy transport). Clients that share this file write it on local entries too
    # (`stdio`), where ironcurtain does not act on it.
    type: str | None = None
    # HTTP headers sent with every request to a remote server, as written; `${secret:NAME}` in a
    # value (or in a value of the `url`'s query) is the value of the entry's secret NAME.
    headers: dict[str, str] = field(default_factory=dict)
    # A remote server's names pinned to addresses: ironcurtain connects there without a lookup, and
    # a private or loopback address pinned here is allowed, for that name only (a name that
    # resolves to such an address otherwise is refused).
    hosts: Annotated[dict[str, str], pyd.AfterValidator(_addresses)] = field(default_factory=dict)
    # A remote server's OAuth login (`ironcurtain auth login NAME`): the client it is made as, and
    # the scopes asked for. Without it, the client registers itself where the server allows it.
    auth: AuthConfig | None = None
    # Its arguments.
    args: list[str] = field(default_factory=list)
    # Its environment: these variables plus `PATH`, `HOME`, `LANG` and `TERM`, nothing else of
    # ironcurtain's. They are handed to the sandbox as its environment, never on a command line.
    env: dict[str, str] = field(default_factory=dict)
    # The directory it starts in (absolute, or starting with `~` or `${workspace}`). Default: the
    # workspace when its sandbox shows it, else its private home.
    cwd: str | None = None
    # A note for people reading the file; ironcurtain does not act on it (`ironcurtain wrap` writes
    # one saying where a definition came from).
    description: str | None = None
    # `true`: the server is not started; `--server NAME` naming it is an error.
    disabled: bool = False
    # Seconds the server has to answer each request that reaches it (a tool call, a prompt, a
    # resource read, a completion). Past it the request is cancelled and the agent gets `ERROR:
    # server 'NAME' did not answer within N s; the call was cancelled`. Default: no limit.
    timeout: Annotated[float | None, pyd.Field(gt=0)] = None
    # What its sandbox holds. `false` runs the server without one: the policy is then its only
    # guard.
    sandbox: SandboxConfig | Literal[False] = field(default_factory=SandboxConfig)
    # Start the server again when it exits: `true` (3 restarts, 1 s back-off), an object, or `false`
    # (a server that exits stays stopped, and its calls fail).
    restart: RestartConfig | bool = False
    # What it may ask of the client (questions for the human, the model's answers).
    client_requests: ClientRequestsConfig = field(default_factory=ClientRequestsConfig)
    # Credentials in what the server sends the client are masked (policy.secrets).
    mask_secrets: bool = True
    # Credentials in what the agent sends the server (the arguments of a tool call, a prompt or a
    # resource read: a detector's match, or the value of any of the config's `secrets`, plain or
    # encoded) escalate the request to a human, and without one it is not made. `false` turns the
    # scan off for this server; an object leaves some detectors out.
    scan_arguments: ArgumentScanConfig | bool = True
    # Credentials the server uses but never holds, by the variable it finds a sentinel in (the
    # egress proxy swaps the sentinel for the value on the way to the secret's hosts). A remote
    # server's are sent by ironcurtain itself, where its `headers` or `url` say `${secret:NAME}`.
    secrets: dict[str, SecretConfig] = field(default_factory=dict)
    # The protocol era the server is spoken to in, when set: `handshake` offers `initialize`
    # first, which every server of that era takes, and turns to the stateless era (2026-07-28)
    # only when the server refuses it; `stateless` asks `server/discover` first and speaks the
    # stateless era to a server that serves it (the handshake otherwise). Unset (the default),
    # the handshake is offered first and a server of both eras is spoken to in the era of the
    # client whose requests it serves (a client of the other era gets an instance of its own,
    # opened in that era); set, the server is spoken to in that era whatever its client's.
    era: Literal["handshake", "stateless"] | None = None

    @property
    def restart_policy(self) -> RestartConfig | None:
        if self.restart is True:
            return RestartConfig()
        return self.restart or None

    @property
    def argument_scan_skips(self) -> list[str] | None:
        """The detectors left out of the scan of its arguments (None: no scan at all)."""
        if self.scan_arguments is False:
            return None
        return [] if self.scan_arguments is True else list(self.scan_arguments.skip)

    @property
    def sandboxed(self) -> bool:
        return self.sandbox is not False and self.url is None

    @property
    def remote(self) -> bool:
        return self.url is not None

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


@frozen(kw_only=True)
class ConfigFile:
    """``mcp-servers.json``: its servers, under ``mcpServers`` (or VS Code's ``servers``)."""

    __pydantic_config__ = _LENIENT

    # The servers, by name. Their tools are exposed as `<server>__<tool>`, so a name may not hold
    # `__` or end with `_`.
    mcp_servers: Annotated[dict[str, ServerConfig] | None, pyd.AfterValidator(_names)] = None
    # The same, under the key VS Code uses; read only when `mcpServers` is absent.
    servers: Annotated[dict[str, ServerConfig] | None, pyd.AfterValidator(_names)] = None


# Every class a cached config is built from (policy.cache.decode constructs only these).
CACHED = (
    ConfigFile,
    ServerConfig,
    SandboxConfig,
    FilesystemSandbox,
    NetworkSandbox,
    LimitsConfig,
    RestartConfig,
    ClientRequestsConfig,
    SecretConfig,
    ArgumentScanConfig,
)


UNION_TAGS = frozenset(
    {"SandboxConfig", "NetworkSandbox", "RestartConfig", "LimitsConfig", "ArgumentScanConfig"}
)
