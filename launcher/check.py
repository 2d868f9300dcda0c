"""``ironcurtain check``: one call through the same planning and engine as ``run``."""

from __future__ import annotations

import json
import os

from launcher import dirs
from launcher.config import load_and_warn
from launcher.errors import UsageError
from launcher.plan import build_engine, load_policy
from policy.paths import resolve_real_path


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
    ws = resolve_real_path(
        os.path.expanduser(workspace)
        if workspace
        else str(dirs.state_dir() / "workspaces" / "check")
    )
    config = load_and_warn(config_path, ws)
    if server not in config.servers:
        raise UsageError(
            f"no server {server!r} in {config.path} "
            f"(it defines: {', '.join(sorted(config.servers))})"
        )
    files = load_policy(policy_dir)
    audit = resolve_real_path(str(dirs.state_dir() / "audit"))
    engine = build_engine(config, files, ws, audit, config.servers)
    cwd = config.servers[server].cwd or ws
    decision, transport = engine.decide(server, tool, args, cwd=cwd)
    return "\n".join(
        [
            f"decision:  {decision.decision}",
            f"rule:      {decision.rule}",
            f"reason:    {decision.reason}",
            f"arguments: {json.dumps(transport)}",
            f"workspace: {ws}",
        ]
    )
