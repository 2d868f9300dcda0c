"""``ironcurtain check``: one call through the same planning and engine as ``run``."""

from __future__ import annotations

import json

from launcher.errors import UsageError
from launcher.plan import RunOptions, plan_session


def check_call(
    server: str,
    tool: str,
    args_json: str,
    config_path: str | None,
    policy_dir: str | None,
    workspace: str | None,
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
    decision, transport = plan.engine.decide(server, tool, args, cwd=plan.servers[server].cwd)
    ws = plan.workspace
    return "\n".join(
        [
            f"decision:  {decision.decision}",
            f"rule:      {decision.rule}",
            f"reason:    {decision.reason}",
            f"arguments: {json.dumps(transport)}",
            f"workspace: {ws}",
        ]
    )
