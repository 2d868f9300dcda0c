"""What a server asks of the client, through ``ironcurtain run`` with the real ``mcp`` client
and the hostile probe server in its sandbox: a question reaches the human named as the
server's; sampling waits for a human and never carries other servers' context; the roots a
server is told are what its sandbox holds, never the client's host directories.

Each attack is also made with the probe started directly (no ironcurtain), to show it works
there and so that the protection is what stops it."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError

from launcher.relay.approving.approval import APPROVE, DENY
from tests.support.audit import audit_entries as entries
from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.paths import PROBE
from tests.support.probe import probe_server_config, write_raw_policy
from tests.support.sdk import call, connect

pytestmark = needs_bwrap

HOST_ROOT = "file:///home/someone/secret-project"


def _config(user: Home, asks: dict[str, str] | None = None) -> Path:
    server = probe_server_config(True)
    if asks is not None:
        server["clientRequests"] = asks
    config = user.root / "asking.json"
    config.write_text(json.dumps({"mcpServers": {"probe": server}}))
    return config


def _args(user: Home, config: Path) -> list[str]:
    policy = write_raw_policy(user.root / "policy")
    audit = user.root / "audit.jsonl"
    ws = str(user.ws())
    return ["--config", str(config), "--policy-dir", str(policy), "--workspace", ws,
            "--audit-log", str(audit), "--approval", "elicit", "--server", "probe"]  # fmt: skip


class Human:
    """The client's side: answers questions (recording them) and sampling requests."""

    def __init__(self, name: str = "Ada", approval: str = APPROVE) -> None:
        self.name = name
        self.approval = approval
        self.questions: list[str] = []
        self.sampled: list[types.CreateMessageRequestParams] = []

    async def elicit(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        message = getattr(params, "message", "")
        self.questions.append(message)
        if message.startswith("ironcurtain: "):  # an approval question
            return types.ElicitResult(action="accept", content={"answer": self.approval})
        return types.ElicitResult(action="accept", content={"name": self.name})

    async def sample(
        self, context: Any, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        self.sampled.append(params)
        text = types.TextContent(type="text", text="hello from the model")
        return types.CreateMessageResult(role="assistant", content=text, model="recorded")

    async def roots(self, context: Any) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri=HOST_ROOT, name="host")])


def _session(
    user: Home,
    args: list[str],
    human: Human,
    calls: list[tuple[str, dict[str, Any]]],
    direct: bool = False,
) -> list[tuple[bool, str]]:
    out: list[tuple[bool, str]] = []

    async def scenario() -> None:
        async with connect(
            user,
            *args,
            elicitation=human.elicit,
            sampling=human.sample,
            roots=human.roots,
            command=[sys.executable, str(PROBE)] if direct else None,
        ) as session:
            for tool, arguments in calls:
                try:
                    out.append(await call(session, tool, arguments))
                except MCPError as exc:  # the server's tool failed: its error, relayed
                    out.append((True, str(exc)))

    asyncio.run(asyncio.wait_for(scenario(), 60))
    return out


def test_a_servers_question_reaches_the_human_named_as_the_servers(user: Home) -> None:
    human = Human()
    args = _args(user, _config(user))
    ((failed, text),) = _session(user, args, human, [("ask_user", {"question": "Your name?"})])
    assert not failed and text == "ASKED: accept Ada", text
    assert human.questions == ["[server 'probe'] Your name?"]
    asked = [e for e in entries(user.root / "audit.jsonl") if e["method"] == "elicitation/create"]
    assert [(e["server"], e["result"]) for e in asked] == [("probe", "success")]


def test_a_server_told_no_questions_gets_none_through(user: Home) -> None:
    human = Human()
    args = _args(user, _config(user, {"elicitation": "deny"}))
    calls = [("client_can", {}), ("ask_user", {"question": "Your password?"})]
    (can, (_, asked)) = _session(user, args, human, calls)
    assert "elicitation" not in can[1]  # not even offered
    assert human.questions == [] and "ASKED: accept" not in asked


def test_sampling_waits_for_a_human_and_carries_no_other_servers_context(user: Home) -> None:
    # Directly, the server's request for every server's context reaches the client as is.
    human = Human()
    ((_, text),) = _session(user, [], human, [("sample", {"prompt": "hi"})], direct=True)
    assert text == "SAMPLED: hello from the model"
    assert human.sampled[0].include_context == "allServers"

    human = Human()
    args = _args(user, _config(user))
    ((failed, text),) = _session(user, args, human, [("sample", {"prompt": "hi"})])
    assert not failed and text == "SAMPLED: hello from the model"
    (approval,) = human.questions  # a human was asked first (the default: ask)
    assert approval.startswith("ironcurtain: server 'probe' asks the user's model")
    assert '"text": "hi"' in approval  # the request, all of it
    assert [p.include_context for p in human.sampled] == ["none"]


def test_sampling_the_human_refuses_never_reaches_the_model(user: Home) -> None:
    human = Human(approval=DENY)
    args = _args(user, _config(user))
    ((_, text),) = _session(user, args, human, [("sample", {"prompt": "hi"})])
    assert "SAMPLED" not in text and "DENIED" in text
    assert human.sampled == []
    (entry,) = [e for e in entries(user.root / "audit.jsonl") if e["method"] != "tools/call"]
    assert entry["escalation"] == "denied" and entry["result"] == "denied"


def test_a_server_is_told_the_roots_its_sandbox_holds_not_the_clients(user: Home) -> None:
    human = Human()
    ((_, direct),) = _session(user, [], human, [("roots", {})], direct=True)
    assert HOST_ROOT in direct  # directly, the client's host directories

    args = _args(user, _config(user))
    ((failed, text),) = _session(user, args, human, [("roots", {})])
    roots = json.loads(text.removeprefix("ROOTS: "))
    assert not failed and HOST_ROOT not in text
    assert Path(user.ws()).as_uri() in roots and Path(PROBE.parent).as_uri() in roots
