"""Everything a session needs, decided and checked before anything is created or started."""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from launcher import dirs
from launcher.config import FilesystemSandbox, LoadedConfig, ServerConfig, load_and_warn
from launcher.errors import ConfigError, SandboxUnavailable, UsageError
from launcher.servers import LaunchSpec
from policy import PolicyEngine, StructuralConfig, bundled_policy_dir, load_policy_dir
from policy.egress import EgressRules, Entry
from policy.loader import PolicyFiles, check_placeholders
from policy.models import ToolAnnotationsFile
from policy.paths import is_within, resolve_real_path
from policy.roles import get_path_roles
from sandbox_profiles import ProfileRequest, SandboxProfile, build_profile
from sandbox_profiles.bwrap import SETPRIV
from sandbox_profiles.discover import (
    NeedsHiddenDirectory,
    PackageNotInstalled,
    npx_roots,
    resolve_npx,
    which,
)
from sandbox_profiles.model import Limits
from sandbox_profiles.profile import (
    WorkspaceAccess,
    guarded_paths,
    placeholders,
    sandbox_env,
)

BWRAP_FIX = (
    "install bubblewrap (Debian/Ubuntu: sudo apt-get install bubblewrap) and make sure "
    "unprivileged user namespaces are enabled (sudo sysctl -w kernel.unprivileged_userns_clone=1; "
    "on Ubuntu 24.04+ also kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor "
    "profile for bwrap); or pass --allow-unsandboxed to run servers without isolation"
)
SECCOMP_FIX = (
    "install libseccomp (Debian/Ubuntu: sudo apt-get install libseccomp2) and the pyseccomp "
    "binding (scripts/install.sh does); or pass --allow-no-seccomp to sandbox without the "
    "system-call filter"
)
UNIX_PATH_MAX = 107
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
# The unprivileged identity servers run as when ironcurtain itself runs as root.
NOBODY = (65534, 65534)


@dataclass(frozen=True)
class RunOptions:
    config: str | None = None
    policy_dir: str | None = None
    workspace: str | None = None
    servers: tuple[str, ...] = ()
    audit_log: str | None = None
    allow_unsandboxed: bool = False
    allow_no_seccomp: bool = False
    audit_args: str = "hashed"  # or "clear": arguments in clear, PII fields still hashed
    approval: str = "auto"  # auto | elicit | socket | deny
    approval_timeout: float = 120.0
    max_identical_calls: int = 30  # per minute; 0: no circuit breaker
    accept_tool_changes: bool = False  # re-pin every server's tools at start
    http_port: int | None = None  # streamable HTTP on 127.0.0.1 instead of stdio
    # `ironcurtain profile`: plan to show, not to run (no probes, nothing refused).
    display_only: bool = False
    # The command planning it (run, profile, check): what a server selection is called in errors.
    command: str = "run"


@dataclass(frozen=True)
class ServerPlan:
    name: str
    config: ServerConfig
    launch: LaunchSpec
    profile: SandboxProfile | None
    cwd: str  # where the server runs; relative paths in its calls resolve here
    guarded: tuple[str, ...] = ()  # paths that must not appear in its writable roots
    # How the workspace is shown to it (from its tool annotations), and why.
    workspace_access: WorkspaceAccess = "write"
    workspace_reason: str = ""
    egress: EgressRules | None = None  # a networked server: what its proxy lets through
    egress_socket: str | None = None
    # (path, is a dir): made empty on the host for denyRead masks, removed after if still so
    placeholders: tuple[tuple[str, bool], ...] = ()

    @property
    def sandboxed(self) -> bool:
        return self.profile is not None


@dataclass(frozen=True)
class SessionPlan:
    session_id: str
    config: LoadedConfig
    policy: PolicyFiles
    engine: PolicyEngine
    workspace: str
    create_workspace: bool
    audit_path: str
    runtime_dir: str
    servers: dict[str, ServerPlan]
    prefixed: bool
    sandbox_problem: str | None
    run_as: tuple[int, int] | None = None  # set when running as root: the servers' identity
    audit_args_clear: bool = False
    approval: str = "auto"
    approval_timeout: float = 120.0
    max_identical_calls: int = 30
    accept_tool_changes: bool = False
    http_port: int | None = None
    seccomp_bpf: bytes | None = None  # the compiled filter every sandboxed server gets
    seccomp_problem: str | None = None


def new_session_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def search_path() -> list[str]:
    """PATH, then the directory of this Python (where ``pip`` put the reference servers)."""
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    return [*path, os.path.dirname(sys.executable)]


