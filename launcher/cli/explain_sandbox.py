"""``ironcurtain profile NAME``: the exact sandbox a server would get, and why each part."""

from __future__ import annotations

import json
import os
import pwd
import shlex
from typing import Any

from launcher.host.oscalls import wide_table_fd
from launcher.plan.remote_plan import RemoteTarget
from launcher.plan.session_plan import RunOptions, ServerPlan, plan_session
from launcher.shared.user_errors import UsageError
from sandbox_profiles import seatbelt
from sandbox_profiles.bwrap import limits_argv, render_explained
from sandbox_profiles.model import SandboxProfile
from sandbox_profiles.profile import ALWAYS_PROTECTED_NAMES, PROXY_VARIABLES
from sandbox_profiles.seccomp import filter_rules

FORMATS = ("bwrap", "seatbelt", "json")
_SHOWN_ENV = (
    "PATH",
    "HOME",
    "LANG",
    "TERM",
    *PROXY_VARIABLES,
    *(v.lower() for v in PROXY_VARIABLES),
    "NODE_USE_ENV_PROXY",
)


def show_profile(name: str, fmt: str, opts: RunOptions) -> str:
    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt}: expected one of {', '.join(FORMATS)}")
    plan = plan_session(
        RunOptions(
            config=opts.config,
            policy_dir=opts.policy_dir,
            workspace=opts.workspace,
            servers=(name,),
            display_only=True,
        )
    )
    server = plan.servers[name]
    if server.profile is None:
        return _unsandboxed(server, fmt)
    profile = server.profile
    if fmt == "seatbelt":
        return seatbelt.render(profile)
    if fmt == "json":
        return json.dumps(_as_json(server, profile), indent=2)
    return _as_bwrap(server, profile)


def _env_view(server: ServerPlan, profile: SandboxProfile) -> dict[str, str]:
    """Declared values are shown as ``(declared)``: they may be secrets. A brokered secret's
    variable says so, and where its value goes."""
    brokered = {
        b.variable: "(brokered: a sentinel; the value goes only to "
        + ", ".join(f"{h}:{p}" if p else h for h, p in b.hosts)
        + ")"
        for b in server.secrets
    }
    return {
        k: brokered.get(k) or (v if k in _SHOWN_ENV else "(declared)")
        for k, v in profile.env.items()
    }


def _unsandboxed(server: ServerPlan, fmt: str) -> str:
    if server.remote is not None:
        return _remote(server, server.remote, fmt)
    who = pwd.getpwuid(os.getuid()).pw_name
    text = (
        f"server '{server.name}' is UNSANDBOXED (sandbox: false in its config): it runs as "
        f"{who} with the caller's full access to files, processes and the network"
    )
    if fmt == "json":
        return json.dumps({"server": server.name, "sandboxed": False, "note": text}, indent=2)
    return text


def _remote(server: ServerPlan, remote: RemoteTarget, fmt: str) -> str:
    """A remote server: where it is, how it is reached, the names of the headers sent (never
    their values), the names pinned."""
    text = (
        f"server '{server.name}' is REMOTE and UNSANDBOXED: it runs at {remote.where}, where no "
        "sandbox of this machine holds it; ironcurtain's policy, approvals, audit and masking "
        f"apply to every call. Transport: {remote.transport}"
        + (f"; headers sent: {', '.join(remote.headers)}" if remote.headers else "")
        + (
            f"; pinned: {', '.join(f'{k} -> {v}' for k, v in remote.hosts.items())}"
            if remote.hosts
            else ""
        )
    )
    if fmt != "json":
        return text
    shown = {
        "server": server.name,
        "sandboxed": False,
        "remote": True,
        "url": remote.where,
        "transport": remote.transport,
        "headers": sorted(remote.headers),
        "hosts": dict(remote.hosts),
        "note": text,
    }
    return json.dumps(shown, indent=2)


