"""Who a gateway admits, and how much room one party takes: in process, on the real HTTP
stack, with real JWTs from a loopback identity provider (tests/support/idp.py) and relays
that record what reaches them.

- A valid token whose claims do not match ``--oidc-require`` is refused (403) and no relay
  (no server) is opened for it; the control: the same token without the requirement is
  served.
- Many fresh subjects of one party cannot take the room of another party's caller: its relay
  is not ended for them, whether it has a request out or not; the control: with no
  requirement, every subject is one party (the issuer), and they do end it.
- A key the provider replaced under the same ``kid`` is not honoured past the next fetch for
  a token checked (and remembered) with the old one; the control: compared by ``kid`` alone,
  the remembered token is still taken.
- ``Authorization: bearer`` (any case) is the Bearer scheme.
- A session still in its ``initialize`` is never "the oldest idle".
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx2
import pytest

from launcher.shared.caller_identity import Caller
from launcher.transports.http import client_stream
from launcher.transports.http import endpoint as http_endpoint
from launcher.transports.http.endpoint import HttpEndpoint
from launcher.transports.http.gateway import keys as gateway_keys
from launcher.transports.http.gateway.gatekeeper import Gatekeeper, Refused
from launcher.transports.http.gateway.keys import REFRESH_AFTER, gateway
from launcher.transports.http.stateless_requests import Upstream
from tests.support.audit import audit_entries
from tests.support.home import Home
from tests.support.http import serving
from tests.support.idp import AUDIENCE, Key, Provider, identity_provider
from tests.support.marks import needs_bwrap
from tests.unit.transports.http.gateway.test_http_gateway import handshake, stateless
from tests.unit.transports.http.test_http_callers import CallerRelay, who

OWNER = ("repository_owner", "*")
TOKEN = "a-static-token-" + "x" * 20  # each owner a party of its own
Work = Any


def serve(
    work: Work, required: tuple[tuple[str, str], ...] = (), max_sessions: int = 16
) -> tuple[list[CallerRelay], list[str], list[tuple[Caller, str]]]:
    """``work(http, url, idp, endpoint)`` against a gateway requiring ``required``."""
    opened: list[CallerRelay] = []
    said: list[str] = []
    refused: list[tuple[Caller, str]] = []
    with identity_provider() as idp:

        async def main() -> None:
            async def opener(upstream: Upstream, caller: Caller | None) -> CallerRelay:
                relay = CallerRelay(upstream, opened)
                relay.opened_for = caller
                return relay

            keys = gateway(idp.issuer, AUDIENCE, None, required=required)
            keeper = Gatekeeper(keys, said.append, lambda c, why: refused.append((c, why)))
            endpoint = HttpEndpoint(0, None, opener, said.append, keeper, max_sessions)
            await endpoint.start()
            try:
                limits = httpx2.Limits(max_connections=100)
                async with httpx2.AsyncClient(timeout=10, limits=limits) as http:
                    await work(http, endpoint.url, idp, endpoint)
            finally:
                await endpoint.stop()

        asyncio.run(asyncio.wait_for(main(), 60))
    return opened, said, refused


# -- admission -----------------------------------------------------------------------------


@pytest.mark.parametrize("required", [True, False], ids=["required", "control-none"])
def test_a_token_whose_claims_do_not_match_is_refused_before_any_relay(required: bool) -> None:
    got: dict[str, Any] = {}

    async def work(http: httpx2.AsyncClient, url: str, idp: Provider, _: Any) -> None:
        evil = idp.token("mallory", repository_owner="evil")
        got["mallory"] = await http.post(url, **stateless(evil))
        got["again"] = await http.post(url, **handshake(evil))
        got["unclaimed"] = await http.post(url, **stateless(idp.token("eve")))
        got["listed"] = await http.post(
            url, **stateless(idp.token("carol", repository_owner=["x", "acme"]))
        )
        got["alice"] = await http.post(
            url, **stateless(idp.token("alice", repository_owner="acme"))
        )

    rule = (("repository_owner", "acme"),) if required else ()
    opened, _, refused = serve(work, rule)
    names = [r.opened_for.name for r in opened if r.opened_for]
    if not required:  # the control: a valid signature alone makes every one of them a caller
        assert names == ["mallory", "mallory", "eve", "carol", "alice"]
        return
    for key in ("mallory", "again", "unclaimed"):
        assert got[key].status_code == 403, got[key].text
        assert got[key].text.startswith('403: not admitted: its "repository_owner" claim')
    assert who(got["listed"]) == "carol" and who(got["alice"]) == "alice"
    assert names == ["carol", "alice"]  # nothing was opened for the others
    # Said (and audited, by the session) once per subject, however often it comes back.
    assert [(c.name, why) for c, why in refused] == [
        ("mallory", 'its "repository_owner" claim does not match acme'),
        ("eve", 'its "repository_owner" claim is missing'),
    ]


# -- room per party ------------------------------------------------------------------------


@pytest.mark.parametrize("parties", [True, False], ids=["per-party", "control-one-party"])
@pytest.mark.parametrize("alice_busy", [False, True], ids=["alice-idle", "alice-request-out"])
def test_fresh_subjects_of_one_party_cannot_take_another_partys_room(
    parties: bool, alice_busy: bool
) -> None:
    got: dict[str, Any] = {}

    async def work(http: httpx2.AsyncClient, url: str, idp: Provider, _: Any) -> None:
        alice = idp.token("alice", repository_owner="acme")
        held = []
        if alice_busy:
            held.append(asyncio.ensure_future(http.post(url, **stateless(alice, "hold"))))
        else:
            got["alice first"] = await http.post(url, **stateless(alice))
        await asyncio.sleep(0.3)
        # The attacker's party: fresh subjects, each keeping a request out.
        for n in range(3):
            token = idp.token(f"evil-r{n}", repository_owner="evil")
            held.append(asyncio.ensure_future(http.post(url, **stateless(token, "hold"))))
            await asyncio.sleep(0.2)
        got["fourth"] = await http.post(
            url, **stateless(idp.token("evil-r3", repository_owner="evil"))
        )
        got["alice"] = await http.post(url, **stateless(alice))
        for request in held:
            request.cancel()
        await asyncio.gather(*held, return_exceptions=True)

    opened, said, _ = serve(work, (OWNER,) if parties else (), max_sessions=4)
    alice_relays = [r for r in opened if r.opened_for and r.opened_for.name == "alice"]
    ended = [line for line in said if line.startswith("servers of caller 'alice'")]
    if parties or alice_busy:
        # The fourth fresh subject finds no room its party may take: alice keeps her relay.
        assert got["fourth"].status_code == 503
        assert len(alice_relays) == 1 and not ended
        assert who(got["alice"]) == "alice"
    else:
        # The control: one party for every subject, and alice, idle, made room for it.
        assert who(got["fourth"]) == "evil-r3"
        assert ended and len(alice_relays) == 2  # her servers ended, started again for her


def test_a_party_may_still_use_its_own_room() -> None:
    """Its own subjects make room for each other: the idle one longest gives way."""
    got: dict[int, httpx2.Response] = {}

    async def work(http: httpx2.AsyncClient, url: str, idp: Provider, _: Any) -> None:
        for n in range(3):
            token = idp.token(f"acme-r{n}", repository_owner="acme")
            got[n] = await http.post(url, **stateless(token))

    _, said, _ = serve(work, (OWNER,), max_sessions=2)
    assert [who(got[n]) for n in range(3)] == ["acme-r0", "acme-r1", "acme-r2"]
    assert any(line.startswith("servers of caller 'acme-r0'") for line in said)


# -- a key replaced under its kid ---------------------------------------------------------


@pytest.mark.parametrize("compared", ["keys", "control-kids"])
def test_a_key_replaced_under_its_kid_is_not_honoured_past_the_next_fetch(
    compared: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if compared == "control-kids":  # as before: a key set compared by its kids alone
        monkeypatch.setattr(
            "launcher.transports.http.gateway.gatekeeper.same_keys", lambda a, b: set(a) == set(b)
        )
    out: dict[str, str] = {}

    async def name(keeper: Gatekeeper, token: str) -> str:
        try:
            return (await keeper.caller(token)).name
        except Refused as refused:
            return f"refused: {refused}"

    with identity_provider() as idp:

        async def main() -> None:
            keeper = Gatekeeper(gateway(idp.issuer, AUDIENCE, None), lambda text: None)
            old = idp.token("mallory", exp=int(time.time()) + 3000)
            out["before"] = await name(keeper, old)  # checked, and remembered
            # The provider replaces the (leaked) key under the same kid.
            idp.keys = [Key("RS256", kid=idp.key.kid)]
            keeper.gateway.keys.fetched -= REFRESH_AFTER + 1
            await name(keeper, old)  # its next request starts the fetch
            for _ in range(100):
                if idp.jwks_fetches == 2 and keeper._fetching is None:
                    break
                await asyncio.sleep(0.02)
            out["after"] = await name(keeper, old)
            out["new"] = await name(keeper, idp.token("alice"))

        asyncio.run(main())
    assert out["before"] == "mallory" and out["new"] == "alice"
    if compared == "keys":
        assert out["after"] == "refused: Signature verification failed"
    else:
        assert out["after"] == "mallory"  # the control: the old key's token still taken


def test_key_sets_differ_when_a_kid_names_another_key() -> None:
    a, b = Key("RS256", kid="k1"), Key("RS256", kid="k1")
    first = gateway_keys.parse_jwks({"keys": [a.jwk()]})
    assert gateway_keys.same_keys(first, gateway_keys.parse_jwks({"keys": [a.jwk()]}))
    assert not gateway_keys.same_keys(first, gateway_keys.parse_jwks({"keys": [b.jwk()]}))


# -- the Bearer scheme ----------------------------------------------------------------------


def test_the_bearer_scheme_is_matched_in_any_case() -> None:
    got: dict[str, int] = {}

    async def work(http: httpx2.AsyncClient, url: str, idp: Provider, _: Any) -> None:
        token = idp.token("alice")
        for scheme in ("Bearer", "bearer", "BEARER", "Basic"):
            request = stateless(token)
            request["headers"]["Authorization"] = f"{scheme} {token}"
            got[scheme] = (await http.post(url, **request)).status_code

    serve(work)
    assert got == {"Bearer": 200, "bearer": 200, "BEARER": 200, "Basic": 401}


# -- a session in its initialize -----------------------------------------------------------


@pytest.mark.parametrize("protected", [True, False], ids=["protected", "control"])
def test_a_session_in_its_initialize_is_never_the_oldest_idle(
    protected: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first client's session is still opening (registered, its initialize not yet
    read: a loaded machine) when a second client's initialize needs its room."""
    if not protected:  # as before: a session counted idle whatever it is doing
        monkeypatch.setattr(
            client_stream.ClientStream,
            "started",
            property(lambda self: True, lambda self, value: None),
            raising=False,
        )
    got: dict[str, Any] = {}
    said: list[str] = []
    opening = client_stream.ClientStream.open

    async def main() -> None:
        slow = asyncio.Event()
        first: list[client_stream.ClientStream] = []

        async def open_slowly(client: client_stream.ClientStream) -> None:
            if not first:
                first.append(client)
                await slow.wait()
            await opening(client)

        monkeypatch.setattr(client_stream.ClientStream, "open", open_slowly)

        async def opener(upstream: Upstream, caller: Caller | None) -> CallerRelay:
            return CallerRelay(upstream, [])

        endpoint = HttpEndpoint(0, TOKEN, opener, said.append, None, 1)
        await endpoint.start()
        try:
            async with httpx2.AsyncClient(timeout=5) as http:
                init = handshake(TOKEN)
                one = asyncio.ensure_future(http.post(endpoint.url, **init))
                for _ in range(100):
                    if first:
                        break
                    await asyncio.sleep(0.02)
                two = asyncio.ensure_future(http.post(endpoint.url, **init))
                await asyncio.sleep(0.3)
                slow.set()
                for name, request in (("first", one), ("second", two)):
                    try:
                        got[name] = (await request).status_code
                    except httpx2.HTTPError as exc:
                        got[name] = type(exc).__name__
        finally:
            await endpoint.stop()

    asyncio.run(asyncio.wait_for(main(), 60))
    ended = [line for line in said if "the oldest idle one" in line]
    if protected:
        assert got == {"first": 200, "second": 503} and not ended
    else:  # the control: the opening session was ended, and its client left without answer
        assert got["second"] == 200 and ended and got["first"] != 200


