"""``ironcurtain run --http``: streamable HTTP on 127.0.0.1 with the real ``mcp`` client: many
sessions at once, each with its own servers and streams; the bearer token checked before
anything else and stable across restarts; rebinding, unknown sessions and unknown protocol
versions refused; a cancelled call's request answered."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import time
from typing import Any

import httpx2
import mcp_types as types
import psutil
from mcp import ClientSession

from tests.support.audit import audit_entries
from tests.support.home import Home
from tests.support.http import ACCEPT, TOKEN, http_session, probe_args, serving
from tests.support.marks import needs_bwrap
from tests.support.paths import IRONCURTAIN, PROBE
from tests.support.probe import write_raw_policy
from tests.support.sdk import call

pytestmark = needs_bwrap


def _status(port: int, method: str = "POST", **headers: str) -> int:
    """The status of one request with a ``ping`` body (the token unless told otherwise)."""
    body = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
    sent = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json",
            "Accept": ACCEPT, **headers}  # fmt: skip
    with httpx2.Client(timeout=10) as http:
        return http.request(method, f"http://127.0.0.1:{port}/mcp", content=body,
                            headers={k: v for k, v in sent.items() if v}).status_code  # fmt: skip


def _events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]


def _probes(pid: int) -> int:
    """How many probe server processes run below the process ``pid``."""
    count = 0
    for proc in psutil.Process(pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            cmdline = proc.cmdline()
            if str(PROBE) in cmdline and "bwrap" not in os.path.basename(cmdline[0]):
                count += 1
    return count


def test_a_real_client_works_and_the_token_outlives_a_restart(user: Home) -> None:
    env = {k: v for k, v in user.env.items() if k != "IRONCURTAIN_HTTP_TOKEN"}
    args = ["--server", "time", "--workspace", str(user.ws())]
    texts: list[str] = []

    async def one_call(url: str, token: str) -> None:
        async with http_session(url, token) as session:
            assert {t.name for t in (await session.list_tools()).tools} >= {"get_current_time"}
            failed, text = await call(session, "get_current_time", {"timezone": "UTC"})
            assert not failed
            texts.append(text)

    with serving(user, *args, env=env) as first:
        printed = "".join(first.stderr)
        token_file = user.state / "ironcurtain" / "http-token"
        assert f"bearer token: new, kept in {token_file}" in printed
        assert os.stat(token_file).st_mode & 0o777 == 0o600
        token = subprocess.run(
            [IRONCURTAIN, "http-token"], env=env, capture_output=True, text=True, check=True
        ).stdout.strip()
        assert token and token not in printed  # stderr is not a terminal: never written out
        asyncio.run(one_call(first.url, token))
    with serving(user, *args, env=env) as second:
        assert f"bearer token: kept in {token_file}" in "".join(second.stderr)
        asyncio.run(one_call(second.url, token))  # the client entry written once still works
    assert all("UTC" in text for text in texts) and len(texts) == 2

    rotated = subprocess.run(
        [IRONCURTAIN, "http-token", "--rotate"], env=env, capture_output=True, text=True
    )
    assert rotated.returncode == 0 and rotated.stdout.strip() not in ("", token)


def test_a_token_file_others_can_read_is_refused_and_one_owner_only_is_used(user: Home) -> None:
    token_file = user.root / "token"
    token_file.write_text("  file-token-0123456789abcdef\n")
    token_file.chmod(0o644)
    args = ["run", "--server", "time", "--workspace", str(user.ws()), "--http", "0",
            "--http-token-file", str(token_file)]  # fmt: skip
    refused = subprocess.run([IRONCURTAIN, *args], env=user.env, capture_output=True, text=True)
    assert refused.returncode == 2
    assert f"{token_file} can be read by others (mode 644)" in refused.stderr
    assert "Traceback" not in refused.stderr
    token_file.chmod(0o600)
    with serving(user, *args[1:5], "--http-token-file", str(token_file)) as served:
        assert "bearer token: from " + str(token_file) in "".join(served.stderr)
        assert _status(served.port, Authorization=f"Bearer {TOKEN}") == 401
        # Initialize with the file's token opens a session.
        status = _status(served.port, Authorization="Bearer file-token-0123456789abcdef")
        assert status == 400  # a ping without a session: authenticated, then refused


def test_refused_before_anything_is_read_or_opened(user: Home) -> None:
    with serving(user, "--server", "time", "--workspace", str(user.ws())) as served:
        port = served.port
        assert _status(port, Authorization="") == 401
        assert _status(port, Authorization="Bearer not-the-token") == 401
        # DNS rebinding: a page on evil.example resolved to 127.0.0.1 sends its Host/Origin.
        assert _status(port, Host=f"evil.example:{port}") == 421
        assert _status(port, Origin="http://evil.example") == 403
        assert _status(port, **{"MCP-Protocol-Version": "1999-01-01"}) == 400
        assert _status(port, "PUT") == 405
        assert _status(port) == 400  # no session, and not an initialize
        assert _status(port, **{"Mcp-Session-Id": "no-such-session"}) == 404

        # A request without the token that announces a huge body is refused from its head:
        # the answer comes although the body is never sent.
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            raw.sendall(
                f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                "Content-Type: application/json\r\nContent-Length: 50000000\r\n\r\n".encode()
            )
            assert raw.recv(200).startswith(b"HTTP/1.1 401 ")


def test_two_sessions_at_once_each_with_its_own_servers_and_streams(user: Home) -> None:
    progress: dict[str, list[float]] = {"a": [], "b": []}
    found: dict[str, Any] = {}

    async def scenario(url: str, pid: int) -> None:
        async with http_session(url) as a, http_session(url) as b:
            ids = [(await call(s, "instance", {}))[1] for s in (a, b)]
            found["instances"] = ids

            async def noted(key: str, value: float, total: float | None, msg: str | None) -> None:
                progress[key].append(value)

            async def slow(session: ClientSession, key: str, steps: int) -> str:
                result = await session.call_tool(
                    "slow",
                    {"steps": steps},
                    progress_callback=lambda v, t, m: noted(key, v, t, m),
                )
                return "".join(getattr(c, "text", "") for c in result.content)

            found["answers"] = await asyncio.gather(slow(a, "a", 4), slow(b, "b", 7))
            found["running"] = _probes(pid)  # a's, b's and the spare started for the next
        # Both sessions ended (the client DELETEs its session): their servers stop.
        deadline = time.monotonic() + 10
        while _probes(pid) > 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        found["after"] = _probes(pid)

    with serving(user, *probe_args(user)) as served:
        asyncio.run(scenario(served.url, served.proc.pid))
    assert found["instances"][0] != found["instances"][1]
    assert all(i.startswith("INSTANCE ") for i in found["instances"])
    assert found["answers"] == ["SLOW done 4", "SLOW done 7"]
    # Each call heard its own progress, all of it, and nothing of the other's.
    assert progress == {"a": [1, 2, 3, 4], "b": [1, 2, 3, 4, 5, 6, 7]}
    assert found["running"] == 3
    assert found["after"] == 1  # the spare, kept warm for the next client


def test_an_ended_session_is_not_found_and_a_cancelled_call_is_answered(user: Home) -> None:
    with serving(user, *probe_args(user)) as served, httpx2.Client(timeout=20) as http:
        head = {"Authorization": f"Bearer {TOKEN}", "Accept": ACCEPT,
                "Content-Type": "application/json"}  # fmt: skip
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}  # fmt: skip
        opened = http.post(served.url, json=init, headers=head)
        assert opened.status_code == 200, opened.text
        sid = opened.headers["mcp-session-id"]
        assert _events(opened.text)[0]["result"]["protocolVersion"] == "2025-11-25"
        head |= {"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}
        done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert http.post(served.url, json=done, headers=head).status_code == 202

        # A long call, cancelled by the client while it runs: its request is answered
        # (its event stream ends) instead of hanging, and nothing else is sent for it.
        answer: list[list[dict[str, Any]]] = []

        def long_call() -> None:
            slow = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                    "params": {"name": "slow", "arguments": {"steps": 100},
                               "_meta": {"progressToken": "p7"}}}  # fmt: skip
            lines: list[str] = []
            deadline = time.monotonic() + 15
            with http.stream("POST", served.url, json=slow, headers=head) as streamed:
                for line in streamed.iter_lines():
                    lines.append(line)
                    if time.monotonic() > deadline:
                        lines.append('data: {"hung": true}')
                        break
            answer.append(_events("\n".join(lines)))

        async def cancel_soon() -> None:
            worker = asyncio.get_running_loop().run_in_executor(None, long_call)
            await asyncio.sleep(1.0)
            cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled",
                      "params": {"requestId": 7, "reason": "the user pressed stop"}}  # fmt: skip
            with httpx2.Client(timeout=5) as other:
                assert other.post(served.url, json=cancel, headers=head).status_code == 202
            await worker

        asyncio.run(cancel_soon())
        events = answer[0]
        assert "hung" not in events[-1], "the cancelled call's request was never answered"
        assert events[-1]["id"] == 7 and events[-1]["error"]["code"] == -32800
        assert not any("result" in e for e in events)
        # Its progress came on its own request's stream, before the end.
        progress = [e for e in events if e.get("method") == "notifications/progress"]
        assert progress and all(e["params"]["progressToken"] == "p7" for e in progress)

        ended = http.delete(served.url, headers=head)
        assert ended.status_code == 200
        ping = {"jsonrpc": "2.0", "id": 8, "method": "ping"}
        assert http.post(served.url, json=ping, headers=head).status_code == 404

    entries = audit_entries(user.root / "audit.jsonl")
    slow_calls = [e for e in entries if e.get("tool") == "slow"]
    assert slow_calls and slow_calls[-1].get("result") == "cancelled", slow_calls


def test_a_server_asks_the_client_during_a_call_over_http(user: Home) -> None:
    asked: list[str] = []
    out: list[tuple[bool, str]] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(getattr(params, "message", ""))
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    async def sample(context: Any, params: types.CreateMessageRequestParams) -> Any:
        text = types.TextContent(type="text", text="from the model")
        return types.CreateMessageResult(role="assistant", content=text, model="recorded")

    async def scenario(url: str) -> None:
        async with http_session(url, elicitation_callback=elicit, sampling_callback=sample) as s:
            out.append(await call(s, "ask_user", {"question": "Your name?"}))
            out.append(await call(s, "sample", {"prompt": "say hi"}))

    with serving(user, *probe_args(user, elicitation="allow", sampling="allow")) as served:
        asyncio.run(scenario(served.url))
    assert out == [(False, "ASKED: accept Ada"), (False, "SAMPLED: from the model")]
    assert asked == ["[server 'probe'] Your name?"]


def _post_only(
    url: str, name: str, arguments: dict[str, Any], answers: dict[str, dict[str, Any]]
) -> tuple[list[dict[str, Any]], float]:
    """A session of a client that opens no GET stream (it is optional) and reads only its
    POST's event stream: one call of ``name``; every request on that stream is answered
    with ``answers[method]``. What came on the stream, and how long the call took."""
    with httpx2.Client(timeout=30) as http:
        head = {"Authorization": f"Bearer {TOKEN}", "Accept": ACCEPT,
                "Content-Type": "application/json"}  # fmt: skip
        capabilities: dict[str, object] = {"elicitation": {"form": {}}, "sampling": {}}
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": capabilities,
            "clientInfo": {"name": "post-only", "version": "1"}}}  # fmt: skip
        opened = http.post(url, json=init, headers=head)
        head |= {"Mcp-Session-Id": opened.headers["mcp-session-id"],
                 "MCP-Protocol-Version": "2025-11-25"}  # fmt: skip
        done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert http.post(url, json=done, headers=head).status_code == 202
        request = {"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                   "params": {"name": name, "arguments": arguments}}  # fmt: skip
        events: list[dict[str, Any]] = []
        started = time.monotonic()
        with http.stream("POST", url, json=request, headers=head) as streamed:
            for line in streamed.iter_lines():
                if not line.startswith("data: {"):
                    continue
                event = json.loads(line[6:])
                events.append(event)
                if event.get("method") in answers and "id" in event:
                    answer = {"jsonrpc": "2.0", "id": event["id"],
                              "result": answers[event["method"]]}  # fmt: skip
                    with httpx2.Client(timeout=10) as other:
                        sent = other.post(url, json=answer, headers=head)
                        assert sent.status_code == 202, sent.text
                if event.get("id") == 5:
                    break
        return events, time.monotonic() - started


APPROVE = {"action": "accept", "content": {"answer": "approve"}}


def test_the_approval_question_comes_on_the_calls_own_stream(user: Home) -> None:
    """ironcurtain's approval question for a call comes on that call's stream, and the call
    is answered once the client approves; nothing waits for the approval timeout."""
    ask = {"name": "ask", "if": {"tool": ["identity"]}, "then": "escalate", "reason": "ask"}
    args = probe_args(user)
    write_raw_policy(user.root / "policy", first=[ask])
    with serving(user, *args, "--approval-timeout", "20") as served:
        events, waited = _post_only(served.url, "identity", {}, {"elicitation/create": APPROVE})
    asked = [e for e in events if e.get("method") == "elicitation/create"]
    assert len(asked) == 1, events
    assert events[-1]["id"] == 5 and "Uid:" in json.dumps(events[-1]["result"]), events
    assert waited < 20, "the question never came: the approval timed out"
    assert audit_entries(user.root / "audit.jsonl")[-1]["escalation"] == "approved"


def test_a_servers_sampling_approval_comes_on_the_calls_own_stream(user: Home) -> None:
    """The same for a server's sampling request put to a human first: the approval and
    then the request itself come on the stream of the call the server asks during."""
    model = {"role": "assistant", "model": "recorded",
             "content": {"type": "text", "text": "from the model"}}  # fmt: skip
    with serving(user, *probe_args(user, sampling="ask"), "--approval-timeout", "20") as served:
        events, waited = _post_only(
            served.url,
            "sample",
            {"prompt": "say hi"},
            {"elicitation/create": APPROVE, "sampling/createMessage": model},
        )
    methods = [e.get("method") for e in events if "method" in e]
    assert methods == ["elicitation/create", "sampling/createMessage"], events
    assert "SAMPLED: from the model" in json.dumps(events[-1]["result"]), events
    assert waited < 20