def _as_json(server: ServerPlan, profile: SandboxProfile) -> dict[str, Any]:
    limits = profile.limits
    return {
        "server": server.name,
        "sandboxed": True,
        "argv": list(profile.argv),
        "cwd": profile.cwd,
        "env": _env_view(server, profile),
        "namespaces": [ns for ns in profile.namespaces if not (profile.run_as and ns == "user")],
        "runAs": {"uid": profile.run_as[0], "gid": profile.run_as[1]} if profile.run_as else None,
        "network": profile.network,
        "egress": _egress_json(server),
        "writable": list(profile.writable),
        "workspace": {
            "access": server.workspace_access,
            "reason": server.workspace_reason,
        },
        "protectedNames": list(ALWAYS_PROTECTED_NAMES),
        "guarded": list(server.guarded),
        "anchored": list(server.anchored),
        "mounts": [
            {
                "kind": m.kind,
                "dest": m.dest,
                **({"source": m.source} if m.source and m.source != m.dest else {}),
                **({"mode": f"{m.mode:04o}"} if m.mode is not None else {}),
                "reason": m.reason,
            }
            for m in profile.mounts
        ],
        "limits": {
            "memory": limits.memory,
            "openFiles": limits.open_files,
            "processes": limits.processes,
            "cpuSeconds": limits.cpu_seconds,
            "fileSize": limits.file_size,
        },
        "seccomp": [
            {
                "syscall": r.syscall,
                "action": r.action,
                **({"if": r.condition} if r.condition else {}),
            }
            for r in filter_rules()
        ]
        if profile.seccomp
        else None,
    }


def _egress_json(server: ServerPlan) -> dict[str, Any] | None:
    rules = server.egress
    if rules is None:
        return None

    def entries(items: Any) -> list[str]:
        return [e.pattern + (f":{e.port}" if e.port else "") for e in items]

    return {
        "allowedDomains": entries(rules.allowed),
        "deniedDomains": entries(rules.denied),
        "hosts": dict(rules.hosts),
        "socket": server.egress_socket,
    }


def _as_bwrap(server: ServerPlan, profile: SandboxProfile) -> str:
    # As a start here would: the wide table's descriptor where one can be had.
    table = "TABLE" if wide_table_fd() is not None else None
    chunks = render_explained(profile, server.launch.bwrap, "FD", table_fd=table)
    prefix = limits_argv(profile.limits, "prlimit", 0)
    width = min(56, max(len(shlex.join(c)) for c, _ in chunks))
    lines = [f"# server '{server.name}': the exact command ironcurtain runs (one part a line)"]
    if prefix:
        lines.append(f"{shlex.join(prefix)}  # resource limits (nproc: + the uid's count)")
    else:
        lines.append("# resource limits: none (lifted in its config)")
    if server.workspace_access == "none":
        lines.append(f"# the session workspace: not shown ({server.workspace_reason})")
    for chunk, reason in chunks:
        text = shlex.join(chunk)
        lines.append(f"  {text:<{width}}  # {reason}" if reason else f"  {text}")
    lines.append("# environment (passed to bwrap's own environment, never on an argv):")
    lines += [f"#   {k}={v}" for k, v in _env_view(server, profile).items()]
    if table:
        lines.append(
            "# TABLE: a descriptor (/dev/null) numbered 1023 or more, so the server's"
            " descriptor table starts with 1024 slots"
        )
    if profile.seccomp:
        lines.append("# seccomp: FD is a descriptor holding this filter (libseccomp, BPF):")
        for rule in filter_rules():
            cond = f" when {rule.condition}" if rule.condition else ""
            lines.append(f"#   {rule.syscall}: {rule.action}{cond}")
        lines.append("#   any other ABI (x32, i386): the process is killed")
    if server.egress is not None:
        rules = _egress_json(server) or {}
        lines.append(
            "# network: only through the egress proxy; allowed "
            + ", ".join(rules["allowedDomains"])
            + (f"; denied {', '.join(rules['deniedDomains'])}" if rules["deniedDomains"] else "")
        )
    lines.append(
        "# created later, at any depth of a writable root, and quarantined: "
        + ", ".join(ALWAYS_PROTECTED_NAMES)
    )
    return "\n".join(lines)