# -- end to end: the real gateway ----------------------------------------------------------


@needs_bwrap
@pytest.mark.parametrize("required", [True, False], ids=["required", "control-none"])
def test_the_gateway_starts_nothing_for_a_token_it_does_not_admit(
    user: Home, required: bool
) -> None:
    """``ironcurtain run --http`` with the filesystem server, each caller's workspace its
    own: a valid token of another owner makes no workspace and starts no server."""
    work = user.root / "work"
    audit = user.root / "audit.jsonl"
    with identity_provider() as idp:
        args = ["--server", "filesystem", "--workspace", f"{work}/${{caller}}",
                "--audit-log", str(audit), "--oidc-issuer", idp.issuer,
                "--oidc-audience", AUDIENCE]  # fmt: skip
        if required:
            args += ["--oidc-require", "repository_owner=acme"]
        with serving(user, *args) as served:
            evil = idp.token("mallory", repository_owner="evil")
            answer = httpx2.post(served.url, **stateless(evil, "list_directory"), timeout=30)
            said = "".join(served.stderr)
            alice = idp.token("alice", repository_owner="acme")
            served_alice = httpx2.post(served.url, **stateless(alice, "list_directory"), timeout=60)
            made = sorted(p.name for p in work.iterdir())  # removed at the end, when empty
    assert served_alice.status_code == 200, served_alice.text
    if not required:  # the control: the token alone made mallory a caller, with a workspace
        assert answer.status_code == 200 and made == ["alice", "mallory"]
        assert "WARNING: no --oidc-require: every subject the issuer" in said
        return
    assert answer.status_code == 403, answer.text
    assert made == ["alice"]  # nothing made, nothing started for mallory
    assert "WARNING: no --oidc-require" not in said
    assert "admitted only with repository_owner=acme" in said
    refused = [e for e in audit_entries(audit) if e.get("event") == "admission-refused"]
    assert [(e["caller"]["name"], e["reason"]) for e in refused] == [
        ("mallory", 'its "repository_owner" claim does not match acme')
    ]
    assert not any(e.get("caller", {}).get("name") == "mallory" for e in audit_entries(audit)
                   if e.get("event") != "admission-refused")  # fmt: skip


