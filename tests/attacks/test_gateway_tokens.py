"""Tokens an attacker sends a gateway, each refused by the check that stops it, with the
control that shows the attack is real: the same token passes when that one check is off, or
the same claims pass when signed as the identity provider signs them.

The provider is real enough: its keys made here, its discovery document and JWKS served on
loopback (tests/support/idp.py), tokens signed with PyJWT."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Iterator

import jwt
import pytest

from launcher.transports.http.gateway.gatekeeper import LEEWAY, Refused, verify
from launcher.transports.http.gateway.keys import Gateway, gateway
from tests.support.idp import AUDIENCE, Key, Provider, identity_provider


@pytest.fixture(scope="module")
def idp() -> Iterator[Provider]:
    with identity_provider() as provider:
        yield provider


@pytest.fixture(scope="module")
def gw(idp: Provider) -> Gateway:
    return gateway(idp.issuer, AUDIENCE, None)


def _payload(token: str) -> dict[str, object]:
    part = token.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))))


def test_the_providers_tokens_make_callers(idp: Provider, gw: Gateway) -> None:
    alice, expires = verify(gw, idp.token("alice"))
    bob, _ = verify(gw, idp.token("bob", scope="crm:read"))
    assert (alice.name, alice.issuer, sorted(alice.permissions)) == (
        "alice", idp.issuer, ["crm:read", "files:write"]
    )  # fmt: skip
    assert bob.name == "bob" and bob.permissions == frozenset({"crm:read"}) and bob != alice
    assert expires > time.time()


def test_none_algorithm_is_refused(idp: Provider, gw: Gateway) -> None:
    forged = idp.forged_none("mallory")
    with pytest.raises(Refused, match='algorithm "none" is not accepted'):
        verify(gw, forged)
    # Control: a reader that does not check the signature takes its claims as they are.
    assert jwt.decode(forged, options={"verify_signature": False})["sub"] == "mallory"


def test_hs256_signed_with_the_public_key_is_refused(idp: Provider, gw: Gateway) -> None:
    forged = idp.forged_hs256("mallory")
    with pytest.raises(Refused, match='algorithm "HS256" is not accepted'):
        verify(gw, forged)
    # Control: the forgery is a valid HMAC under the key anyone can fetch from the JWKS, so
    # a verifier that let the token pick HMAC with that key as secret would take it.
    signing, _, signature = forged.rpartition(".")
    mac = hmac.new(idp.key.public_pem(), signing.encode(), hashlib.sha256).digest()
    assert base64.urlsafe_b64encode(mac).rstrip(b"=").decode() == signature


def test_a_signature_of_another_key_under_the_providers_kid_is_refused(
    idp: Provider, gw: Gateway
) -> None:
    stranger = Key("RS256", kid=idp.key.kid)  # same kid, the attacker's own private key
    forged = idp.token("mallory", key=stranger)
    with pytest.raises(Refused, match="Signature verification failed"):
        verify(gw, forged)
    assert verify(gw, idp.token("mallory"))[0].name == "mallory"  # control: the real key


def test_a_token_with_its_payload_changed_is_refused(idp: Provider, gw: Gateway) -> None:
    header, _, signature = idp.token("alice", scope="crm:read").split(".")
    richer = {**_payload(idp.token("alice")), "scope": "crm:read crm:write admin"}
    body = base64.urlsafe_b64encode(json.dumps(richer).encode()).rstrip(b"=").decode()
    with pytest.raises(Refused, match="Signature verification failed"):
        verify(gw, f"{header}.{body}.{signature}")


def test_wrong_audience_is_refused_and_the_check_is_what_stops_it(
    idp: Provider, gw: Gateway
) -> None:
    elsewhere = idp.token("alice", aud="https://another-service.example")
    with pytest.raises(Refused, match="Audience doesn't match"):
        verify(gw, elsewhere)
    # Control: without the audience check, a token issued for another service is served.
    assert verify(gw, elsewhere, audience_checked=False)[0].name == "alice"
    with pytest.raises(Refused, match='"aud"'):
        verify(gw, idp.token("alice", aud=None))  # no audience at all


def test_wrong_issuer_is_refused(idp: Provider, gw: Gateway) -> None:
    with pytest.raises(Refused, match="Invalid issuer"):
        verify(gw, idp.token("alice", iss=idp.issuer + "-other"))
    with pytest.raises(Refused, match="Invalid issuer"):
        verify(gw, idp.token("alice", iss=idp.issuer + "/"))  # a trailing slash counts
    with pytest.raises(Refused, match='"iss"'):
        verify(gw, idp.token("alice", iss=None))


def test_expired_and_not_yet_valid_are_refused_beyond_the_leeway(
    idp: Provider, gw: Gateway
) -> None:
    now = int(time.time())
    with pytest.raises(Refused, match="Signature has expired"):
        verify(gw, idp.token("alice", exp=now - LEEWAY - 60))
    with pytest.raises(Refused, match="not yet valid"):
        verify(gw, idp.token("alice", nbf=now + LEEWAY + 60))
    with pytest.raises(Refused, match='"exp"'):
        verify(gw, idp.token("alice", exp=None))  # a token that never expires
    # Control: within the leeway (clocks a few seconds apart) the same tokens are served.
    assert verify(gw, idp.token("alice", exp=now - 5))[0].name == "alice"
    assert verify(gw, idp.token("alice", nbf=now + 5))[0].name == "alice"


def test_a_subject_that_is_no_caller_name_is_refused(idp: Provider, gw: Gateway) -> None:
    for sub, said in (
        (None, '"sub"'),
        ("", "Subject must not be empty|is empty"),
        ("evil\x1b]0;pwned\x07", "control or a non-ASCII"),
        ("two words", "control or a non-ASCII"),
    ):
        with pytest.raises(Refused, match=said):
            verify(gw, idp.token(sub))  # type: ignore[arg-type]


def test_permissions_come_from_the_named_claim_only_as_strings(idp: Provider) -> None:
    roles = gateway(idp.issuer, AUDIENCE, None, "roles")
    caller, _ = verify(roles, idp.token("alice", roles=["crm:read", "files:write"]))
    assert caller.permissions == frozenset({"crm:read", "files:write"})
    assert verify(roles, idp.token("alice"))[0].permissions == frozenset()  # no such claim
    with pytest.raises(Refused, match="neither a string nor a list of strings"):
        verify(roles, idp.token("alice", roles={"admin": True}))
    with pytest.raises(Refused, match="permission 1 holds a space"):
        verify(roles, idp.token("alice", roles=["crm read"]))


def test_garbage_and_keys_not_in_the_set_are_refused(idp: Provider, gw: Gateway) -> None:
    for token in ("", "abc", "a.b.c", "e30.e30.", "x" * 100):
        with pytest.raises(Refused):
            verify(gw, token)
    unpublished = Key("ES256")
    with pytest.raises(Refused, match="is not in the issuer's key set"):
        verify(gw, idp.token("alice", key=unpublished))
