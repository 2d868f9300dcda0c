"""What ``ironcurtain run`` says on stderr once it is ready: each server and how it is
contained, its tool count, the workspace, the limits, where the audit log is, who answers
escalations, and (on a terminal, or for ``--http``) a client configuration to paste."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from launcher.plan.session_plan import SessionPlan
from launcher.shared.jsonrpc import Message
from launcher.shared.shown import visible

if TYPE_CHECKING:
    from policy.egress import EgressRules


def say(text: str) -> None:
    """One line for the person who started ``ironcurtain run``, on stderr. What a server or
    a client put in it (a name, an error's text) is shown, never acted on by the terminal,
    and a newline in it cannot start a line that reads as ironcurtain's own."""
    print(f"ironcurtain: {visible(text, one_line=True)}", file=sys.stderr, flush=True)


def say_lines(text: str) -> None:
    """Several lines of ironcurtain's own, each made safe to show where it was made (the
    start-up report)."""
    print(f"ironcurtain: {text}", file=sys.stderr, flush=True)


class HttpAddress(Protocol):
    @property
    def url(self) -> str: ...

    @property
    def token(self) -> str | None: ...


def approval_channels(mode: str, session_id: str, callers: bool = False) -> str:
    """Who answers escalations, in a few words; ``callers``: the session has callers (the
    party whose call it is is not the operator)."""
    terminal = f"`ironcurtain approvals --session {session_id}`"
    if callers and mode == "auto":
        return f"{terminal} (the operator's; a caller's client is never asked), else deny"
    if callers and mode == "elicit":
        return (
            "the caller's client (MCP elicitation) if it can, for what widens no sandbox "
            "and names only the caller's own places; else deny"
        )
    return {
        "auto": f"the client (MCP elicitation) if it can, else {terminal}, else deny",
        "elicit": "the client (MCP elicitation) if it can, else deny",
        "socket": f"{terminal}",
        "web": f"the approvals page (its address printed at start), or {terminal}",
        "deny": "none: escalations are denied",
    }.get(mode, mode)


def has_callers(plan: SessionPlan) -> bool:
    """Whether the session's requests are callers' (a caller file, or callers' tokens)."""
    return plan.caller is not None or plan.gateway is not None


def containment(plan: SessionPlan, name: str) -> str:
    """How a server is contained, in a few words."""
    sp = plan.servers[name]
    if sp.remote is not None:
        return f"REMOTE, unsandboxed: {sp.remote.where}"
    if sp.profile is None:
        return "UNSANDBOXED" + (
            f" ({plan.sandbox_problem})"
            if plan.sandbox_problem and sp.config.sandboxed
            else " (sandbox: false)"
        )
    net = "no network"
    if sp.egress is not None:
        net = f"egress proxy: {reach(sp.egress)}"
    return f"sandboxed (bwrap, {net}" + (")" if sp.profile.seccomp else ", NO seccomp filter)")


def reach(egress: EgressRules) -> str:
    """What an egress proxy lets a server reach, in a few words: ``*`` is any name that
    resolves to a public address (the proxy refuses the rest), not one domain.

    >>> from policy.egress import EgressRules
    >>> reach(EgressRules.from_config(["*"])), reach(EgressRules.from_config(["a.org", "b.org"]))
    ('any public name', '2 domains')
    >>> reach(EgressRules.from_config(["*:443", "a.org"], ["bad.org"]))
    'any public name on port 443, 1 domain more, 1 refused'
    """
    anywhere = [e for e in egress.allowed if e.pattern == "*"]
    if any(e.port is None for e in anywhere):
        said = "any public name"
    else:
        numbers = sorted({e.port for e in anywhere if e.port})
        ports = ("port " if len(numbers) == 1 else "ports ") + ", ".join(map(str, numbers))
        count = len(egress.allowed) - len(anywhere)
        domains = f"{count} domain{'s' if count != 1 else ''}"
        said = f"any public name on {ports}, {domains} more" if anywhere else domains
    if egress.denied:
        said += f", {len(egress.denied)} refused"
    return said


def output_filters(plan: SessionPlan) -> str:
    """What is filtered out of what servers send, in a few words."""
    off = [name for name, sp in plan.servers.items() if not sp.config.mask_secrets]
    text = "credentials masked in everything servers send" + (
        f" (off for: {', '.join(off)})" if off else ""
    )
    if len(off) == len(plan.servers):
        text = "credentials NOT masked (maskSecrets: false)"
    tools = [f"{e.server}/{e.tool}" for e in plan.policy.output.tools]
    return text + (f"; output policy for {', '.join(tools)}" if tools else "")


def argument_scan(plan: SessionPlan) -> str:
    """What is looked for in what the agent sends, in a few words: where it is off, and
    the detectors each server leaves out."""
    off = [name for name, sp in plan.servers.items() if sp.config.argument_scan_skips is None]
    if plan.servers and len(off) == len(plan.servers):
        return "credentials in arguments NOT looked for (scanArguments: false)"
    text = "credentials in arguments escalated"
    notes = [f"off for: {', '.join(off)}"] if off else []
    for name, sp in plan.servers.items():
        skips = sp.config.argument_scan_skips
        if skips:
            notes.append(f"{name} skips {', '.join(skips)}")
    return text + (f" ({'; '.join(notes)})" if notes else "")


def permissions_note(plan: SessionPlan) -> str:
    """What ``permissions.json`` holds, said after the policy directory ('' when nothing),
    and that nothing is checked against it when the session knows no callers."""
    permissions = plan.policy.permissions
    count = len(permissions.tools) + len(permissions.prompts)
    if not count:
        return ""
    said = f" (permissions.json: {count} entr{'y' if count == 1 else 'ies'}"
    if plan.caller is None and plan.gateway is None:
        return said + "; NOT checked: this session has no callers, only its one user)"
    return said + ")"


def own_workspaces(plan: SessionPlan) -> list[str]:
    """A line per server with workspace directories of its own, where the policy lets its
    calls read and write as in the session's workspace."""
    found = ((name, plan.engine.workspaces(name)) for name in plan.servers)
    return [f"              and {name}'s own: {', '.join(own)}" for name, own in found if own]


def _server_lines(
    plan: SessionPlan, tools: Mapping[str, list[Message]], eras: Mapping[str, str] | None
) -> list[str]:
    """A line per server: its containment, its tools, the era it is spoken to in."""
    lines = []
    width = max(len(n) for n in tools)
    boxes = {name: containment(plan, name) for name in tools}
    box_width = max(32, *(len(b) for b in boxes.values()))
    for name, listed in tools.items():
        count = len(listed)
        era = (eras or {}).get(name, "handshake")
        shown = f"{count} tool{'' if count == 1 else 's'}"
        if plan.per_caller:
            shown = "started for each caller when it first calls"
        elif per_caller_login(plan, name):
            shown = "opened for each caller with its own login"
        lines.append(
            f"  {name:<{width}}  {boxes[name]:<{box_width}} "
            + shown
            + ("" if era == "handshake" else f" ({era} era)")
        )
    return lines


def per_caller_login(plan: SessionPlan, name: str) -> bool:
    """Whether a server of ``plan`` is a remote one each caller logs in to on its own."""
    from launcher.servers.remote import own_logins

    remote = plan.servers[name].remote
    return plan.gateway is not None and remote is not None and own_logins(remote)


def _workspace_lines(plan: SessionPlan) -> list[str]:
    """Per sandboxed server: how it sees the workspace, and the limits in force."""
    access: dict[str, list[str]] = {}
    limits: dict[str, list[str]] = {}
    for name, sp in plan.servers.items():
        if sp.profile is not None:
            access.setdefault(sp.workspace_access, []).append(name)
            limits.setdefault(sp.profile.limits.describe(), []).append(name)
    seen = "; ".join(
        f"{label}: {', '.join(access[key])}"
        for key, label in (("write", "writable"), ("read", "read-only"), ("none", "not shown"))
        if key in access
    )
    lines = [f"  workspace:  {plan.workspace}" + (f" ({seen})" if seen else "")]
    lines += own_workspaces(plan)
    if plan.per_caller:
        lines.append("              ${caller}: each caller's name made safe for a path")
    lines += [f"  limits:     {', '.join(names)}: {text}" for text, names in limits.items()]
    return lines


def _http_lines(plan: SessionPlan, http: HttpAddress) -> list[str]:
    """Who may call over HTTP: gateway mode's token issuer, or the bearer token (and, on a
    terminal, a client's configuration holding it)."""
    gateway = plan.gateway
    if gateway is not None:
        return [
            f"ironcurtain: callers: JWTs of {gateway.issuer} for the audience "
            f"{gateway.audience} (keys: {gateway.jwks_url}; permissions: the "
            f"{gateway.permissions_claim} claim); no other bearer token is taken"
            + "".join(f"; admitted only with {claim}={glob}" for claim, glob in gateway.required)
        ]
    source = plan.http_token.source if plan.http_token is not None else "given"
    lines = [f"ironcurtain: bearer token: {source} (`ironcurtain http-token` prints it)"]
    if sys.stderr.isatty():  # the token is not written to a log file
        lines.append("ironcurtain: client configuration:")
        entry = {
            "type": "http",
            "url": http.url,
            "headers": {"Authorization": f"Bearer {http.token}"},
        }
        lines.append(json.dumps({"mcpServers": {"ironcurtain": entry}}, indent=2))
    return lines


def _ready_lines(plan: SessionPlan, http: HttpAddress | None) -> list[str]:
    """Where clients connect, and that the session is ready."""
    if http is not None:
        return [
            *_http_lines(plan, http),
            f"ironcurtain: ready, serving MCP on {http.url} ("
            + (f"public URL {plan.public_url}; " if plan.public_url is not None else "")
            + "each client session gets its own servers; Ctrl-C stops)",
        ]
    lines = []
    if sys.stdin.isatty():
        lines.append("ironcurtain: client configuration for this session:")
        lines.append(client_entry(plan))
    lines.append("ironcurtain: ready, serving MCP on stdio (end of input or Ctrl-C stops)")
    return lines


def startup_report(
    plan: SessionPlan,
    tools: Mapping[str, list[Message]],
    http: HttpAddress | None,
    eras: Mapping[str, str] | None = None,
) -> str:
    """What started (``eras``: the protocol era each server is spoken to in, when not the
    handshake era's)."""
    lines = [f"ironcurtain: session {plan.session_id}", *_server_lines(plan, tools, eras)]
    if plan.run_as is not None:
        uid, gid = plan.run_as
        lines.append(f"  servers run as uid {uid}, gid {gid} (ironcurtain runs as root)")
    lines += _workspace_lines(plan)
    lines += [
        f"  audit log:  {plan.audit_path}",
        f"  config:     {plan.config.path} ({plan.config.source})",
        f"  policy:     {plan.policy.directory}{permissions_note(plan)}",
        f"  output:     {output_filters(plan)}",
        f"  arguments:  {argument_scan(plan)}",
        f"  approvals:  {approval_channels(plan.approval, plan.session_id, has_callers(plan))}",
    ]
    if plan.caller is not None:
        lines.append(f"  caller:     {plan.caller.name} (every request; from its caller file)")
    lines += _ready_lines(plan, http)
    # Each line on one line (names in it are the config's and the servers'); the JSON blocks
    # (ASCII, their newlines their own) as they are.
    return "\n".join(
        line if line.startswith("{") and line.isascii() else visible(line, one_line=True)
        for line in lines
    )


def client_entry(plan: SessionPlan) -> str:
    """A client configuration entry (Claude Desktop / Claude Code form) for this session."""
    exe = shutil.which("ironcurtain") or os.path.join(
        os.path.dirname(sys.executable), "ironcurtain"
    )
    args = ["run", "--config", str(plan.config.path.resolve())]
    if plan.policy.directory:
        args += ["--policy-dir", str(plan.policy.directory)]
    if not plan.prefixed:
        args += ["--server", next(iter(plan.servers))]
    # With one selected server the entry replaces that server in a client's config.
    key = "ironcurtain" if plan.prefixed else next(iter(plan.servers))
    return json.dumps({"mcpServers": {key: {"command": exe, "args": args}}}, indent=2)
