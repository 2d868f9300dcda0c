"""Gateway mode's keys, against a real identity provider on loopback: fetched at start (every
way that fails is an error naming the setting), fetched again when a token names a new key
(rotation) but not for every unknown key a flood of tokens names, refreshed when old, and
when the provider cannot be reached, tokens it cannot check are refused and the operator
told once."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.shared.user_errors import OptionError
from launcher.transports.http.gateway import keys as gateway_keys
from launcher.transports.http.gateway.gatekeeper import Gatekeeper, Refused
from launcher.transports.http.gateway.keys import REFETCH_BURST, REFETCH_EVERY, gateway
from tests.support.idp import AUDIENCE, Key, Provider, identity_provider


@pytest.fixture
def idp() -> Iterator[Provider]:
    with identity_provider() as provider:
        yield provider


def _keeper(idp: Provider, said: list[str] | None = None) -> Gatekeeper:
    return Gatekeeper(
        gateway(idp.issuer, AUDIENCE, None), (said if said is not None else []).append
    )


async def _name(keeper: Gatekeeper, token: str) -> str:
    try:
        return (await keeper.caller(token)).name
    except Refused as refused:
        return f"refused: {refused}"


def test_a_rotated_key_is_fetched_and_a_flood_of_unknown_keys_is_not(idp: Provider) -> None:
    async def scenario() -> None:
        keeper = _keeper(idp)
        assert (idp.discovery_fetches, idp.jwks_fetches) == (1, 1)  # at start
        assert await _name(keeper, idp.token("alice")) == "alice"
        next_key = Key("ES256")
        # Before the provider publishes it: refused (the set was fetched again to see).
        early = idp.token("alice", key=next_key)
        assert "is not in the issuer's key set" in await _name(keeper, early)
        assert idp.jwks_fetches == 2
        old = idp.token("bob")
        idp.keys = [next_key]  # rotation: the new key published, the old one withdrawn
        assert await _name(keeper, idp.token("carol", key=next_key)) == "carol"
        assert idp.jwks_fetches == 3
        # A token of the withdrawn key, even one seen before, is no longer taken.
        assert "is not in the issuer's key set" in await _name(keeper, old)
        # The flood: 100 tokens naming keys nobody has. Fetched again at most as often as
        # the remaining allowance (and what time earned back) lets.
        started, before = time.monotonic(), idp.jwks_fetches
        for _ in range(100):
            forged = idp.token("mallory", key=Key("ES256", kid=uuid.uuid4().hex))
            assert (await _name(keeper, forged)).startswith("refused")
        earned = (time.monotonic() - started) / REFETCH_EVERY + 1
        assert idp.jwks_fetches - before <= REFETCH_BURST - 3 + earned
        assert await _name(keeper, idp.token("carol", key=next_key)) == "carol"  # still served

    asyncio.run(scenario())


def test_the_allowance_is_what_holds_a_flood_back(
    idp: Provider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Control: with no limit on fetching again, each unknown key costs the provider a
    fetch."""
    monkeypatch.setattr(gateway_keys, "REFETCH_BURST", 10_000)

    async def scenario() -> None:
        keeper = _keeper(idp)
        keeper.gateway.keys.credit = 10_000
        for _ in range(20):
            await _name(keeper, idp.token("mallory", key=Key("ES256", kid=uuid.uuid4().hex)))

    asyncio.run(scenario())
    assert idp.jwks_fetches == 1 + 20


def test_an_unreachable_provider_refuses_what_it_cannot_check_and_says_so_once(
    idp: Provider,
) -> None:
    said: list[str] = []

    async def scenario() -> None:
        keeper = _keeper(idp, said)
        known = idp.token("alice")
        idp.down = True
        for _ in range(5):
            refused = await _name(keeper, idp.token("bob", key=Key("RS256")))
            assert "is not in the issuer's key set" in refused
        assert await _name(keeper, known) == "alice"  # a key it holds still checks tokens
        idp.down = False
        keeper.gateway.keys.credit = 1
        rotated = idp.rotate()
        assert await _name(keeper, idp.token("bob", key=rotated)) == "bob"

    asyncio.run(scenario())
    cannot = [line for line in said if "answered HTTP 503" in line]
    assert len(cannot) == 1 and "refused until it can be fetched" in cannot[0], said
    assert any("fetched again" in line for line in said)


