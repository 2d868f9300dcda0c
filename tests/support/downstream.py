"""A server the relay core can talk to without a process: it lists what it is given, records
every request that reaches it, and answers each (at once, through the event loop as a real
connection would, or when the test says so)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from launcher.shared.jsonrpc import Message, OnDone, ServerGone

Answer = Callable[[str, Message], Message | BaseException | None]


def echo(method: str, params: Message) -> Message:
    """A plausible answer to each method, naming what was asked."""
    said = f"{method} {params.get('name') or params.get('uri') or ''}".strip()
    if method == "tools/call":
        value: Message = {"content": [{"type": "text", "text": said}], "isError": False}
    elif method == "prompts/get":
        text = {"type": "text", "text": said}
        value = {"messages": [{"role": "user", "content": text}]}
    elif method == "resources/read":
        value = {"contents": [{"uri": params.get("uri"), "text": said}]}
    elif method == "completion/complete":
        value = {"completion": {"values": ["one", "two"], "hasMore": False}}
    else:
        value = {}
    return {"result": value}


@dataclass
class FakeServer:
    name: str
    tools: list[Message] = field(default_factory=list)
    prompts: list[Message] = field(default_factory=list)
    resources: list[Message] = field(default_factory=list)
    resource_templates: list[Message] = field(default_factory=list)
    capabilities: Message = field(default_factory=dict)
    # What to answer: a response's fields (``result`` or ``error``), an exception to hand
    # on (``ServerGone``, ``TimeoutError``), or None to hold the request until answered.
    answer: Answer = echo
    restarting: bool = False
    era: str = "handshake"
    roots: tuple[Message, ...] = ()
    on_request: Callable[[Any, Message], None] | None = None
    gone: ServerGone | None = None
    requests: list[tuple[str, Message]] = field(default_factory=list)
    timeouts: list[float | None] = field(default_factory=list)
    cancelled: list[tuple[int, str]] = field(default_factory=list)
    notified: list[tuple[str, Message | None]] = field(default_factory=list)
    held: dict[int, OnDone] = field(default_factory=dict)
    replies: list[tuple[object, Message]] = field(default_factory=list)
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    def send_request(
        self, method: str, params: Message | None, on_done: OnDone, timeout: float | None = None
    ) -> int:
        if self.gone is not None:
            raise self.gone
        request_id: int = next(self._ids)
        self.requests.append((method, params or {}))
        self.timeouts.append(timeout)
        outcome = self.answer(method, params or {})
        if outcome is None:
            self.held[request_id] = on_done
        elif isinstance(outcome, BaseException):
            asyncio.get_running_loop().call_soon(on_done, outcome)
        else:
            response = {"jsonrpc": "2.0", "id": request_id, **outcome}
            asyncio.get_running_loop().call_soon(on_done, response)
        return request_id

    def release(self, request_id: int, outcome: Message | BaseException) -> None:
        """Answer a held request now."""
        on_done = self.held.pop(request_id)
        if isinstance(outcome, BaseException):
            on_done(outcome)
        else:
            on_done({"jsonrpc": "2.0", "id": request_id, **outcome})

    def cancel_request(self, request_id: int, reason: str) -> bool:
        if self.held.pop(request_id, None) is None:
            return False
        self.cancelled.append((request_id, reason))
        return True

    def notify(self, method: str, params: Message | None) -> None:
        self.notified.append((method, params))

    def reply(self, request_id: object, outcome: Message) -> None:
        self.replies.append((request_id, outcome))

    async def list_tools(self) -> list[Message]:
        return self.tools

    async def list_extras(self) -> None:
        return None

    @property
    def methods(self) -> list[str]:
        return [method for method, _ in self.requests]