def test_a_requirement_that_is_not_claim_equals_glob_stops_the_start(user: Home) -> None:
    from tests.support.cli import ironcurtain

    with identity_provider() as idp:
        base = ["run", "--http", "0", "--oidc-issuer", idp.issuer, "--oidc-audience", AUDIENCE]
        bad = ironcurtain(user, *base, "--oidc-require", "repository_owner")
        alone = ironcurtain(user, "run", "--oidc-require", "org=acme")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "--oidc-require" in bad.stderr and "expected CLAIM=GLOB" in bad.stderr
    assert alone.returncode == 2 and "is only used with --http" in alone.stderr


@pytest.mark.parametrize("parties", [True, False], ids=["per-party", "control-one-party"])
def test_fresh_subjects_of_one_party_cannot_take_another_partys_sessions(parties: bool) -> None:
    """The same over MCP sessions of the handshake era: each of the attacker's subjects
    keeps its session busy (a GET stream open, as a listening client does)."""
    got: dict[str, Any] = {}

    async def work(http: httpx2.AsyncClient, url: str, idp: Provider, end: Any) -> None:
        alice = await http.post(url, **handshake(idp.token("alice", repository_owner="acme")))
        streams = []
        for n in range(3):
            token = idp.token(f"evil-r{n}", repository_owner="evil")
            opened = await http.post(url, **handshake(token))
            sid = opened.headers["mcp-session-id"]
            get = handshake(token, sid)["headers"]
            streams.append(asyncio.ensure_future(http.get(url, headers=get)))
        await asyncio.sleep(0.3)
        fourth = idp.token("evil-r3", repository_owner="evil")
        got["fourth"] = await http.post(url, **handshake(fourth))
        got["alice kept"] = alice.headers["mcp-session-id"] in end.sessions
        for stream in streams:
            stream.cancel()
        await asyncio.gather(*streams, return_exceptions=True)

    serve(work, (OWNER,) if parties else (), max_sessions=4)
    if parties:
        assert got["fourth"].status_code == 503 and got["alice kept"]
    else:  # the control: one party, and alice's idle session made room
        assert got["fourth"].status_code == 200 and not got["alice kept"]


