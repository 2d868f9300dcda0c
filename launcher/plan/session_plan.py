"""Everything a session needs, decided and checked before anything is created or started.

Errors speak the library's words: an option is named as the field of :class:`RunOptions`
it came from (``OptionError.option``, ``SandboxRefused.option``), and the command layer
names it as its users know it (``--audit-args``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from collections.abc import Container, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

from launcher.audit.telemetry_plan import TelemetryPlan, telemetry_plan
from launcher.host.machine import (
    BWRAP_FIX,
    SECCOMP_FIX,
    SandboxProbe,
    sandbox_identity,
    seccomp_filter,
)
from launcher.plan import bundled
from launcher.plan.caller_sources import check_caller_options, plan_callers
from launcher.plan.config import CALLER, LoadedConfig, load_and_warn
from launcher.plan.config_schema import ServerConfig
from launcher.plan.policy_plan import build_engine, check_output_servers, load_policy
from launcher.plan.programs import search_path
from launcher.plan.run_options import RunOptions
from launcher.plan.server_plan import (
    ServerPlan,
    Surroundings,
    judge_writable,
    never_shown,
    plan_server,
)
from launcher.plan.state_places import STATE_DIRS, state_protected, uncovered, writable_holds
from launcher.plan.workspace import check_workspace, homes, moved_places, workspace_for
from launcher.shared import dirs, rundir
from launcher.shared.user_errors import OptionError, SandboxRefused, UsageError
from policy.engine import PolicyEngine
from policy.loader import PolicyFiles
from policy.paths import resolve_real_path
from policy.permissions import PERMISSIONS_FILE, check_servers
from sandbox_profiles.records import frozen

if TYPE_CHECKING:
    from launcher.shared.caller_identity import Caller
    from launcher.transports.http.bearer_token import Token
    from launcher.transports.http.gateway.keys import Gateway

__all__ = [
    "RunOptions",
    "ServerPlan",
    "SessionPlan",
    "plan_session",
]


MAX_CLIENTS = 1024  # each has servers of its own: more is no setting, an outage


@frozen
class SessionPlan:
    """Everything a session is made from, worked out before anything starts."""

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
    http_bind: str = "127.0.0.1"  # the address it listens on
    public_url: str | None = None  # where clients reach it
    http_token: Token | None = None  # set with http_port, unless callers come with tokens
    caller: Caller | None = None  # the one caller of a session on stdio (a caller file)
    gateway: Gateway | None = None  # over HTTP: callers authenticated by their JWTs
    max_clients: int = 16  # over HTTP: sessions (and callers) served at once
    seccomp_bpf: bytes | None = None  # the compiled filter every sandboxed server gets
    seccomp_problem: str | None = None
    telemetry: TelemetryPlan | None = None  # where each call is exported (OTEL_* variables)
    # Over HTTP with callers: the workspace or a server's config names ${caller}, and this
    # plan stands for every caller's (CALLER in its paths); each caller's servers are
    # planned for it (launcher.plan.caller_plan), nothing is started from this one.
    per_caller: bool = False
    options: RunOptions | None = None  # what it was planned from


def new_session_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + os.urandom(3).hex()


def select_servers(config: LoadedConfig, names: tuple[str, ...]) -> dict[str, ServerConfig]:
    if names:
        unknown = [n for n in names if n not in config.servers]
        if unknown:
            raise OptionError(
                "servers",
                unknown[0],
                f"no such server in {config.path} "
                f"(it defines: {', '.join(sorted(config.servers)) or 'none'})",
            )
        disabled = [n for n in names if config.servers[n].disabled]
        if disabled:
            raise OptionError("servers", disabled[0], f"the server is disabled in {config.path}")
        chosen = {n: config.servers[n] for n in dict.fromkeys(names)}
    else:
        chosen = {n: s for n, s in config.servers.items() if not s.disabled}
    if not chosen:
        raise UsageError(f"{config.path}: no enabled servers to start")
    for name in chosen:  # what could not be expanded is an error for a server started
        if name in config.broken:
            raise config.broken[name]
    return chosen


def check_options(opts: RunOptions) -> None:
    if opts.audit_args not in ("hashed", "clear"):
        raise OptionError("audit_args", opts.audit_args, "expected hashed or clear")
    if opts.approval not in ("auto", "elicit", "socket", "web", "deny"):
        raise OptionError("approval", opts.approval, "expected auto, elicit, socket, web or deny")
    if opts.approval == "web" and not all(map(_importable, ("starlette", "uvicorn"))):
        raise OptionError(
            "approval",
            opts.approval,
            "the approvals page needs the HTTP stack, which is not installed: "
            "pip install 'ironcurtain[http]'",
        )
    if opts.http_port is not None and not 0 <= opts.http_port < 65536:
        raise OptionError("http_port", opts.http_port, "not a port (0 picks a free one)")
    if opts.http_port is not None and not all(map(_importable, ("mcp", "uvicorn"))):
        raise OptionError(
            "http_port",
            opts.http_port,
            "needs the HTTP stack, which is not installed: pip install 'ironcurtain[http]'",
        )
    _check_reach(opts)
    if opts.http_token_file is not None and opts.http_port is None:
        raise OptionError(
            "http_token_file",
            opts.http_token_file,
            "is only used with {http_port}",
            mentions=("http_port",),
        )
    if not 1 <= opts.max_clients <= MAX_CLIENTS:
        raise OptionError(
            "max_clients", opts.max_clients, f"expected a number from 1 to {MAX_CLIENTS}"
        )
    check_caller_options(opts)
    if opts.state is not None:
        _check_state(opts)
    if not opts.approval_timeout > 0:
        raise OptionError("approval_timeout", opts.approval_timeout, "must be above 0")


def _check_reach(opts: RunOptions) -> None:
    """``--http-bind`` and ``--public-url``: an IP address, a URL the endpoint can be, over
    HTTP; beyond loopback only with the public URL, the one Host then answered."""
    from launcher.transports.http.public_address import (
        bind_problem,
        is_loopback,
        public_url_problem,
    )

    given = {"http_bind": opts.http_bind} if opts.http_bind != "127.0.0.1" else {}
    given |= {"public_url": opts.public_url} if opts.public_url is not None else {}
    for name, value in given.items():
        if opts.http_port is None:
            raise OptionError(name, value, "is only used with {http_port}", mentions=("http_port",))
    problem = bind_problem(opts.http_bind)
    if problem is not None:
        raise OptionError("http_bind", opts.http_bind, problem)
    problem = None if opts.public_url is None else public_url_problem(opts.public_url)
    if problem is not None:
        raise OptionError("public_url", opts.public_url, problem)
    if opts.public_url is None and not is_loopback(opts.http_bind):
        raise OptionError(
            "http_bind",
            opts.http_bind,
            "listening beyond this machine needs {public_url}: the endpoint answers only "
            "requests whose Host names it, so a web page whose DNS name an attacker points "
            "at this address is refused (DNS rebinding)",
            mentions=("public_url",),
        )


def _check_state(opts: RunOptions) -> None:
    """``--state``: a Redis URL, over HTTP, with its client installed."""
    from launcher.shared_state.redis_store import BadStateURL, check_url, shown

    url = opts.state or ""
    if opts.http_port is None:
        raise OptionError(
            "state", shown(url), "is only used with {http_port}", mentions=("http_port",)
        )
    try:
        check_url(url)
    except BadStateURL as bad:
        raise OptionError("state", shown(url), str(bad)) from None
    if not _importable("redis"):
        raise OptionError(
            "state",
            shown(url),
            "needs the Redis client, which is not installed: pip install 'ironcurtain[redis]'",
        )


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _http_token(token_file: str | None) -> Token:
    from launcher.transports.http.bearer_token import resolve

    return resolve(token_file)


def plan_session(opts: RunOptions) -> SessionPlan:
    """The plan of a session: the same for running it, showing a server's profile and
    checking one call (``display_only``: nothing probed, nothing refused)."""
    check_options(opts)
    # Before anything is probed or made: a wrong caller file or an issuer whose keys cannot
    # be had stops the session here.
    callers = (None, None) if opts.display_only else plan_callers(opts)
    telemetry = None if opts.display_only else telemetry_plan(os.environ)
    session_id = new_session_id()
    workspace = workspace_for(opts.workspace, session_id, caller_variable(opts, *callers))
    check_workspace(workspace, opts.workspace)
    run_as = sandbox_identity(workspace)
    # Whether bwrap works here is probed while the config and the policy are read.
    if opts.display_only:
        return plan_from(opts, session_id, workspace, run_as, None, callers)
    with SandboxProbe(run_as is not None) as probe:
        plan = plan_from(opts, session_id, workspace, run_as, probe, callers)
    return replace(plan, telemetry=telemetry) if telemetry is not None else plan


def caller_variable(opts: RunOptions, caller: Caller | None, gateway: Gateway | None) -> str | None:
    """What ``${caller}`` stands for while planning: the one caller's name made safe for a
    path, itself (a plan for every caller: over HTTP with callers, or only shown), or
    nothing (no caller: naming it is an error)."""
    if caller is not None:
        return caller.path_name
    every = gateway is not None or opts.display_only or opts.every_caller
    return CALLER if every else None


@frozen
class _Read:
    """What a session plan reads before its sandboxes are planned: the configuration, the
    servers started, the policy and its engine, where the audit log goes."""

    variable: str | None
    config: LoadedConfig
    selected: dict[str, ServerConfig]
    files: PolicyFiles
    engine: PolicyEngine
    audit_path: str


def _read(
    opts: RunOptions,
    session_id: str,
    workspace: str,
    callers: tuple[Caller | None, Gateway | None],
    base: SessionPlan | None,
) -> _Read:
    variable = caller_variable(opts, *callers)
    config = load_and_warn(opts.config, workspace, variable)
    selected = bundled.installed(
        config.source, select_servers(config, opts.servers), opts.servers, search_path()
    )
    writable = [p for s in selected.values() if s.sandbox for p in s.sandbox.filesystem.allow_write]
    # Judged before anything is made for them.
    judge_writable(config, selected, homes(*writable), moved_places())
    files = base.policy if base is not None else load_policy(opts.policy_dir)
    check_output_servers(files, config.servers)
    check_servers(files.permissions, config.servers, str(files.directory / PERMISSIONS_FILE))
    audit_path = resolve_real_path(
        os.path.expanduser(opts.audit_log)
        if opts.audit_log
        else str(dirs.state_dir() / "audit" / f"{session_id}.jsonl")
    )
    engine = build_engine(config, files, workspace, audit_path, selected)
    state_real = engine.structural.state_dir or ""
    if state_real and not opts.display_only and writable_holds(state_real, workspace, selected):
        # What ironcurtain writes in its state directory is there before the sandboxes are
        # planned, so a root that holds it gets it read-only; made later, the guard would
        # take it for a server's and move it away.
        dirs.make_state(STATE_DIRS)
    return _Read(variable, config, selected, files, engine, audit_path)


def _sandbox_checks(
    opts: RunOptions,
    selected: dict[str, ServerConfig],
    probe: SandboxProbe | None,
    base: SessionPlan | None,
) -> tuple[str | None, bytes | None, str | None]:
    """(why servers cannot be sandboxed here, the system-call filter, why it cannot be had):
    refused unless the options allow running without them; a caller's plan takes its base's."""
    problem = None
    bpf: bytes | None = None
    seccomp_problem: str | None = None
    if base is not None:
        problem, bpf, seccomp_problem = base.sandbox_problem, base.seccomp_bpf, base.seccomp_problem
    elif probe is None:
        pass
    elif any(s.sandboxed for s in selected.values()):
        problem = probe.result()
        if problem and not opts.allow_unsandboxed:
            raise SandboxRefused(
                problem, BWRAP_FIX, "allow_unsandboxed", "run servers without isolation"
            )
        if problem is None:
            bpf, seccomp_problem = seccomp_filter(dirs.cache_dir())
            if seccomp_problem and not opts.allow_no_seccomp:
                raise SandboxRefused(
                    seccomp_problem,
                    SECCOMP_FIX,
                    "allow_no_seccomp",
                    "sandbox without the system-call filter",
                )
    return problem, bpf, seccomp_problem


def _surroundings(
    opts: RunOptions,
    read: _Read,
    session_id: str,
    workspace: str,
    run_as: tuple[int, int] | None,
    bpf: bytes | None,
    can_sandbox: bool,
) -> Surroundings:
    """What every server's sandbox is planned in: its session's runtime directory, the
    files kept read-only in any writable root, the machine's places."""
    # Sockets live here, and a unix socket path has at most 107 bytes (the socket of a
    # caller's own broker, for a server with secrets, is named with its tag: OWN_TAG
    # characters and a dash more).
    own = "x" * (OWN_TAG + 1)
    names = [f"egress-{n}{own if s.secrets else ''}.sock" for n, s in read.selected.items()]
    names.append("approvals.sock")
    longest = max(names, key=len)
    runtime_dir = rundir.path_for(session_id, longest)
    # Read-only inside any writable root: ironcurtain's files, and its state dir (when this
    # session's workspace is one of its workspaces, everything there but the workspaces).
    state_real = read.engine.structural.state_dir or ""
    sandbox_protected = list(read.engine.structural.protected)
    if state_real:
        sandbox_protected += state_protected(state_real, workspace)
    sandbox_protected = uncovered(sandbox_protected)
    return Surroundings(
        config=read.config,
        annotations=read.files.annotations,
        workspace=workspace,
        runtime_dir=runtime_dir,
        search=search_path(),
        bwrap=shutil.which("bwrap") or "bwrap",
        protected=sandbox_protected,
        never_shown=never_shown(),
        run_as=run_as,
        seccomp_bpf=bpf,
        can_sandbox=can_sandbox,
        display_only=opts.display_only,
        read_only=opts.read_only,
    )