def resolve_command(command: str, search: list[str]) -> str | None:
    """``command`` as an absolute path. A version-manager shim (pyenv: ``<root>/shims/x``, a
    shell script that needs the manager's whole tree) is replaced by the real program it
    would run, found with ``pyenv which``, so the sandbox only has to show that program."""
    path = which(command, search)
    if path is None or os.path.basename(os.path.dirname(path)) != "shims":
        return path
    root = os.path.dirname(os.path.dirname(path))
    pyenv = next(
        (p for p in (f"{root}/libexec/pyenv", f"{root}/bin/pyenv") if os.access(p, os.X_OK)),
        None,
    )
    if pyenv is None:
        return path
    try:
        done = subprocess.run(
            [pyenv, "which", os.path.basename(path)],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
            env={**os.environ, "PYENV_ROOT": root},
        )
    except (OSError, subprocess.SubprocessError):
        return path
    real = done.stdout.strip()
    return real if done.returncode == 0 and os.path.isabs(real) else path


def npx_to_node(
    npx: str, args: list[str], search: list[str], config: LoadedConfig, name: str
) -> tuple[str, list[str]]:
    """``npx PKG ARGS`` as ``node <PKG's script> ARGS``: npx would look the package up in the
    registry, and a sandbox has no network. The package must already be installed or in
    npx's cache."""
    where = f"$.{config.key}.{name}.args"
    prefixes = [os.path.dirname(os.path.dirname(npx)), sys.prefix]
    # npm's own lower-case variables.
    prefix, cache = os.environ.get("npm_config_prefix"), os.environ.get("npm_config_cache")  # noqa: SIM112
    if prefix:
        prefixes.insert(0, prefix)
    roots = npx_roots(os.path.expanduser("~"), cache, prefixes)
    try:
        found = resolve_npx(args, roots)
    except PackageNotInstalled as exc:
        raise ConfigError(str(config.path), where, str(exc)) from None
    if found is None:
        raise ConfigError(
            str(config.path),
            where,
            "only the plain form npx [-y] PACKAGE [ARGS] can be sandboxed; "
            "give the installed program as the command instead",
        )
    node = which("node", search)
    if node is None:
        raise ConfigError(str(config.path), where, "node is not on PATH (npx needs it)")
    script, rest = found
    return node, [os.path.realpath(script), *rest]


def sandbox_problem(privileged: bool = False) -> str | None:
    """Why bubblewrap cannot sandbox here, or None when it can (one ~5 ms probe).

    ``privileged``: the launcher runs as root, so bwrap builds the sandbox without a user
    namespace and ``setpriv`` switches the server to an unprivileged uid."""
    if sys.platform == "darwin":
        ok = os.access("/usr/bin/sandbox-exec", os.X_OK)
        return None if ok else "sandbox-exec is missing (it ships with macOS)"
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed"
    if privileged and not os.access(SETPRIV, os.X_OK):
        return f"{SETPRIV} (util-linux) is missing; it drops root for sandboxed servers"
    spaces = ["pid", "ipc", "net", "uts", "cgroup", *([] if privileged else ["user"])]
    probe = [
        bwrap,
        *(f"--unshare-{ns}" for ns in spaces),
        "--die-with-parent",
        "--ro-bind",
        "/",
        "/",
        "--",
        "true",
    ]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bwrap could not be started: {exc}"
    if done.returncode != 0:
        return f"bwrap cannot create a sandbox here: {done.stderr.strip() or done.returncode}"
    return None


def sandbox_identity(workspace: str) -> tuple[int, int] | None:
    """Who sandboxed servers run as. None (the caller's own uid, mapped in a user
    namespace) unless ironcurtain runs as root: then the workspace's owner when that is an
    ordinary user, else ``nobody``. A server never keeps root's access to host files."""
    if os.geteuid() != 0:
        return None
    with contextlib.suppress(OSError):
        st = os.stat(workspace)
        if st.st_uid != 0:
            return st.st_uid, st.st_gid
    return NOBODY


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
    ironcurtain's configuration and state; each also by its real path."""
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
    return {**found, **{os.path.realpath(p): label for p, label in found.items()}}


def limits_of(server: ServerConfig) -> Limits:
    """The limits in force: the config's, each field defaulting to
    :data:`launcher.config.DEFAULT_LIMITS`; none at all with ``"limits": false``."""
    if server.sandbox is False or server.sandbox.limits is False:
        return Limits()
    cfg = server.sandbox.limits
    return Limits(
        memory=cfg.memory,  # type: ignore[arg-type]  # validated to int
        open_files=cfg.open_files,
        processes=cfg.processes,
        cpu_seconds=cfg.cpu_seconds,
        file_size=cfg.file_size,  # type: ignore[arg-type]
    )


def seccomp_filter() -> tuple[bytes | None, str | None]:
    from sandbox_profiles import seccomp

    try:
        return seccomp.compile_filter(), None
    except seccomp.SeccompUnavailable as exc:
        return None, f"no seccomp filter can be built: {exc}"


