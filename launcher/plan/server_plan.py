"""How one server of a session is planned: the program it runs, how it sees the workspace,
its sandbox profile and launch, what its egress proxy lets through."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from launcher.host.launch_spec import LaunchSpec, leads_now
from launcher.host.machine import PLATFORM
from launcher.plan.config import LoadedConfig, warn
from launcher.plan.config_schema import FilesystemSandbox, ServerConfig
from launcher.plan.programs import npx_to_node, resolve_command
from launcher.plan.remote_plan import RemoteTarget, secret_header_faults, target_of
from launcher.plan.secrets_plan import Brokered, plan_secrets, read_secrets
from launcher.plan.workspace import refused_root
from launcher.shared import dirs, rundir
from launcher.shared.jsonrpc import HANDSHAKE, ClientSide
from launcher.shared.user_errors import ConfigError, SandboxUnavailable
from policy.egress import EgressRules
from policy.models import ToolAnnotationsFile
from policy.paths import resolve_real_path
from policy.roles import get_path_roles
from sandbox_profiles.discover import NeedsHiddenDirectory, hidden_reason
from sandbox_profiles.launch import launch_cwd
from sandbox_profiles.model import Limits, SandboxProfile
from sandbox_profiles.present import FAIL_CLOSED
from sandbox_profiles.profile import (
    ProfileRequest,
    WorkspaceAccess,
    build_profile,
    guarded_paths,
    placeholders,
    sandbox_env,
)
from sandbox_profiles.records import frozen
from sandbox_profiles.ways import is_under
from sandbox_profiles.writable_roots import root_problem

# Path roles that change the filesystem: a server with a tool taking one gets the workspace
# writable; with only other path roles, read-only; with no path role at all, not at all.
WRITE_ROLES = frozenset({"write-path", "delete-path"})
PATH_ROLES = frozenset(get_path_roles())
assert WRITE_ROLES <= PATH_ROLES
HIDDEN_DIR_FIX = (
    "install the server so that it needs nothing from there: into a virtualenv made from a "
    "system Python (python3 -m venv /opt/venvs/NAME, then its pip), with pipx, or under "
    "/usr/local (npm install -g, pip install --prefix /usr/local)"
)


@frozen
class ServerPlan:
    """One server of a session: its config, its sandbox and how it is launched."""

    name: str
    config: ServerConfig
    launch: LaunchSpec
    profile: SandboxProfile | None
    cwd: str  # where the server runs; relative paths in its calls resolve here
    guarded: tuple[str, ...] = ()  # paths that must not appear in its writable roots
    # paths in them kept by identity (protected where they are, and the way to them)
    anchored: tuple[str, ...] = ()
    # How the workspace is shown to it (from its tool annotations), and why.
    workspace_access: WorkspaceAccess = "write"
    workspace_reason: str = ""
    egress: EgressRules | None = None  # a networked server: what its proxy lets through
    egress_socket: str | None = None
    # (path, is a dir): made empty on the host for denyRead masks, removed after if still so
    placeholders: tuple[tuple[str, bool], ...] = ()
    # The directories it is given to work in: what it is told at roots/list.
    roots: tuple[str, ...] = ()
    # A remote server (a ``url``): where it is and how it is spoken to; nothing is started.
    remote: RemoteTarget | None = None
    # Its brokered secrets, and where the CA bundle its sandbox trusts is written.
    secrets: tuple[Brokered, ...] = ()
    ca_bundle: str | None = None

    @property
    def sandboxed(self) -> bool:
        return self.profile is not None


def client_capabilities(sp: ServerPlan) -> ClientSide:
    """What a server is told of its client: ironcurtain answers ``roots/list`` itself (with
    the directories its sandbox holds, never the client's host roots) and declares
    elicitation and sampling when its ``clientRequests`` let them through. They are declared
    before any client has connected; a request the client turns out not to support is
    answered with an error then."""
    asks = sp.config.client_requests
    capabilities: dict[str, object] = {"roots": {"listChanged": False}}
    if asks.elicitation != "deny":
        capabilities["elicitation"] = {"form": {}, "url": {}}
    if asks.sampling != "deny":
        capabilities["sampling"] = {}
    roots = tuple({"uri": Path(root).as_uri(), "name": root} for root in sp.roots)
    return ClientSide(capabilities, roots, sp.config.era or HANDSHAKE)


@frozen
class Surroundings:
    """What every server of one session is planned against."""

    config: LoadedConfig
    annotations: ToolAnnotationsFile
    workspace: str
    runtime_dir: str
    search: Sequence[str]
    bwrap: str
    protected: Sequence[str]  # read-only inside any writable root
    never_shown: Mapping[str, str]  # see never_shown()
    run_as: tuple[int, int] | None
    seccomp_bpf: bytes | None
    can_sandbox: bool  # False: sandboxed servers run unsandboxed (allowed by the caller)
    display_only: bool  # planned to be shown, not run
    read_only: bool = False  # started only to list their tools: nothing writable
    # One caller's plan (gateway mode, planned for every caller): what tells its servers'
    # brokers apart from other callers' (their egress sockets and CA bundles); "": none.
    own: str = ""


def egress_rules(server: ServerConfig) -> EgressRules | None:
    """What the egress proxy lets a server reach; None (no network at all) when its config
    allows no domain."""
    if server.sandbox is False or not server.sandbox.network:
        return None
    net = server.sandbox.network
    if not net.allowed_domains:
        return None
    return EgressRules.from_config(net.allowed_domains, net.denied_domains, net.hosts)


def workspace_access(annotations: ToolAnnotationsFile, name: str) -> tuple[WorkspaceAccess, str]:
    """How a server sees the workspace, from its tools' argument roles, and why: writable
    when a tool has a write role, read-only when tools take only other paths, not at all
    when no tool takes a path. Without annotations no call of it is ever made; it gets the
    workspace read-only, so a server handed the workspace as an argument still starts
    (``annotate-tools`` lists the tools of exactly such servers)."""
    entry = annotations.servers.get(name)
    if entry is None or not entry.tools:
        return "read", "the policy has no tool annotations for this server (none can be called)"
    writers = [
        t.tool_name for t in entry.tools if any(WRITE_ROLES & set(r) for r in t.args.values())
    ]
    if writers:
        more = f" and {len(writers) - 1} more tools" if len(writers) > 1 else ""
        return "write", f"{writers[0]}{more} {'have' if more else 'has'} a write role"
    if any(PATH_ROLES & set(r) for t in entry.tools for r in t.args.values()):
        return "read", "no tool of this server has a write role"
    return "none", "no tool of this server takes a path"


def never_shown() -> dict[str, str]:
    """Directories a server's program may never be shown by, nor any directory holding
    one: the home (``$HOME`` and the user database's), its ``.local`` and ``.config``,
    ironcurtain's configuration and state, where sessions keep their sockets; each also by
    its real path."""
    found: dict[str, str] = {}
    homes = [os.path.expanduser("~")]
    with contextlib.suppress(KeyError):
        homes.append(pwd.getpwuid(os.getuid()).pw_dir)
    for home in dict.fromkeys(h.rstrip("/") for h in homes):
        if not home:
            continue
        found[home] = "your home"
        found[os.path.join(home, ".local")] = "~/.local (ironcurtain's state, programs' data)"
        found[os.path.join(home, ".config")] = "~/.config (programs' settings and tokens)"
    found[str(dirs.config_dir().parent)] = "the XDG configuration directory"
    found[str(dirs.config_dir())] = "ironcurtain's configuration"
    found[str(dirs.state_dir())] = "ironcurtain's state (audit logs, pins, quarantine)"
    for base in rundir.bases():
        found[base] = "where ironcurtain sessions keep their sockets (approvals, egress)"
    return {**found, **{os.path.realpath(p): label for p, label in found.items()}}


# The system's own trees: no grant reached through a link may lead into them (a link a
# project put where a directory was could hand a server /run's sockets or /etc writable).
# The kernel's and the runtime's trees (sockets, devices, process state): never a server's.
RUNTIME_TREES = ("/proc", "/sys", "/dev", "/run")
SYSTEM_TREES = (*RUNTIME_TREES, "/etc", "/var", "/boot", "/usr", "/bin", "/sbin", "/lib",
                "/lib32", "/lib64", "/libx32", "/root", "/snap")  # fmt: skip


def link_problem(real: str, never_shown: Mapping[str, str]) -> str | None:
    """Why a grant that reaches ``real`` through a link may not be shown (None: it may): it
    is or holds a place no server is shown (the home, a ``.ssh``...), it lies in
    ironcurtain's directories, ``~/.local`` or ``~/.config``, in a dot-directory of the home
    (``~/.claude``, ``~/.aws``: programs' settings and secrets), in a ``.ssh`` anywhere, or
    in the system's own trees.

    >>> link_problem("/etc/cron.d", {})
    "it lies in /etc, the system's own"
    >>> link_problem("/var/home/me/proj", {"/var/home/me": "your home"}) is None
    True
    """
    why = hidden_reason(real, never_shown)
    if why is not None:
        return why
    bases = {*rundir.bases(), *map(os.path.realpath, rundir.bases())}
    for place, label in never_shown.items():
        if place not in bases and label != "your home" and is_under(real, place):
            return f"it lies in {label}"
    if ".ssh" in real.split("/"):
        return "it lies in a .ssh directory"
    for place, label in never_shown.items():
        if label == "your home" and is_under(real, place):
            first = os.path.relpath(real, place).split("/")[0]
            if first.startswith("."):
                return f"it lies in ~/{first} (a program's settings and secrets)"
            return None  # an ordinary place of the home (which may live in /var/home)
    for tree in SYSTEM_TREES:
        if real == tree or is_under(real, tree):
            return f"it lies in {tree}, the system's own"
    return None


def _keep_links_from_secrets(name: str, fs: FilesystemSandbox, at: Surroundings) -> None:
    """A grant named through a link (which a project may have put where a directory was,
    after the grant was written) may not lead where :func:`link_problem` says. Named
    directly, it is the user's choice."""
    for key, alias in (("allow_read", "allowRead"), ("allow_write", "allowWrite")):
        for i, path in enumerate(getattr(fs, key)):
            given = os.path.abspath(os.path.expanduser(path))
            real = os.path.realpath(given)
            why = link_problem(real, at.never_shown) if real != given else None
            if why is not None:
                raise ConfigError(
                    str(at.config.path),
                    f"$.{at.config.key}.{name}.sandbox.filesystem.{alias}[{i}]",
                    f"{path!r} is a link to {real}: {why}; no server is shown that through "
                    "a link (one put in a project's place could lead anywhere): name the "
                    "directory itself if it is meant",
                )


def _keep_runtime_out(name: str, fs: FilesystemSandbox, at: Surroundings) -> None:
    """A server shown the directory where sessions keep their sockets could connect to
    them, read-only or not: the approvals socket (and approve its own calls) or another
    server's egress proxy (and reach what only that server may). So no grant may hold it."""
    bases = {os.path.realpath(b): b for b in rundir.bases()}
    for key, alias in (("allow_read", "allowRead"), ("allow_write", "allowWrite")):
        for i, path in enumerate(getattr(fs, key)):
            real = os.path.realpath(path)
            held = [shown for base, shown in bases.items() if is_under(base, real)]
            if held:
                raise ConfigError(
                    str(at.config.path),
                    f"$.{at.config.key}.{name}.sandbox.filesystem.{alias}[{i}]",
                    f"{path!r} holds {held[0]}, where every ironcurtain session keeps its "
                    "sockets (approvals, egress proxies): a server shown them could approve "
                    "its own calls or use another server's network; name a directory inside "
                    "it instead",
                )


def judge_writable(
    config: LoadedConfig,
    servers: Mapping[str, ServerConfig],
    homes: Mapping[str, str],
    places: Mapping[str, tuple[str, str]] | None = None,
) -> None:
    """Every ``allowWrite`` directory of ``servers`` judged whole (:func:`root_problem`):
    never a home, a directory holding one, a catalogue entry, a git directory or a
    virtualenv, nor inside one. Judged before anything is made for them."""
    for name, server in servers.items():
        if server.sandbox is False:
            continue
        for i, path in enumerate(server.sandbox.filesystem.allow_write):
            why = root_problem(path, homes, places)
            if why is not None:
                raise ConfigError(
                    str(config.path),
                    f"$.{config.key}.{name}.sandbox.filesystem.allowWrite[{i}]",
                    refused_root(path, why),
                )


def limits_of(server: ServerConfig) -> Limits:
    """The limits in force: the config's, each field defaulting to
    :data:`launcher.plan.config_schema.DEFAULT_LIMITS`; none at all with ``"limits": false``."""
    if server.sandbox is False or server.sandbox.limits is False:
        return Limits()
    cfg = server.sandbox.limits
    return Limits(
        memory=cfg.memory,
        open_files=cfg.open_files,
        processes=cfg.processes,
        cpu_seconds=cfg.cpu_seconds,
        file_size=cfg.file_size,
    )


def _command(name: str, server: ServerConfig, at: Surroundings) -> str:
    """The server's command found on the search path (or next to this Python)."""
    assert server.command is not None  # a local server's (the config is checked)
    command = resolve_command(server.command, list(at.search))
    if command is None:
        raise ConfigError(
            str(at.config.path),
            f"$.{at.config.key}.{name}.command",
            f"command {server.command!r} not found on PATH or next to {sys.executable}",
        )
    return command


def _unsandboxed(
    name: str, server: ServerConfig, at: Surroundings, request: ProfileRequest, cwd: str
) -> ServerPlan:
    """The plan of a server run as it is (``sandbox: false``, or no sandbox here)."""
    env = {
        **sandbox_env(request, os.path.dirname(request.command_path)),
        "HOME": os.path.expanduser("~"),
    }
    launch = LaunchSpec(name, [request.command_path, *server.args], env, cwd, server.timeout)
    return ServerPlan(name, server, launch, None, cwd, roots=(at.workspace,))


def _sandboxed(
    name: str,
    server: ServerConfig,
    at: Surroundings,
    request: ProfileRequest,
    cwd: str,
    fs: FilesystemSandbox,
    egress: EgressRules | None,
    brokered: tuple[Brokered, ...] = (),
) -> ServerPlan:
    """The plan of a server run in its sandbox: its profile, refused when the program
    needs a directory never shown or limits with no prlimit, and how it is launched."""
    try:
        profile = build_profile(request)
    except NeedsHiddenDirectory as exc:
        raise ConfigError(
            str(at.config.path), f"$.{at.config.key}.{name}.command", f"{exc}; {HIDDEN_DIR_FIX}"
        ) from None
    closed = next((m.reason for m in profile.mounts if m.reason.startswith(FAIL_CLOSED)), "")
    if closed and not at.display_only:  # failing closed, loudly
        warn(f"server '{name}' can write nothing this session: {closed}")
    if profile.limits.any() and shutil.which("prlimit") is None:
        raise SandboxUnavailable(
            f"server '{name}' has sandbox.limits but prlimit (util-linux) is not "
            "installed.\nTo fix: sudo apt-get install util-linux."
        )
    launch = LaunchSpec(
        name,
        [],
        profile.env,
        launch_cwd(profile, PLATFORM),
        server.timeout,
        profile=profile,
        bwrap=at.bwrap,
        seccomp=at.seccomp_bpf if profile.seccomp else None,
        leads=leads_now(profile),
    )
    return ServerPlan(
        name,
        server,
        launch,
        profile,
        cwd,
        guarded=tuple(guarded_paths(request, profile)),
        anchored=profile.anchored,
        workspace_access=request.workspace_access,
        workspace_reason=request.workspace_reason,
        placeholders=tuple(placeholders(profile)),
        egress=egress,
        egress_socket=request.egress_socket,
        roots=_roots(at.workspace, request.workspace_access, fs),
        secrets=brokered,
        ca_bundle=request.ca_bundle,
    )


def _remote(name: str, server: ServerConfig, at: Surroundings) -> ServerPlan:
    """The plan of a remote server: no process, no sandbox, no directory of this machine
    (it is told of no root)."""
    launch = LaunchSpec(name, [], {}, at.workspace, server.timeout)
    where = f"$.{at.config.key}.{name}"
    read = read_secrets(str(at.config.path), where, server.secrets)
    values = {b.variable: b.value for b in read}
    header, wrong = secret_header_faults(server, values)
    if wrong:
        raise ConfigError(str(at.config.path), f"{where}.headers.{header}", wrong)
    target = target_of(server, values)
    return ServerPlan(name, server, launch, None, at.workspace, remote=target, secrets=read)


def plan_server(name: str, server: ServerConfig, at: Surroundings) -> ServerPlan:
    """The plan of server ``name``: sandboxed unless its config says ``sandbox: false`` (or
    the host cannot sandbox and the caller allowed that); a remote one, reached where it is."""
    if server.remote:
        return _remote(name, server, at)
    command = _command(name, server, at)
    cwd = server.cwd or at.workspace
    sandboxed = server.sandboxed and at.can_sandbox
    args = list(server.args)
    fs = server.sandbox.filesystem if server.sandbox else FilesystemSandbox()
    if sandboxed:
        _keep_runtime_out(name, fs, at)
        _keep_links_from_secrets(name, fs, at)
    fs, access, access_reason = _workspace_access(name, fs, at)
    egress = egress_rules(server) if sandboxed else None
    brokered = _brokered(name, server, at, sandboxed)
    # A caller's server with secrets is brokered by a proxy of its caller's (its sentinels).
    own = f"-{at.own}" if brokered and at.own else ""
    egress_socket = os.path.join(at.runtime_dir, f"egress-{name}{own}.sock") if egress else None
    program_files: list[str] = []
    if sandboxed and os.path.basename(command) == "npx":
        command, args = npx_to_node(command, args, list(at.search), at.config, name)
        program_files.append(args[0])
    # Each grant where it really is (config paths are absolute already).
    real = {p: resolve_real_path(p) for p in (*fs.allow_read, *fs.allow_write)}
    request = ProfileRequest(
        name=name,
        command_path=command,
        args=args,
        env={**server.env, **{b.variable: b.sentinel for b in brokered}},
        workspace=at.workspace,
        cwd=server.cwd,
        workspace_access=access,
        workspace_reason=access_reason,
        # Where they really are: a grant that is a link is shown at its target, where
        # every protection inside a writable root is worked out (the workspace, and the
        # arguments forwarded to servers, are real paths too).
        allow_read=[real[p] for p in fs.allow_read],
        allow_write=[real[p] for p in fs.allow_write],
        grant_links=[(p, real[p]) for p in real if p != real[p]],
        deny_read=list(dict.fromkeys([*fs.deny_read, *map(resolve_real_path, fs.deny_read)])),
        deny_write=list(dict.fromkeys([*fs.deny_write, *map(resolve_real_path, fs.deny_write)])),
        protected=at.protected,
        runtime_dir=at.runtime_dir,
        search_path=at.search,
        host_env=os.environ,
        run_as=at.run_as,
        program_files=program_files,
        egress_socket=egress_socket,
        bridge_python=sys.executable,
        limits=limits_of(server),
        seccomp=at.seccomp_bpf is not None or at.display_only,
        never_shown=at.never_shown,
        ca_bundle=os.path.join(at.runtime_dir, f"ca-{name}{own}.pem") if brokered else None,
    )
    if sandboxed:
        return _sandboxed(name, server, at, request, cwd, fs, egress, brokered)
    return _unsandboxed(name, server, at, request, cwd)


def _workspace_access(
    name: str, fs: FilesystemSandbox, at: Surroundings
) -> tuple[FilesystemSandbox, WorkspaceAccess, str]:
    """What the server may do in the workspace, and why; started only to list its tools,
    what it may write is shown to it read-only."""
    access, access_reason = workspace_access(at.annotations, name)
    if at.read_only:
        fs = replace(fs, allow_read=[*fs.allow_read, *fs.allow_write], allow_write=[])
        if access == "write":
            access, access_reason = "read", "started only to list its tools: nothing writable"
    if at.workspace in fs.allow_write:
        access, access_reason = "write", "allowWrite names it"
    return fs, access, access_reason


def _brokered(
    name: str, server: ServerConfig, at: Surroundings, sandboxed: bool
) -> tuple[Brokered, ...]:
    """The server's brokered secrets, read and checked (its sandbox holds their sentinels)."""
    where = f"$.{at.config.key}.{name}"
    rules = egress_rules(server)
    return plan_secrets(str(at.config.path), where, server.env, server.secrets, rules, sandboxed)


def _roots(workspace: str, access: WorkspaceAccess, fs: FilesystemSandbox) -> tuple[str, ...]:
    """The directories a sandboxed server is given: the workspace when it is shown at all,
    then those its config mounts."""
    shown = [workspace] if access != "none" else []
    return tuple(
        dict.fromkeys(os.path.abspath(p) for p in (*shown, *fs.allow_write, *fs.allow_read))
    )
