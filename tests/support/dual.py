"""Sessions with the dual-era server on the ``mcp`` SDK (tests/servers/dual_server.py): its
tools ask the client (a form, the model, the roots) in whichever era it is spoken to."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from tests.support.home import Home
from tests.support.paths import TESTS
from tests.support.probe import write_raw_policy

DUAL = TESTS / "servers" / "dual_server.py"


def dual_args(
    user: Home, *flags: str, rules: Sequence[dict[str, Any]] = (), era: str | None = None
) -> list[str]:
    """``ironcurtain run`` options for the dual-era server alone (run with ``flags``, with
    ``era`` in its config when given), sandboxed; ``rules`` first, then its ``greet`` escalated (a
    human approves it), every other call allowed."""
    sandbox = {"filesystem": {"allowRead": [str(DUAL.parent)]}}
    server = {"command": sys.executable, "args": [str(DUAL), *flags], "sandbox": sandbox}
    if era is not None:
        server["era"] = era
    config = user.root / "dual.json"
    config.write_text(json.dumps({"mcpServers": {"dual": server}}))
    ask = {"name": "ask-before-greet", "if": {"tool": ["greet"]}, "then": "escalate"}
    policy = write_raw_policy(
        user.root / "policy",
        {"dual": {"greet": [], "haiku": [], "roots": [], "region": ["region", "zone"]}},
        first=[*rules, {**ask, "reason": "greeting needs a human"}],
    )
    return ["--config", str(config), "--policy-dir", str(policy), "--workspace", str(user.ws()),
            "--audit-log", str(user.root / "audit.jsonl"), "--server", "dual"]  # fmt: skip