def select_servers(
    config: LoadedConfig, names: tuple[str, ...], option: str = "--server"
) -> dict[str, ServerConfig]:
    if names:
        unknown = [n for n in names if n not in config.servers]
        if unknown:
            raise UsageError(
                f"{option} {unknown[0]}: no such server in {config.path} "
                f"(it defines: {', '.join(sorted(config.servers)) or 'none'})"
            )
        disabled = [n for n in names if config.servers[n].disabled]
        if disabled:
            raise UsageError(f"{option} {disabled[0]}: the server is disabled in {config.path}")
        return {n: config.servers[n] for n in dict.fromkeys(names)}
    chosen = {n: s for n, s in config.servers.items() if not s.disabled}
    if not chosen:
        raise UsageError(f"{config.path}: no enabled servers to start")
    return chosen


def protected_paths(config: LoadedConfig, policy_dir: Path, audit_path: str) -> dict[str, str]:
    entries = {
        str(config.path): "the server configuration",
        str(dirs.config_dir()): "ironcurtain's configuration directory",
        str(policy_dir): "the policy directory",
        audit_path: "the audit log",
    }
    return {resolve_real_path(p): label for p, label in entries.items()}


def build_engine(
    config: LoadedConfig,
    files: PolicyFiles,
    workspace: str,
    audit_path: str,
    servers: dict[str, ServerConfig],
) -> PolicyEngine:
    structural = StructuralConfig(
        protected=protected_paths(config, files.directory, audit_path),
        state_dir=resolve_real_path(str(dirs.state_dir())),
        exempt=(workspace,),
    )
    # The policy's domain gate looks at names; port scoping is the egress proxy's business.
    allowlists = {
        name: [Entry.parse(d).pattern for d in server.allowed_domains]
        for name, server in servers.items()
    }
    return PolicyEngine(
        files.policy, files.annotations, structural, allowlists, {"workspace": workspace}
    )


def load_policy(policy_dir: str | None) -> PolicyFiles:
    files = load_policy_dir(Path(policy_dir).resolve() if policy_dir else bundled_policy_dir())
    check_placeholders(files, ["workspace"])
    return files