@pytest.mark.parametrize("parties", [True, False], ids=["per-party", "control-one-party"])
def test_a_partys_requests_together_leave_room_for_others(
    parties: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http_endpoint, "PARTY_REQUESTS", 3)  # instead of 192
    got: dict[str, Any] = {}

    async def work(http: httpx2.AsyncClient, url: str, idp: Provider, _: Any) -> None:
        held = []
        for n in range(3):
            token = idp.token(f"evil-r{n}", repository_owner="evil")
            held.append(asyncio.ensure_future(http.post(url, **stateless(token, "hold"))))
        await asyncio.sleep(0.5)
        fourth = idp.token("evil-r3", repository_owner="evil")
        got["fourth"] = await http.post(url, **stateless(fourth))
        got["alice"] = await http.post(
            url, **stateless(idp.token("alice", repository_owner="acme"))
        )
        for request in held:
            request.cancel()
        await asyncio.gather(*held, return_exceptions=True)

    serve(work, (OWNER,) if parties else ())
    assert got["fourth"].status_code == 429
    assert got["fourth"].json()["error"]["message"] == "too many requests of this party at once (3)"
    if parties:
        assert who(got["alice"]) == "alice"
    else:  # every caller of one party: alice shares its bucket
        assert got["alice"].status_code == 429
