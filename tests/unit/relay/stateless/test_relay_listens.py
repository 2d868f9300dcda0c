"""``subscriptions/listen`` through the relay core: a stateless client's stream of the list
changes and resource updates it asked for, acknowledged first, every notification tagged
with the listen's id; its resources subscribed to through the gate, as in the handshake
era."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from launcher.relay.stateless.era import CAPABILITIES, VERSION
from launcher.relay.stateless.listens import ACKNOWLEDGED, SUBSCRIPTION_ID
from launcher.shared.jsonrpc import Message
from tests.support.relay import Harness, build, run

META = {VERSION: "2026-07-28", CAPABILITIES: {}}


def stateless(tmp_path: Path, **options: Any) -> Harness:
    return build(tmp_path, initialize=False, **options)


def listen(h: Harness, rid: object, **wanted: object) -> None:
    params = {"_meta": META, "notifications": wanted}
    h.feed({"jsonrpc": "2.0", "id": rid, "method": "subscriptions/listen", "params": params})


def tagged(h: Harness, method: str) -> list[Message]:
    return [m for m in h.client.sent if m.get("method") == method]


def server_notifies(h: Harness, method: str, params: Message | None = None) -> None:
    message: Message = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    h.relay.on_server_notification(h.fs, message)


def test_discover_offers_what_a_listen_delivers(tmp_path: Path) -> None:
    h = stateless(tmp_path)

    async def work() -> None:
        found = await h.request("server/discover", {"_meta": META})
        assert found is not None
        offered = found["result"]["capabilities"]
        assert offered["resources"]["subscribe"] is True  # the fake server's
        assert "logging" not in offered

    run(work)


def test_a_listen_is_acknowledged_then_told_only_what_it_asked_for(tmp_path: Path) -> None:
    h = stateless(tmp_path)
    uri = f"file://{h.ws}/a.txt"

    async def work() -> None:
        listen(h, "L1", toolsListChanged=True, resourceSubscriptions=[uri])
        await asyncio.sleep(0.02)
        (ack,) = tagged(h, ACKNOWLEDGED)
        assert ack["params"]["_meta"][SUBSCRIPTION_ID] == "L1"
        assert ack["params"]["notifications"] == {
            "toolsListChanged": True,
            "resourceSubscriptions": [uri],
        }
        server_notifies(h, "notifications/tools/list_changed")
        server_notifies(h, "notifications/prompts/list_changed")  # not asked for
        server_notifies(h, "notifications/resources/updated", {"uri": uri})
        server_notifies(h, "notifications/resources/updated", {"uri": "file:///other"})
        await asyncio.sleep(0.05)

    run(work)
    (tools,) = tagged(h, "notifications/tools/list_changed")
    assert tools["params"]["_meta"][SUBSCRIPTION_ID] == "L1"
    assert tagged(h, "notifications/prompts/list_changed") == []
    (updated,) = tagged(h, "notifications/resources/updated")
    assert updated["params"]["uri"] == uri and updated["params"]["_meta"][SUBSCRIPTION_ID] == "L1"
    # The resource was subscribed to at its server, through the gate, and audited.
    assert [m for m in h.fs.methods if m == "resources/subscribe"] == ["resources/subscribe"]
    (entry,) = [e for e in h.entries() if e["method"] == "resources/subscribe"]
    assert entry["policy"]["decision"] == "allow" and entry["era"] == "stateless"


def test_a_resource_the_gate_refuses_is_left_out_and_never_subscribed(tmp_path: Path) -> None:
    # As the agent: a listen naming a file outside what it may read does not make the
    # server watch it, and says so in the acknowledgment.
    h = stateless(tmp_path)

    async def work() -> None:
        listen(h, 7, resourceSubscriptions=["file:///etc/shadow"])
        await asyncio.sleep(0.02)
        server_notifies(h, "notifications/resources/updated", {"uri": "file:///etc/shadow"})
        await asyncio.sleep(0.02)

    run(work)
    (ack,) = tagged(h, ACKNOWLEDGED)
    assert ack["params"]["notifications"] == {"resourceSubscriptions": []}
    assert "resources/subscribe" not in h.fs.methods
    assert tagged(h, "notifications/resources/updated") == []
    (entry,) = [e for e in h.entries() if e["method"] == "resources/subscribe"]
    assert entry["policy"]["decision"] == "deny"


def test_a_cancelled_listen_hears_nothing_more_and_its_resources_are_let_go(
    tmp_path: Path,
) -> None:
    h = stateless(tmp_path)
    uri = f"file://{h.ws}/a.txt"

    async def work() -> None:
        listen(h, "L", toolsListChanged=True, resourceSubscriptions=[uri])
        await asyncio.sleep(0.02)
        cancel = {"requestId": "L", "reason": "done"}
        h.feed({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel})
        await asyncio.sleep(0.02)
        server_notifies(h, "notifications/tools/list_changed")
        await asyncio.sleep(0.02)

    run(work)
    assert tagged(h, "notifications/tools/list_changed") == []
    assert h.fs.methods.count("resources/unsubscribe") == 1
    assert not [m for m in h.client.sent if m.get("id") == "L"]  # a cancelled request: no answer


def test_a_malformed_listen_is_refused(tmp_path: Path) -> None:
    h = stateless(tmp_path)

    async def work() -> None:
        for bad in (
            {"notifications": "all"},
            {"notifications": {"resourceSubscriptions": "file:///a"}},
            {"notifications": {"toolsListChanged": "yes"}},
            {"notifications": {"resourceSubscriptions": [f"file:///{i}" for i in range(65)]}},
        ):
            answer = await h.request("subscriptions/listen", {"_meta": META, **bad})
            assert answer is not None and answer["error"]["code"] == -32602, bad

    run(work)
    assert tagged(h, ACKNOWLEDGED) == []


def test_a_listen_ends_with_its_answer_when_the_session_ends(tmp_path: Path) -> None:
    h = stateless(tmp_path)

    async def work() -> None:
        listen(h, "L", promptsListChanged=True)
        await asyncio.sleep(0.02)
        await h.relay.stop()

    run(work)
    (end,) = [m for m in h.client.sent if m.get("id") == "L"]
    assert end["result"]["resultType"] == "complete"
    assert end["result"]["_meta"][SUBSCRIPTION_ID] == "L"


def test_a_listen_cancelled_before_its_subscription_is_made_lets_it_go(tmp_path: Path) -> None:
    h = stateless(tmp_path)
    uri = f"file://{h.ws}/a.txt"
    h.fs.answer = lambda method, params: None  # the server takes its time to subscribe

    async def work() -> None:
        listen(h, "L", resourceSubscriptions=[uri])
        await asyncio.sleep(0.01)
        cancel = {"requestId": "L", "reason": "done"}
        h.feed({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel})
        (held,) = h.fs.held
        h.fs.release(held, {"result": {}})  # subscribed, after the listen ended
        await asyncio.sleep(0.02)

    run(work)
    assert h.fs.methods == ["resources/subscribe", "resources/unsubscribe"]
