"""Agent instruction files: a sandbox's own write of one is quarantined, a call a human
approved writes it and it stays.

The probe writes ``CLAUDE.md`` (the user's, there before the session) and ``GEMINI.md``
(new) under a rule that escalates writes to them, and the human approves: the call runs in a
one-shot instance, the trusted process carries the change over, and the guard takes it as
the user's (it is still there, as approved, after the end-of-session sweep). The same
server's allowed write of ``AGENTS.md`` (the workspace rule) is its sandbox's own:
quarantined before the call returns. A denied call changes nothing.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import mcp.types as types

from tests.support.audit import audit_entries
from tests.support.cli import run_args
from tests.support.home import Home, make_home
from tests.support.marks import needs_bwrap
from tests.support.probe import (
    PROBE_TOOLS,
    probe_server_config,
    write_probe_config,
    write_raw_policy,
)
from tests.support.sdk import answering, call, connect

pytestmark = needs_bwrap

APPROVED = ["CLAUDE.md", "GEMINI.md"]


def _session(user: Home, ws: Path) -> list[str]:
    """The probe's write_path, its path a write-path: writes to the instruction files
    escalated, the rest of the workspace allowed."""
    policy = write_raw_policy(
        user.root / "policy", {"probe": {"write_path": PROBE_TOOLS["write_path"]}}
    )
    annotations = json.loads((policy / "tool-annotations.json").read_text())
    tool = annotations["servers"]["probe"]["tools"][0]
    tool.update(effect="write", args={**tool["args"], "path": ["write-path"]})
    (policy / "tool-annotations.json").write_text(json.dumps(annotations))
    rules = [
        *(
            {
                "name": f"ask-{name}",
                "if": {"paths": {"roles": ["write-path"], "within": f"${{workspace}}/{name}"}},
                "then": "escalate",
                "reason": "the agent's instructions are the user's to approve",
            }
            for name in [*APPROVED, "DENIED.md"]
        ),
        {
            "name": "allow-in-workspace",
            "if": {"paths": {"roles": ["write-path"], "within": "${workspace}"}},
            "then": "allow",
            "reason": "Within the workspace",
        },
    ]
    (policy / "compiled-policy.json").write_text(json.dumps({"rules": rules}))
    config = write_probe_config(user, probe_server_config(True))
    return run_args(config, policy, ws, user.root / "audit.jsonl")


def test_an_approved_call_writes_an_instruction_file_a_sandbox_cannot(tmp_path: Path) -> None:
    user = make_home(tmp_path)
    ws = user.ws()
    (ws / "CLAUDE.md").write_text("# the user's notes for Claude\n")
    args = _session(user, ws)
    answer, seen = answering("approve", "approve")
    out: list[tuple[bool, str]] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return await answer(params)

    async def scenario() -> None:
        async with connect(user, *args, elicitation=elicit) as s:
            for name in [*APPROVED, "AGENTS.md"]:
                content = f"approved {name}\n" if name in APPROVED else "the sandbox's own\n"
                arguments = {"path": str(ws / name), "content": content}
                out.append(await call(s, "probe__write_path", arguments))

    asyncio.run(scenario())
    assert [error for error, _ in out] == [False, False, False], out
    for name in APPROVED:
        assert (ws / name).read_text() == f"approved {name}\n", out
    assert not (ws / "AGENTS.md").exists(), out  # the sandbox's own write: quarantined
    assert len(seen) == 2 and all("beware" in q for q in seen), seen
    entries = audit_entries(user.root / "audit.jsonl")
    carried = [e["carriedOver"][0]["outcome"] for e in entries if e.get("carriedOver")]
    assert carried == ["written", "written"], entries
    quarantined = [e for e in entries if e.get("event") == "quarantine"]
    assert [Path(e["path"]).name for e in quarantined] == ["AGENTS.md"], quarantined
