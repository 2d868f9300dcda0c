"""What a session checks of its servers once they have listed their tools: each entry of
``output-policy.json`` and ``permissions.json`` names something a server has; and what each
audit entry of a client's relay adds (:func:`audit_stamp`)."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping
from typing import Any

from launcher.plan.session_plan import SessionPlan
from launcher.shared.caller_identity import Caller
from launcher.shared.jsonrpc import Message
from launcher.shared.user_errors import StartupError
from launcher.transports.http.caller_relays import Upstream
from policy.output import OUTPUT_POLICY_FILE, schema_conflicts
from policy.permissions import PERMISSIONS_FILE, unmatched
from policy.pipeline.heuristic import arguments_of, is_flag
from policy.roles import get_path_roles


def audit_stamp(
    upstream: Upstream, caller: Caller | None
) -> Callable[[Mapping[str, Any]], Mapping[str, object]]:
    """What each audit entry of a relay adds: what its client's transport says of the
    entry's request (its caller, its session, the client's own id for it) and, whatever the
    transport no longer knows of a request, the caller the relay serves."""
    if caller is None:
        return upstream.audit_fields
    own = {"caller": caller.audited}

    def stamp(entry: Mapping[str, Any]) -> Mapping[str, object]:
        return {**own, **upstream.audit_fields(entry)}

    return stamp


def check_output_tools(
    plan: SessionPlan,
    tools: dict[str, list[Message]],
    prompts: dict[str, list[Message]] | None = None,
) -> list[str]:
    """Each entry of ``output-policy.json`` (and of ``permissions.json``) for a server of
    this session names a tool (or prompt) it has (a glob: matches one); otherwise the
    session does not start. Returns a warning for each tool whose ``outputSchema`` its
    output policy would break (the client may then refuse its results), and for each path
    role given to a flag (:func:`path_roles_on_flags`)."""
    names_of = {
        "tools": {s: [str(t.get("name")) for t in ts] for s, ts in tools.items()},
        "prompts": {s: [str(p.get("name")) for p in ps] for s, ps in (prompts or {}).items()},
    }
    wrong = unmatched(plan.policy.permissions, names_of)
    if wrong is not None:
        raise StartupError(f"{plan.policy.directory / PERMISSIONS_FILE}: {wrong}")
    output = plan.policy.output
    for i, entry in enumerate(output.tools):
        servers = [name for name in tools if fnmatch.fnmatchcase(name, entry.server)]
        names = sorted({str(t.get("name")) for s in servers for t in tools[s]})
        if servers and not any(fnmatch.fnmatchcase(name, entry.tool) for name in names):
            raise StartupError(
                f"{plan.policy.directory / OUTPUT_POLICY_FILE}: $.tools[{i}].tool: "
                f"{entry.tool!r} matches no tool of {', '.join(servers)} "
                f"(its tools: {', '.join(names) or 'none'})"
            )
    warnings = path_roles_on_flags(plan, tools)
    for server, listed in tools.items():
        for tool in listed:
            name = str(tool.get("name"))
            own = output.for_tool(server, name)
            schema = tool.get("outputSchema")
            if own is None or schema is None:
                continue
            conflicts = schema_conflicts(own, schema)
            if conflicts:
                warnings.append(
                    f"WARNING: the output policy of {server}/{name} breaks its outputSchema "
                    f"(a client that checks results will refuse them): {'; '.join(conflicts)}"
                )
    return warnings


def unguarded_resources(
    plan: SessionPlan, tools: dict[str, list[Message]], offers: dict[str, bool]
) -> list[str]:
    """A warning for each server whose every tool ``permissions.json`` guards and that also
    offers resources (``offers``): those are decided by the policy alone, for every caller,
    which an operator who closed the server's tools may not expect."""
    permissions = plan.policy.permissions
    if not permissions:
        return []
    return [
        f"warning: permissions.json requires a permission for every tool of '{server}', "
        "which also offers resources: those are not guarded by permissions.json (every "
        "caller may read what the policy allows)"
        for server, listed in tools.items()
        if listed
        and offers.get(server)
        and all(permissions.required("tools", server, str(t.get("name"))) for t in listed)
    ]


def path_roles_on_flags(plan: SessionPlan, tools: dict[str, list[Message]]) -> list[str]:
    """A warning for each argument the annotations give a path role that the tool says is
    a flag, a number or one of fixed values (``"confirm": "yes"``): its value would be
    sent made into a path (``<workspace>/yes``) and the server would refuse it."""
    paths = set(get_path_roles())
    warnings = []
    for server, listed in tools.items():
        for tool in listed:
            name = str(tool.get("name"))
            annotation = plan.engine.get_annotation(server, name)
            if annotation is None:
                continue
            for arg, spec in arguments_of(tool).items():
                roles = set(annotation.args.get(arg, ())) & paths
                if roles and is_flag(spec):
                    warnings.append(
                        f"warning: tool-annotations.json: {server}/{name}: argument '{arg}' "
                        f"takes a flag, a number or one of fixed values, never a path, but "
                        f"has the path role {', '.join(sorted(roles))}: its value is sent as "
                        "a path; give it none (annotate-tools redraws a draft)"
                    )
    return warnings
