"""Sessions with the hostile asking server (``tests/servers/asking_server.py``), which sends
the client whatever request a test gives it, spoken to by the raw client: what the client
gets is seen byte for byte, and a human (:class:`Human`) answers it."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from launcher.relay.approving.approval import APPROVE
from tests.support.client import Client, Message
from tests.support.home import Home
from tests.support.paths import IRONCURTAIN, TESTS
from tests.support.probe import write_raw_policy

ASKING = TESTS / "servers" / "asking_server.py"
SAMPLE, ELICIT = "sampling/createMessage", "elicitation/create"
EVERY_MODE: dict[str, Any] = {"sampling": {}, "elicitation": {"form": {}, "url": {}}}


def asking_args(
    user: Home, network: dict[str, Any] | None = None, approval: str = "elicit"
) -> list[str]:
    """``ironcurtain run`` options for the asking server alone (sandboxed, with ``network``
    as its ``sandbox.network``), every call of its ``ask`` allowed by policy."""
    sandbox: dict[str, Any] = {"filesystem": {"allowRead": [str(ASKING.parent)]}}
    if network is not None:
        sandbox["network"] = network
    server = {"command": sys.executable, "args": [str(ASKING)], "sandbox": sandbox}
    config = user.root / "asking.json"
    config.write_text(json.dumps({"mcpServers": {"asker": server}}))
    policy = write_raw_policy(user.root / "policy", {"asker": {"ask": ["method", "params"]}})
    return ["--config", str(config), "--policy-dir", str(policy), "--workspace", str(user.ws()),
            "--audit-log", str(user.root / "audit.jsonl"), "--approval", approval,
            "--server", "asker"]  # fmt: skip


class Human:
    """The client's side: answers ironcurtain's approval questions with ``approvals`` in
    turn (then ``APPROVE``), a server's form with ``{"name": "Ada"}``, a link by accepting,
    a sampling request with the model's answer; keeps every request the client got."""

    def __init__(self, *approvals: str) -> None:
        self.approvals = list(approvals)
        self.got: list[Message] = []

    def asked(self, method: str) -> list[Message]:
        """The params of each request the client got of ``method``."""
        return [m["params"] for m in self.got if m["method"] == method]

    @property
    def approval_questions(self) -> list[str]:
        return [p["message"] for p in self.asked(ELICIT) if p["message"].startswith("ironcurtain:")]

    @property
    def forms(self) -> list[Message]:
        """The server's own questions (not ironcurtain's approvals)."""
        return [p for p in self.asked(ELICIT) if not p["message"].startswith("ironcurtain:")]

    def answer(self, message: Message) -> Message:
        self.got.append(message)
        params = message.get("params") or {}
        if message["method"] == SAMPLE:
            said = {"type": "text", "text": "the model's answer"}
            return {"role": "assistant", "content": said, "model": "recorded"}
        if str(params.get("message", "")).startswith("ironcurtain:"):
            answer = self.approvals.pop(0) if self.approvals else APPROVE
            return {"action": "accept", "content": {"answer": answer}}
        if params.get("mode") == "url":
            return {"action": "accept"}
        return {"action": "accept", "content": {"name": "Ada"}}


def ask_all(
    user: Home,
    args: Sequence[str],
    human: Human,
    asks: Sequence[tuple[str, Message]],
    capabilities: Message | None = None,
    direct: bool = False,
    before: Callable[[], None] = lambda: None,
) -> list[Message]:
    """One session: the server sends each (method, params) in turn; what it got back for
    each (``result`` or ``error``, the client's or ironcurtain's). ``capabilities``: the
    client's (by default every mode of sampling and elicitation); ``direct``: the server
    alone, no ironcurtain in between; ``before`` runs once the session is up."""
    argv = [sys.executable, str(ASKING)] if direct else [IRONCURTAIN, "run", *args]
    client = Client.spawn(argv, user.env, user.root)
    out: list[Message] = []
    try:
        client.initialize(EVERY_MODE if capabilities is None else capabilities)
        before()
        for method, params in asks:
            rid = client.request(
                "tools/call", {"name": "ask", "arguments": {"method": method, "params": params}}
            )
            while "method" in (message := client.receive()) or message.get("id") != rid:
                if "method" in message and "id" in message:
                    result = human.answer(message)
                    client.send({"jsonrpc": "2.0", "id": message["id"], "result": result})
            out.append(json.loads(message["result"]["content"][0]["text"]))
    finally:
        client.close()
    return out


def strings(value: object) -> list[str]:
    """Every string in a JSON value, keys included."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (k, *strings(v))]
    return []


def shown_request(question: str) -> Any:
    """The request a sampling approval question shows (the JSON after its header)."""
    head = "The request, all of it, as it would be sent:\n"
    assert head in question, question
    return json.loads(question.split(head, 1)[1])
