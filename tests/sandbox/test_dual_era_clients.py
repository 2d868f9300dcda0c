"""A server of both protocol eras, with a config that names no era, is spoken to in the era
of the client whose request it serves: clients of both eras in one ``--http`` session each
reach it in their own era (an instance of its own for the era it was not opened in); a
stateless client alone on stdio reaches it in the stateless era. A server of one era only
is spoken to in that era, whatever its client's, as before. (The dual-era server on the
``mcp`` SDK, tests/servers/dual_server.py: each tool says the version its request came in.)"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support.asking import Human
from tests.support.dual import DUAL, dual_args
from tests.support.home import Home
from tests.support.http import TOKEN, serving
from tests.support.marks import needs_bwrap
from tests.support.modes import STATELESS, callbacks, client_in

pytestmark = needs_bwrap
HANDSHAKE = "2025-11-25"


def said(result: object) -> str:
    return "\n".join(getattr(c, "text", "") for c in getattr(result, "content", []))


async def calls_in(url: str, modes: Sequence[str], human: Human) -> list[str]:
    """One client in each of ``modes`` on ``url``, all connected at once; each calls
    ``roots`` in turn, twice round; what each call said, in order."""
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    out: list[str] = []
    async with httpx2.AsyncClient(headers=bearer, timeout=30) as http:
        clients = [
            Client(streamable_http_client(url, http_client=http), mode=m, **callbacks(human))
            for m in modes
        ]
        for client in clients:
            await client.__aenter__()
        try:
            for _ in range(2):
                for client in clients:
                    out.append(said(await client.call_tool("roots", {})))
        finally:
            for client in reversed(clients):
                await client.__aexit__(None, None, None)
    return out


def test_clients_of_both_eras_in_one_session_each_reach_the_server_in_their_own(
    user: Home,
) -> None:
    human = Human()
    with serving(user, *dual_args(user)) as served:
        out = anyio.run(calls_in, served.url, ["legacy", STATELESS], human)
    assert [text.rsplit(" ", 1)[-1] for text in out] == [
        f"({HANDSHAKE})",
        f"({STATELESS})",
        f"({HANDSHAKE})",
        f"({STATELESS})",
    ]
    # Each answered with the roots ironcurtain gives the server (what its sandbox holds),
    # never the client's own: the same in both eras.
    assert out[0].rsplit(" ", 1)[0] == out[1].rsplit(" ", 1)[0]


@pytest.mark.parametrize(
    ("flags", "mode", "era"),
    [
        ((), STATELESS, STATELESS),  # both eras: the client's
        ((), "legacy", HANDSHAKE),
        (("--handshake-only",), STATELESS, HANDSHAKE),  # one era: its own, bridged
        (("--stateless-only",), "legacy", STATELESS),
    ],
)
@pytest.mark.parametrize("named", [False, True])
def test_over_stdio_the_server_is_spoken_to_in_its_clients_era_when_it_serves_it(
    user: Home, flags: tuple[str, ...], mode: str, era: str, named: bool
) -> None:
    # ``named``: the config names the era other than the client's; then a server that
    # serves it is spoken to in it, whatever the client's.
    human = Human()
    out: list[str] = []
    other = "handshake" if mode == STATELESS else "stateless"
    if named and not flags:
        era = HANDSHAKE if other == "handshake" else STATELESS
    args = dual_args(user, *flags, era=other if named else None)

    async def scenario() -> None:
        async with client_in(user, "stdio", args, mode, human) as client:
            out.append(said(await client.call_tool("roots", {})))
            out.append(said(await client.call_tool("haiku", {})))

    anyio.run(scenario)
    assert out[0].endswith(f"({era})")
    # A question of the server's (sampling, approved by the human first) reached the
    # client in the client's own era, whichever era the server was spoken to in.
    assert out[1] == f"the model's answer ({era})"
    assert len(human.approval_questions) == 1


def _instances(script: str) -> int:
    """The running server processes (not their sandboxes' bwrap) of ``script``."""
    count = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if b"bwrap" not in args[0] and any(a.endswith(script.encode()) for a in args):
            count += 1
    return count


@pytest.mark.parametrize("twin_on", [True, False])
def test_an_instance_gone_while_its_twin_opens_leaves_one_instance_not_two(
    user: Home, twin_on: bool
) -> None:
    # The hostile server's first instance exits while ironcurtain opens the instance for
    # a stateless client (tests/servers/twin_race_server.py); its config asks for restarts.
    # The instance opened for the client takes the place: the restart due for the one
    # that exited is not made over it, so no instance runs unstopped beside it.
    race = DUAL.parent / "twin_race_server.py"
    marks = user.root / "marks"
    marks.mkdir()
    args = dual_args(user, era=None if twin_on else "stateless")
    config = Path(args[args.index("--config") + 1])
    servers = json.loads(config.read_text())
    dual = servers["mcpServers"]["dual"]
    dual["args"] = [str(race), str(marks)]
    dual["restart"] = {"maxRestarts": 1, "backoffSeconds": 2}
    dual["sandbox"]["filesystem"]["allowWrite"] = [str(marks)]
    config.write_text(json.dumps(servers))
    out: list[str] = []
    counted: list[int] = []

    async def scenario() -> None:
        async with client_in(user, "stdio", args, STATELESS, Human()) as client:
            out.append(said(await client.call_tool("roots", {})))
            await anyio.sleep(6)  # past the restart's back-off, had one been made
            counted.append(_instances(race.name))
            out.append(said(await client.call_tool("roots", {})))

    if not twin_on:
        # CONTROL: the config names the era, no second instance is opened, and the first
        # instance is never left to exit: one instance throughout.
        (marks / "first").touch()
        (marks / "second").touch()
    anyio.run(scenario)
    assert counted == [1]
    assert out[0].endswith(f"({STATELESS})") and out[1].endswith(f"({STATELESS})")
    assert _instances(race.name) == 0  # the session is over: none left


def test_an_instance_being_opened_is_stopped_with_its_server_when_the_guard_fails(
    user: Home,
) -> None:
    # The hostile server's instance opened for a stateless client makes, while being
    # opened, what the guard cannot follow (a tree deeper than it goes) in its writable
    # root, then holds back its answer: the guard fails closed and stops the server; the
    # instance being opened is stopped with it, not left to run on until its opening
    # times out (it would leave ``outlived`` 8 s on).
    race = DUAL.parent / "twin_race_server.py"
    marks = user.root / "marks"
    marks.mkdir()
    args = dual_args(user)
    config = Path(args[args.index("--config") + 1])
    servers = json.loads(config.read_text())
    dual = servers["mcpServers"]["dual"]
    dual["args"] = [str(race), str(marks), "--plant"]
    dual["sandbox"]["filesystem"]["allowWrite"] = [str(marks)]
    config.write_text(json.dumps(servers))
    out: list[str] = []

    async def scenario() -> None:
        async with client_in(user, "stdio", args, STATELESS, Human()) as client:
            out.append(said(await client.call_tool("roots", {})))
            await anyio.sleep(10)  # past when it would leave ``outlived``
            out.append(str(_instances(race.name)))

    anyio.run(scenario)
    assert "was stopped" in out[0] and "the guard could not neutralise" in out[0], out[0]
    assert out[1] == "0"
    assert not (marks / "outlived").exists()