OWN_TAG = 16  # hex digits of a caller's tag


def own_tag(caller: Caller) -> str:
    """What tells one caller's brokers apart in the session's runtime directory.

    >>> from launcher.shared.caller_identity import Caller
    >>> alice, bob = (Caller(n, frozenset(), "https://idp") for n in ("alice", "bob"))
    >>> len(own_tag(alice)), own_tag(alice) != own_tag(bob)
    (16, True)
    """
    issuer, name = caller.key
    return hashlib.sha256(f"{issuer}\0{name}".encode()).hexdigest()[:OWN_TAG]


def _per_caller(
    opts: RunOptions,
    gateway: Gateway | None,
    variable: str | None,
    per_caller: Container[str],
    selected: Iterable[str],
) -> bool:
    """Whether each caller's servers are planned and started for it: a gateway whose
    workspace, or one of whose servers, names the caller."""
    return (
        gateway is not None
        and variable == CALLER
        and (CALLER in (opts.workspace or "") or any(n in per_caller for n in selected))
    )


def plan_from(
    opts: RunOptions,
    session_id: str,
    workspace: str,
    run_as: tuple[int, int] | None,
    probe: SandboxProbe | None,
    callers: tuple[Caller | None, Gateway | None] = (None, None),
    base: SessionPlan | None = None,
) -> SessionPlan:
    """The plan; ``base``: the plan for every caller this one is one caller's of (its
    policy and its sandbox checks are this one's too)."""
    read = _read(opts, session_id, workspace, callers, base)
    config, selected, files, engine = read.config, read.selected, read.files, read.engine
    audit_path, variable = read.audit_path, read.variable
    # Made (when it is not there) before the sandboxes are planned: see make_state.
    caller, gateway = callers
    http_token = (
        _http_token(opts.http_token_file)
        if opts.http_port is not None and not opts.display_only and gateway is None
        else None
    )
    problem, bpf, seccomp_problem = _sandbox_checks(opts, selected, probe, base)
    at = _surroundings(opts, read, session_id, workspace, run_as, bpf, problem is None)
    if caller is not None and base is not None:
        at = replace(at, own=own_tag(caller))
    runtime_dir = at.runtime_dir
    plans = {name: plan_server(name, server, at) for name, server in selected.items()}
    per_caller = _per_caller(opts, gateway, variable, config.per_caller, selected)
    return SessionPlan(
        session_id=session_id,
        config=config,
        policy=files,
        engine=engine,
        workspace=workspace,
        create_workspace=not per_caller and not os.path.isdir(workspace),
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
        http_bind=opts.http_bind,
        public_url=opts.public_url,
        max_clients=opts.max_clients,
        http_token=http_token,
        caller=caller,
        gateway=gateway,
        per_caller=per_caller,
        options=opts,
    )
