"""The relay core in-process, as the relay tests drive it: a fake client (the upstream) and
fake servers (tests/support/downstream.py) around the real policy engine, gate, approvals
and audit log."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.audit.log import AuditLog
from launcher.relay.approving.approval import APPROVE, Approvals
from launcher.relay.core import Relay
from launcher.relay.gate.breaker import CircuitBreaker
from launcher.relay.gate.decide import Gate
from launcher.relay.router import Router
from launcher.relay.seams import Core, ServerSettings
from launcher.shared.caller_identity import Caller
from launcher.shared.jsonrpc import Message
from launcher.shared.user_errors import Names, by_field
from launcher.shared_state.store import SharedState
from policy import schema
from policy.engine import PolicyEngine
from policy.models import CompiledPolicyFile, ToolAnnotationsFile
from policy.permissions import parse_permissions
from tests.support.downstream import FakeServer

TIMEOUT = 7.5


def tool_listing(name: str, arg: str, description: str = "") -> Message:
    schema = {"type": "object", "properties": {arg: {"type": "string"}}}
    return {"name": name, "description": description or name, "inputSchema": schema}


def prompt_listing(name: str, arg: str) -> Message:
    return {"name": name, "arguments": [{"name": arg, "required": True}]}


def annotation_of(server: str, key: str, name: str, effect: str, args: dict[str, list[str]]) -> Any:
    return {key: name, "serverName": server, "effect": effect, "sideEffects": True, "args": args}


def annotations_of(server: str) -> dict[str, Any]:
    return {
        "tools": [
            annotation_of(server, "toolName", "read_file", "read", {"path": ["read-path"]}),
            annotation_of(server, "toolName", "write_file", "write", {"path": ["write-path"]}),
        ],
        "prompts": [
            annotation_of(server, "promptName", "summarize", "read", {"path": ["read-path"]}),
        ],
    }


RULES = {
    "rules": [
        {
            "name": "escalate-private-reads",
            "if": {
                "effect": ["read"],
                "paths": {"roles": ["read-path"], "within": "${ws}/private"},
            },
            "then": "escalate",
            "reason": "private files need a human",
        },
        {
            "name": "allow-reads-in-workspace",
            "if": {"effect": ["read"], "paths": {"roles": ["read-path"], "within": "${ws}"}},
            "then": "allow",
            "reason": "reading the workspace",
        },
    ]
}


@dataclass
class Client:
    """The upstream: collects what the relay sends, answers its elicitations with
    ``approval`` (or never, when None)."""

    approval: str | None = APPROVE
    sent: list[Message] = field(default_factory=list)
    related: list[str | int | None] = field(default_factory=list)
    relay: Relay | None = None

    def deliver(self, message: Message, related: str | int | None = None) -> None:
        self.sent.append(message)
        self.related.append(related)
        if message.get("method") == "elicitation/create" and self.approval is not None:
            content = {"answer": self.approval}
            answer = {"jsonrpc": "2.0", "id": message["id"], "result": {"action": "accept"}}
            answer["result"]["content"] = content
            assert self.relay is not None
            line = json.dumps(answer).encode()
            asyncio.get_running_loop().call_soon(self.relay.feed, line)
        elif message.get("method") == "sampling/createMessage":
            sampled = {"role": "assistant", "content": {"type": "text", "text": "sampled"}}
            answer = {"jsonrpc": "2.0", "id": message["id"], "result": {**sampled, "model": "m"}}
            assert self.relay is not None
            asyncio.get_running_loop().call_soon(self.relay.feed, json.dumps(answer).encode())

    def backlog(self) -> int:
        return 0

    @property
    def elicitations(self) -> list[Message]:
        return [m for m in self.sent if m.get("method") == "elicitation/create"]


@dataclass
class Harness:
    tmp: Path
    ws: Path
    relay: Relay
    client: Client
    servers: dict[str, FakeServer]
    audit: AuditLog
    said: list[str]
    hello: Message = field(default_factory=dict)  # the answer to the client's initialize
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    @property
    def fs(self) -> FakeServer:
        return self.servers["fs"]

    def feed(self, message: Message) -> None:
        self.relay.feed(json.dumps(message).encode())

    async def request(self, method: str, params: Message) -> Message | None:
        """Send a request; its answer, or None when none came (within a generous bound)."""
        rid = next(self._ids)
        self.feed({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return await self.answer(rid)

    async def answer(self, rid: int | str, wait: float = 2.0) -> Message | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while loop.time() < deadline:
            for message in self.client.sent:
                if message.get("id") == rid and ("result" in message or "error" in message):
                    return message
            await asyncio.sleep(0.001)
        return None

    def entries(self) -> list[dict[str, Any]]:
        text = (self.tmp / "audit.jsonl").read_text()
        return [e for e in map(json.loads, text.splitlines()) if "event" not in e]


# The audit logs of the harnesses built in the running test: closed after it
# (tests/conftest.py), not left to the garbage collector.
OPEN_LOGS: list[AuditLog] = []


def build(
    tmp: Path,
    *,
    approval: str = "elicit",
    answer: str | None = APPROVE,
    breaker: int = 0,
    servers: tuple[str, ...] = ("fs",),
    names: Names = by_field,
    initialize: bool = True,
    rules: dict[str, Any] = RULES,
    permissions: dict[str, Any] | None = None,
    caller: Caller | None = None,
    state: SharedState | None = None,
) -> Harness:
    """``permissions``: a ``permissions.json``; ``caller``: whose requests the relay serves;
    ``state``: what it shares with other instances (None: nothing)."""
    ws = tmp / "ws"
    (ws / "private").mkdir(parents=True, exist_ok=True)
    annotations = {"servers": {name: annotations_of(name) for name in servers}}
    engine = PolicyEngine(
        schema.validate(CompiledPolicyFile, rules),
        schema.validate(ToolAnnotationsFile, annotations),
        variables={"ws": str(ws)},
        permissions=parse_permissions(permissions or {}, "permissions.json"),
    )
    audit = AuditLog(str(tmp / "audit.jsonl"), "relay-test")
    OPEN_LOGS.append(audit)
    said: list[str] = []
    gate = Gate(
        engine,
        CircuitBreaker(breaker),
        audit,
        Approvals(approval, 2.0, shared=state),
        str(tmp / "pins"),
        say=said.append,
        names=names,
    )
    fakes = {
        name: FakeServer(
            name,
            tools=[tool_listing("read_file", "path"), tool_listing("write_file", "path")],
            prompts=[prompt_listing("summarize", "path")],
            resources=[{"uri": f"file://{ws}/a.txt", "name": "a"}],
            resource_templates=[{"uriTemplate": "file:///{path}", "name": "files"}],
            capabilities={
                "tools": {},
                "prompts": {},
                "completions": {},
                "resources": {"subscribe": True},
            },
        )
        for name in servers
    }
    for name, fake in fakes.items():
        gate.pin(name, fake.tools, fake.prompts, at_start=True)
    settings = {name: ServerSettings(str(ws), TIMEOUT, True) for name in servers}
    router = Router(len(servers) > 1)
    core = Core(
        fakes, settings, gate, audit, router, str(ws), say=said.append, caller=caller, state=state
    )
    relay = Relay(core)
    client = Client(answer, relay=relay)
    relay.upstream = client
    harness = Harness(tmp, ws, relay, client, fakes, audit, said)
    if not initialize:  # a client of the stateless era: every request says it all
        return harness
    hello = {"protocolVersion": "2025-06-18", "capabilities": {"elicitation": {"form": {}}}}
    harness.feed({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello})
    harness.hello = client.sent.pop()
    assert harness.hello["result"]["serverInfo"]["name"] == "ironcurtain"
    client.related.pop()
    return harness


def run(work: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(work(), 20))