def test_an_old_key_set_is_fetched_again(idp: Provider) -> None:
    async def scenario() -> None:
        keeper = _keeper(idp)
        keeper.gateway.keys.fetched -= gateway_keys.REFRESH_AFTER + 1
        assert await _name(keeper, idp.token("alice")) == "alice"  # served at once
        for _ in range(50):
            if idp.jwks_fetches == 2:
                break
            await asyncio.sleep(0.02)

    asyncio.run(scenario())
    assert idp.jwks_fetches == 2


def test_a_token_once_checked_is_not_checked_again_until_it_expires(idp: Provider) -> None:
    async def scenario() -> None:
        keeper = _keeper(idp)
        token = idp.token("alice", exp=int(time.time()) + 300)
        assert await _name(keeper, token) == "alice"
        keeper.gateway.keys.keys.clear()  # were it checked again, it would be refused
        idp.keys = [Key("RS256")]
        assert await _name(keeper, token) == "alice"
        assert idp.jwks_fetches == 1
        caller, _ = keeper._verified[token]
        keeper._verified[token] = (caller, time.time() - 3600)  # remembered past its expiry
        assert (await _name(keeper, token)).startswith("refused")  # checked again

    asyncio.run(scenario())


def test_what_stops_a_gateway_at_start(idp: Provider, tmp_path: Path) -> None:
    def refused(*args: str | None) -> str:
        with pytest.raises(OptionError) as error:
            gateway(*args)  # type: ignore[arg-type]
        return str(error.value)

    said = refused("http://id.example.com/realms/team", AUDIENCE, None)
    assert said.startswith("oidc_issuer http://id.example.com/realms/team: plain http")
    said = refused("ftp://127.0.0.1/x", AUDIENCE, None)
    assert "expected https" in said
    said = refused(idp.issuer, AUDIENCE, "file://fileserver/keys/jwks.json")
    assert said.endswith("names a file on another host")
    closed = "http://127.0.0.1:9/realms/team"  # nothing listens on the discard port
    said = refused(closed, AUDIENCE, None)
    assert said.startswith(f"oidc_issuer {closed}: its discovery document {closed}/.well-known")
    assert "could not be fetched: Connection refused" in said
    said = refused(idp.issuer + "/", AUDIENCE, None)
    assert f'names the issuer "{idp.issuer}"' in said and "a trailing slash counts" in said
    said = refused(idp.issuer, AUDIENCE, idp.issuer + "/nothing-here")
    assert said.startswith(f"oidc_jwks_url {idp.issuer}/nothing-here: the key set (JWKS)")
    assert "HTTP 404" in said
    symmetric = tmp_path / "oct.json"
    symmetric.write_text(json.dumps({"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "1"}]}))
    said = refused(idp.issuer, AUDIENCE, symmetric.as_uri())
    assert "holds no public signing key" in said
    (tmp_path / "bad.json").write_text("{")
    assert "is not JSON" in refused(idp.issuer, AUDIENCE, (tmp_path / "bad.json").as_uri())
    assert "oidc_audience" in refused(idp.issuer, " ", None)
    idp.down = True
    assert "HTTP 503" in refused(idp.issuer, AUDIENCE, None)


def test_a_key_set_from_a_file(idp: Provider, tmp_path: Path) -> None:
    keys = tmp_path / "jwks.json"
    private = {"kty": "RSA", "kid": "leaked", "n": "x", "e": "AQAB", "d": "y"}
    keys.write_text(json.dumps({"keys": [*idp.jwks()["keys"], private]}))
    gw = gateway(idp.issuer, AUDIENCE, keys.as_uri())
    assert set(gw.keys.keys) == {idp.key.kid}  # a private key published by mistake is not one
    assert idp.discovery_fetches == 0 and idp.jwks_fetches == 0