def plan_session(opts: RunOptions) -> SessionPlan:
    if opts.audit_args not in ("hashed", "clear"):
        raise UsageError(f"--audit-args {opts.audit_args}: expected hashed or clear")
    if opts.approval not in ("auto", "elicit", "socket", "deny"):
        raise UsageError(f"--approval {opts.approval}: expected auto, elicit, socket or deny")
    if opts.http_port is not None and not 0 <= opts.http_port < 65536:
        raise UsageError(f"--http {opts.http_port}: not a port (0 picks a free one)")
    if not opts.approval_timeout > 0:
        raise UsageError(f"--approval-timeout {opts.approval_timeout}: must be above 0")
    session_id = new_session_id()
    state = dirs.state_dir()
    if opts.workspace:
        workspace = resolve_real_path(os.path.expanduser(opts.workspace))
        if os.path.exists(workspace) and not os.path.isdir(workspace):
            raise UsageError(f"--workspace {opts.workspace}: exists and is not a directory")
    else:
        workspace = resolve_real_path(str(state / "workspaces" / session_id))
    config = load_and_warn(opts.config, workspace)
    selected = select_servers(
        config, opts.servers, "--server" if opts.command == "run" else opts.command
    )
    files = load_policy(opts.policy_dir)
    audit_path = resolve_real_path(
        os.path.expanduser(opts.audit_log)
        if opts.audit_log
        else str(state / "audit" / f"{session_id}.jsonl")
    )
    engine = build_engine(config, files, workspace, audit_path, selected)
    problem = None
    bpf: bytes | None = None
    seccomp_problem: str | None = None
    run_as = sandbox_identity(workspace)
    if opts.display_only:
        pass
    elif any(s.sandboxed for s in selected.values()):
        problem = sandbox_problem(run_as is not None)
        if problem and not opts.allow_unsandboxed:
            raise SandboxUnavailable(f"cannot sandbox servers: {problem}.\nTo fix: {BWRAP_FIX}.")
        if problem is None and sys.platform != "darwin":
            bpf, seccomp_problem = seccomp_filter()
            if seccomp_problem and not opts.allow_no_seccomp:
                raise SandboxUnavailable(
                    f"cannot sandbox servers: {seccomp_problem}.\nTo fix: {SECCOMP_FIX}."
                )
    runtime_dir = os.path.join(
        os.environ.get("XDG_RUNTIME_DIR") or "/tmp", f"ironcurtain-{session_id}"
    )
    longest = max((len(f"egress-{n}.sock") for n in selected), default=0)
    if len(runtime_dir) + 1 + max(longest, len("approvals.sock")) > UNIX_PATH_MAX:
        # Sockets live here, and a unix socket path has at most 107 bytes.
        runtime_dir = f"/tmp/ironcurtain-{session_id}"
    search = search_path()
    bwrap = shutil.which("bwrap") or "bwrap"
    plans: dict[str, ServerPlan] = {}
    # Read-only inside any writable root: ironcurtain's files, and its state dir unless this
    # session's workspace lives in it.
    state_real = engine.structural.state_dir or ""
    sandbox_protected = list(engine.structural.protected)
    if state_real and not is_within(workspace, state_real):
        sandbox_protected.append(state_real)
    hidden = never_shown()
    for name, server in selected.items():
        command = resolve_command(server.command, search)
        if command is None:
            raise ConfigError(
                str(config.path),
                f"$.{config.key}.{name}.command",
                f"command {server.command!r} not found on PATH or next to {sys.executable}",
            )
        cwd = server.cwd or workspace
        access, access_reason = workspace_access(files.annotations, name)
        sandboxed = server.sandboxed and problem is None
        args = list(server.args)
        fs = server.sandbox.filesystem if server.sandbox else FilesystemSandbox()
        if workspace in fs.allow_write:
            access, access_reason = "write", "allowWrite names it"
        egress = egress_rules(server) if sandboxed else None
        egress_socket = os.path.join(runtime_dir, f"egress-{name}.sock") if egress else None
        program_files: list[str] = []
        if sandboxed and os.path.basename(command) == "npx":
            command, args = npx_to_node(command, args, search, config, name)
            program_files.append(args[0])
        request = ProfileRequest(
            name=name,
            command_path=command,
            args=args,
            env=server.env,
            workspace=workspace,
            cwd=server.cwd,
            workspace_access=access,
            workspace_reason=access_reason,
            allow_read=fs.allow_read,
            allow_write=fs.allow_write,
            deny_read=fs.deny_read,
            deny_write=fs.deny_write,
            protected=sandbox_protected,
            runtime_dir=runtime_dir,
            search_path=search,
            host_env=os.environ,
            run_as=run_as,
            program_files=program_files,
            egress_socket=egress_socket,
            bridge_python=sys.executable,
            limits=limits_of(server),
            seccomp=bpf is not None or opts.display_only,
            never_shown=hidden,
        )
        if sandboxed:
            try:
                profile = build_profile(request)
            except NeedsHiddenDirectory as exc:
                raise ConfigError(
                    str(config.path), f"$.{config.key}.{name}.command", f"{exc}; {HIDDEN_DIR_FIX}"
                ) from None
            if profile.limits.any() and shutil.which("prlimit") is None:
                raise SandboxUnavailable(
                    f"server '{name}' has sandbox.limits but prlimit (util-linux) is not "
                    "installed.\nTo fix: sudo apt-get install util-linux."
                )
            launch = LaunchSpec(
                name,
                [],
                profile.env,
                profile.cwd if sys.platform == "darwin" else "/",  # bwrap does its own chdir
                server.timeout,
                profile=profile,
                bwrap=bwrap,
                seccomp=bpf if profile.seccomp else None,
            )
            plans[name] = ServerPlan(
                name,
                server,
                launch,
                profile,
                cwd,
                guarded=tuple(guarded_paths(request, profile)),
                workspace_access=access,
                workspace_reason=access_reason,
                placeholders=tuple(placeholders(profile)),
                egress=egress,
                egress_socket=egress_socket,
            )
        else:
            env = {
                **sandbox_env(request, os.path.dirname(command)),
                "HOME": os.path.expanduser("~"),
            }
            launch = LaunchSpec(name, [command, *server.args], env, cwd, server.timeout)
            plans[name] = ServerPlan(name, server, launch, None, cwd)
    return SessionPlan(
        session_id=session_id,
        config=config,
        policy=files,
        engine=engine,
        workspace=workspace,
        create_workspace=not os.path.isdir(workspace),
        audit_path=audit_path,
        runtime_dir=runtime_dir,
        servers=plans,
        prefixed=not (opts.servers and len(plans) == 1),
        sandbox_problem=problem,
        run_as=run_as if any(p.sandboxed for p in plans.values()) else None,
        seccomp_bpf=bpf,
        seccomp_problem=seccomp_problem,
        audit_args_clear=opts.audit_args == "clear",
        approval=opts.approval,
        approval_timeout=opts.approval_timeout,
        max_identical_calls=opts.max_identical_calls,
        accept_tool_changes=opts.accept_tool_changes,
        http_port=opts.http_port,
    )
