"""What a gateway caller tries next against approvals with callers: the real ``ironcurtain
run --http`` in gateway mode (JWTs of a provider on loopback, tests/support/idp.py), the
real filesystem server in its sandbox under the bundled policy, and a client that declares
elicitation and approves whatever it is asked.

Under an explicit ``--approval elicit`` a caller's client answers only what gives no
sandbox anything beyond what it has: a directory the operator lets a caller's server only
read (``allowRead`` naming ``${caller}``) is the caller's to read, never to write, and a
write to it through another of the caller's servers is not put to the caller's client.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import types

from tests.support.audit import audit_entries
from tests.support.home import Home
from tests.support.http import http_session, serving
from tests.support.idp import AUDIENCE, Provider, identity_provider
from tests.support.marks import needs_bwrap
from tests.support.paths import IRONCURTAIN
from tests.support.sdk import Answer, answering, call

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
    assert terminal.stdout
    assert b"attached to" in await terminal.stdout.readline()
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
    user.env["XDG_RUNTIME_DIR"] = str(user.root / "run")
    (user.root / "run").mkdir()
    answer, seen = answering("approve")
    tool, args = WIDER
    out: list[tuple[bool, str]] = []

    async def scenario(url: str, session_id: str) -> None:
        elicit = _elicits(answer)
        async with http_session(url, idp.token("mallory"), elicitation_callback=elicit) as s:
            terminal = await attached(user, session_id)
            assert terminal.stdin
            terminal.stdin.write(b"a\n")
            out.append(await call(s, tool, {**args, "path": str(limits)}))
        terminal.terminate()
        await terminal.wait()

    with serving(user, *_gateway(user, idp, config, "auto")) as served:
        said = "".join(served.stderr)
        asyncio.run(scenario(served.url, said.split("ironcurtain: session ")[1].split()[0]))
    assert out[0][0] is False, out
    assert limits.read_text() == args["content"] and seen == []
