"""One party holds its room busy, so no other party can come in: in process, on the real
HTTP stack, with real JWTs from a loopback identity provider (tests/support/idp.py) and
relays that record what reaches them.

With ``--oidc-require`` telling parties apart, a party's subjects, each keeping its session
(or its stateless requests) busy, hold at most all the room but a caller's share: another
party's newcomer still gets in. The control: with no requirement every subject is one
party (the issuer), and the same subjects keep the newcomer out (a limit said at start).

A claim present but empty names no party: ``*`` does not admit it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2
import pytest

from tests.attacks.test_gateway_admission import OWNER, serve
from tests.support.idp import Provider
from tests.unit.transports.http.gateway.test_http_gateway import handshake, stateless
from tests.unit.transports.http.test_http_callers import who


@pytest.mark.parametrize("parties", [True, False], ids=["per-party", "control-one-party"])
def test_one_partys_busy_sessions_leave_another_party_room(parties: bool) -> None:
    """Four subjects of evil's, each with a session kept busy by a GET stream, in a room of
    four: acme's first session still opens."""
    got: dict[str, Any] = {}

    async def work(http: httpx2.AsyncClient, url: str, idp: Provider, end: Any) -> None:
        streams, statuses = [], []
        for n in range(4):
            token = idp.token(f"evil-r{n}", repository_owner="evil")
            opened = await http.post(url, **handshake(token))
            statuses.append(opened.status_code)
            if opened.status_code == 200:
                get = handshake(token, opened.headers["mcp-session-id"])["headers"]
                streams.append(asyncio.ensure_future(http.get(url, headers=get)))
            await asyncio.sleep(0.2)
        got["evil"] = statuses
        got["alice"] = await http.post(
            url, **handshake(idp.token("alice", repository_owner="acme"))
        )
        for stream in streams:
            stream.cancel()
        await asyncio.gather(*streams, return_exceptions=True)

    serve(work, (OWNER,) if parties else (), max_sessions=4)
    if parties:
        assert got["evil"] == [200, 200, 200, 503]
        assert got["alice"].status_code == 200, got["alice"].text
    else:  # the control: one party, and the room is all of it
        assert got["evil"] == [200, 200, 200, 200]
        assert got["alice"].status_code == 503


@pytest.mark.parametrize("parties", [True, False], ids=["per-party", "control-one-party"])
def test_one_partys_busy_callers_leave_another_party_room(parties: bool) -> None:
    """The same with requests of the stateless era: four subjects of evil's each keep a
    request out, in a room of four callers; acme's first request is still served."""
    got: dict[str, Any] = {}

    async def work(http: httpx2.AsyncClient, url: str, idp: Provider, _: Any) -> None:
        held = []
        for n in range(4):
            token = idp.token(f"evil-r{n}", repository_owner="evil")
            held.append(asyncio.ensure_future(http.post(url, **stateless(token, "hold"))))
            await asyncio.sleep(0.3)
        got["alice"] = await http.post(
            url, **stateless(idp.token("alice", repository_owner="acme"))
        )
        done = [r for r in held if r.done()]
        got["evil refused"] = [r.result().status_code for r in done]
        for request in held:
            request.cancel()
        await asyncio.gather(*held, return_exceptions=True)

    serve(work, (OWNER,) if parties else (), max_sessions=4)
    if parties:
        assert got["evil refused"] == [503]
        assert who(got["alice"]) == "alice"
    else:
        assert got["evil refused"] == []
        assert got["alice"].status_code == 503


@pytest.mark.parametrize("required", [True, False], ids=["required", "control-none"])
def test_an_empty_claim_is_not_admitted_by_a_star(required: bool) -> None:
    """``repository_owner=*`` asks for an owner: a token whose owner is present but empty
    (or a list of empty strings) names none, and is refused before any relay; the control:
    without the requirement it is served."""
    got: dict[str, Any] = {}

    async def work(http: httpx2.AsyncClient, url: str, idp: Provider, _: Any) -> None:
        for owner in ("", [""], "acme"):
            token = idp.token(f"s-{len(got)}", repository_owner=owner)
            got[json.dumps(owner)] = await http.post(url, **stateless(token))

    opened, _, refused = serve(work, (OWNER,) if required else ())
    statuses = {owner: answer.status_code for owner, answer in got.items()}
    if not required:
        assert statuses == {'""': 200, '[""]': 200, '"acme"': 200}
        return
    assert statuses == {'""': 403, '[""]': 403, '"acme"': 200}
    assert [r.opened_for.name for r in opened if r.opened_for] == ["s-2"]
    assert [why for _, why in refused] == ['its "repository_owner" claim does not match *'] * 2
