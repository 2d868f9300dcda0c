"""``ironcurtain check``: one call through the same planning and engine as ``run``."""

from __future__ import annotations

import json

from launcher.plan import coherence
from launcher.plan.session_plan import RunOptions, SessionPlan, plan_session
from launcher.relay.outputs import Outputs
from launcher.shared.caller_identity import load_caller_file
from launcher.shared.jsonrpc import loads
from launcher.shared.user_errors import UsageError
from policy.access import CALL_TOOL, caller_access
from policy.argument_scan import ArgumentScan, escalated, scan_arguments
from policy.decision import Decision


def check_call(
    server: str,
    tool: str,
    args_json: str,
    config_path: str | None,
    policy_dir: str | None,
    workspace: str | None,
    output: str | None = None,
    caller_file: str | None = None,
) -> str:
    try:
        args = json.loads(args_json)
    except ValueError as exc:
        raise UsageError(f"--args: not valid JSON ({exc})") from None
    if not isinstance(args, dict):
        raise UsageError('--args: must be a JSON object, like \'{"path": "notes.txt"}\'')
    # The same planning as `run` and `profile`: this server, its config, its policy, its
    # workspace and working directory, nothing started.
    plan = plan_session(
        RunOptions(
            config=config_path,
            policy_dir=policy_dir,
            workspace=workspace,
            servers=(server,),
            display_only=True,
        )
    )
    caller = load_caller_file(caller_file, "caller_file") if caller_file is not None else None
    engine = plan.engine
    required = sorted(engine.permissions.required("tools", server, tool))
    held = caller.permissions if caller else None
    access = caller_access(engine.permissions, CALL_TOOL, server, tool, held)
    missing = access.missing
    if access.refusal is not None:  # as the gate decides it: before the policy is asked
        decision, transport = access.refusal, args
    else:
        who = caller.name if caller else None
        decision, transport = _decided(plan, server, tool, args, who)
    ws = plan.workspace
    lines = [
        f"decision:  {decision.decision}",
        f"rule:      {decision.rule}",
        f"reason:    {decision.reason}",
        f"arguments: {json.dumps(transport)}",
        f"workspace: {ws}",
    ]
    own = engine.workspaces(server)
    if own:
        lines.append(f"           and {server}'s own: {', '.join(own)}")
    if required:
        lines.append(f"requires:  {', '.join(required)} (permissions.json)")
    if caller is not None:
        lacks = f"lacks {', '.join(missing)}" if missing else "holds what is required"
        lines.append(f"caller:    {caller.name}: {lacks}")
    if output is not None:
        lines += preview_output(plan, server, tool, output)
    lines += [f"warning:   {mismatch}" for mismatch in coherence.check(plan)]
    return "\n".join(lines)


def _decided(
    plan: SessionPlan, server: str, tool: str, args: dict[str, object], caller: str | None
) -> tuple[Decision, dict[str, object]]:
    """The policy's decision and the arguments it forwards, escalated as the gate escalates
    arguments that hold a credential (the values known are this server's own secrets: the
    others are not planned here)."""
    sp = plan.servers[server]
    decision, transport = plan.engine.decide(server, tool, args, cwd=sp.cwd, caller=caller)
    skips = sp.config.argument_scan_skips
    if skips is None:
        return decision, transport
    known = [(b.variable, b.value) for b in sp.secrets]
    found = scan_arguments(transport, ArgumentScan.of(known, skips))
    return escalated(found, decision), transport


def preview_output(plan: SessionPlan, server: str, tool: str, sample_json: str) -> list[str]:
    """What the agent would get for ``sample_json`` as this tool's result: a result
    (an object with a ``content`` list or ``structuredContent``) as it is, any other JSON value
    as the result's structured content and its JSON text."""
    try:
        sample = loads(sample_json)
    except ValueError as exc:
        raise UsageError(f"--output: not valid JSON ({exc})") from None
    if isinstance(sample, dict) and (
        isinstance(sample.get("content"), list) or "structuredContent" in sample
    ):
        answer = sample
    else:
        text = json.dumps(sample, ensure_ascii=False)
        answer = {"content": [{"type": "text", "text": text}], "structuredContent": sample}
    outputs = Outputs(plan.policy.output, {server: plan.servers[server].config.mask_secrets})
    shown, record = outputs.answer(server, "tools/call", tool, answer)
    own = plan.policy.output.for_tool(server, tool)
    policy = f"{own.server}/{own.tool}" if own else "none (every field passes)"
    done = record or {}
    secrets = ", ".join(f"{k} x{n}" for k, n in done.get("secretsMasked", {}).items())
    return [
        f"output policy: {policy}",
        f"filtered:  {done.get('fieldsMasked', 0)} fields masked, "
        f"{done.get('fieldsRemoved', 0)} removed; credentials: {secrets or 'none found'}",
        "the agent gets:",
        json.dumps(shown, indent=2, ensure_ascii=False),
    ]
