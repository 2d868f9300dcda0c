"""Gateway mode: each HTTP request's caller, from the JWT its identity provider signed.

:func:`verify` checks a token with PyJWT: an asymmetric algorithm of :data:`ALGORITHMS`
(never ``none``, never an HMAC, whose secret could be taken from a published public key), its
signature against the issuer's key named by ``kid``, ``iss``, ``aud``, ``exp`` and ``nbf``
(``LEEWAY`` seconds either way), and a ``sub`` that is a caller's name. The caller's
permissions are the ``permissions_claim`` (a space-separated string, as ``scope`` is, or a
list of strings).

:class:`Gatekeeper` does it for the HTTP endpoint, on the request head: a token naming a key
not known yet has the key set fetched again (as often as the key set allows), a token seen
before is not checked again until it expires, and what cannot be verified is refused
(``401`` with ``WWW-Authenticate: Bearer resource_metadata=…``); the endpoint's protected
resource metadata (RFC 9728) is served without a token.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from starlette.types import Scope, Send

from launcher.shared.caller_identity import Caller, name_problem, permissions_problem
from launcher.transports.http.bearer_token import bearer
from launcher.transports.http.gateway.admission import party, unmet
from launcher.transports.http.gateway.keys import REFETCH_EVERY, Gateway, same_keys

ALGORITHMS = (
    *("RS256", "RS384", "RS512"),
    *("PS256", "PS384", "PS512"),
    *("ES256", "ES384", "ES512"),
    "EdDSA",
)
LEEWAY = 30  # seconds of clock difference allowed on exp and nbf
METADATA_PATHS = (
    "/.well-known/oauth-protected-resource",
    "/.well-known/oauth-protected-resource/mcp",
)
MAX_TOKEN = 16 * 1024
REMEMBERED = 1024  # verified tokens kept, so a client's next request is not checked again


class Refused(Exception):
    """A token that does not make a caller; the text says why (for the operator's eyes)."""


class UnknownKey(Refused):
    """The token names a key the key set does not hold (yet)."""


class NotAdmitted(Refused):
    """A valid token whose claims are not what the gateway requires: who it names (its
    subject, as a caller) and why."""

    def __init__(self, caller: Caller, why: str) -> None:
        super().__init__(f"not admitted: {why}")
        self.caller, self.why = caller, why


def verify(gateway: Gateway, token: str, *, audience_checked: bool = True) -> tuple[Caller, float]:
    """The caller ``token`` authenticates, and when the token expires (``time.time()``); a
    :class:`Refused` says why it does not. ``audience_checked=False`` leaves ``aud``
    unchecked: only to show what that check stops.

    A token whose header names an algorithm outside :data:`ALGORITHMS` is refused before any
    key is looked at.
    """
    import jwt

    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as exc:
        raise Refused(f"not a JWT: {exc}") from None
    alg = header.get("alg")
    if alg not in ALGORITHMS:
        raise Refused(f"the algorithm {json.dumps(alg)} is not accepted")
    kid = header.get("kid")
    key = gateway.keys.get(kid)
    if key is None:
        raise UnknownKey(f"the key {json.dumps(kid)} is not in the issuer's key set")
    declared = getattr(key, "_jwk_data", {}).get("alg")
    if declared is not None and declared != alg:
        raise Refused(f"the key {json.dumps(kid)} is for {declared}, not {alg}")
    required = ["exp", "iss", "sub", *(["aud"] if audience_checked else [])]
    try:
        claims = jwt.decode(
            token,
            key.key,
            algorithms=[alg],
            audience=gateway.audience if audience_checked else None,
            issuer=gateway.issuer,
            leeway=LEEWAY,
            options={
                "require": required,
                "verify_aud": audience_checked,
                "enforce_minimum_key_length": True,
            },
        )
    except jwt.PyJWTError as exc:
        raise Refused(str(exc) or type(exc).__name__) from None
    except (ValueError, TypeError) as exc:  # a key that does not fit the algorithm
        raise Refused(f"the key does not fit {alg}: {exc}") from None
    name = claims["sub"]
    problem = name_problem(name)
    if problem is not None:
        raise Refused(f"its subject (sub) {problem}")
    demanded = gateway.required
    who = party(gateway.issuer, claims, demanded) if demanded else gateway.issuer
    caller = Caller(name, frozenset(), gateway.issuer, who)
    problem = unmet(claims, demanded)
    if problem is not None:
        raise NotAdmitted(caller, problem)
    granted = permissions(claims, gateway.permissions_claim)
    return Caller(name, granted, gateway.issuer, who), float(claims["exp"])


def permissions(claims: Mapping[str, Any], claim: str) -> frozenset[str]:
    """The permissions ``claim`` grants: a space-separated string (``scope``) or a list of
    strings; none when the token has no such claim.

    >>> sorted(permissions({"scope": "crm:read  files:write"}, "scope"))
    ['crm:read', 'files:write']
    """
    value = claims.get(claim)
    if value is None:
        return frozenset()
    if isinstance(value, str):
        granted = value.split()
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        granted = value
    else:
        raise Refused(f"its {claim} claim is neither a string nor a list of strings")
    problem = permissions_problem(granted)
    if problem is not None:
        raise Refused(f"its {claim} claim: {problem}")
    return frozenset(granted)


class Gatekeeper:
    """Gateway mode at the HTTP endpoint: who each request comes from, or its refusal."""

    def __init__(
        self,
        gateway: Gateway,
        say: Callable[[str], None],
        refused: Callable[[Caller, str], None] | None = None,
    ) -> None:
        """``refused``: told of each subject a valid token named that was not admitted (its
        claims not what is required), once per subject while it is remembered."""
        self.gateway = gateway
        self.say = say
        self._refused = refused
        self._told: set[tuple[str, str]] = set()
        self._verified: dict[str, tuple[Caller, float]] = {}
        self._fetching: asyncio.Future[bool] | None = None
        self._failing = False  # the last fetch failed (said once, until one succeeds)
        self._tried = 0.0  # when the key set was last fetched or tried, by time.monotonic()

    async def admit(
        self, scope: Scope, headers: Mapping[str, str], send: Send, base: str
    ) -> Caller | None:
        """The request's caller; None when this answered the request itself (its refusal,
        or the protected resource metadata). ``base``: scheme, host and port clients reach
        the endpoint at (what a refusal and the metadata name; never the request's Host)."""
        if scope["path"] in METADATA_PATHS:
            await self._metadata(scope, send, base)
            return None
        token = bearer(headers.get("authorization", ""))
        if not token:
            await _unauthorized(
                send, base, None, "a bearer token (a JWT from the identity provider)"
            )
            return None
        try:
            return await self.caller(token)
        except NotAdmitted as refused:
            self._not_admitted(refused)
            body = f"403: {refused}".encode("utf-8", "backslashreplace")
            await _send(send, 403, body, [], "text/plain; charset=utf-8")
            return None
        except Refused as refused:
            await _unauthorized(send, base, "invalid_token", str(refused))
            return None

    def _not_admitted(self, refused: NotAdmitted) -> None:
        """Told once per subject (a client retrying is not a new refusal)."""
        key = refused.caller.key
        if self._refused is None or key in self._told:
            return
        if len(self._told) >= REMEMBERED:
            self._told.clear()
        self._told.add(key)
        self._refused(refused.caller, refused.why)

    async def caller(self, token: str) -> Caller:
        """The caller ``token`` authenticates (a :class:`Refused` says why not)."""
        keys, clock = self.gateway.keys, time.monotonic()
        if keys.stale(clock) and self._fetching is None and clock - self._tried > REFETCH_EVERY:
            # Old: fetched again while this token is taken as the keys known take it (a
            # token remembered too: what it was checked with may have been replaced).
            self._fetching = asyncio.ensure_future(self._fetch())
        known = self._verified.get(token)
        if known is not None and time.time() < known[1] + LEEWAY:
            return known[0]
        if len(token) > MAX_TOKEN:
            raise Refused(f"the token is longer than {MAX_TOKEN} characters")
        try:
            caller, expires = verify(self.gateway, token)
        except UnknownKey:
            if not await self._refetch():
                raise
            caller, expires = verify(self.gateway, token)
        if len(self._verified) >= REMEMBERED:
            self._verified.clear()
        self._verified[token] = (caller, expires)
        return caller

    async def _refetch(self) -> bool:
        """Fetch the key set again for a token naming a key not in it, unless the key set
        says not yet (or a fetch is under way: its outcome is this one's). True when a
        fetch succeeded."""
        if self._fetching is None:
            if not self.gateway.keys.may_refetch(time.monotonic()):
                return False
            self._fetching = asyncio.ensure_future(self._fetch())
        return await asyncio.shield(self._fetching)

    async def _fetch(self) -> bool:
        keys = self.gateway.keys
        self._tried = time.monotonic()
        try:
            fetched = await asyncio.to_thread(keys.fetch)
        except Exception as exc:  # FetchError, or whatever else stopped it: the same
            if not self._failing:
                self.say(
                    f"gateway: the identity provider's key set {keys.url} {exc}; tokens "
                    "signed with keys not known already are refused until it can be fetched"
                )
            self._failing = True
            return False
        finally:
            self._fetching = None
        if self._failing:
            self.say(f"gateway: the identity provider's keys fetched again from {keys.url}")
        self._failing = False
        if not same_keys(fetched, keys.keys):
            # A withdrawn key's tokens are no longer taken, nor those of a key the provider
            # replaced under the same kid: each is checked again, with the keys fetched.
            self._verified.clear()
        keys.keys, keys.fetched = fetched, time.monotonic()
        return True

    async def _metadata(self, scope: Scope, send: Send, base: str) -> None:
        if scope["method"] not in ("GET", "HEAD"):
            await _send(send, 405, b"GET", [(b"allow", b"GET")], "text/plain; charset=utf-8")
            return
        document = {
            "resource": f"{base}/mcp",
            "authorization_servers": [self.gateway.issuer],
            "bearer_methods_supported": ["header"],
        }
        body = json.dumps(document, indent=2).encode()
        await _send(send, 200, body, [(b"cache-control", b"max-age=300")], "application/json")


def challenge(base: str, error: str | None) -> str:
    """The ``WWW-Authenticate`` value of a refusal: where the metadata is, and ``error``.

    >>> print(challenge("http://127.0.0.1:8080", "invalid_token"))
    Bearer resource_metadata="http://127.0.0.1:8080/.well-known/oauth-protected-resource", \
error="invalid_token"
    """
    value = f'Bearer resource_metadata="{base}{METADATA_PATHS[0]}"'
    return value + (f', error="{error}"' if error else "")


async def _unauthorized(send: Send, base: str, error: str | None, text: str) -> None:
    headers = [(b"www-authenticate", challenge(base, error).encode("latin-1"))]
    body = f"401: {'missing' if error is None else 'refused'}: {text}".encode(
        "utf-8", "backslashreplace"
    )
    await _send(send, 401, body, headers, "text/plain; charset=utf-8")


async def _send(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]], kind: str
) -> None:
    headers = [
        (b"content-type", kind.encode()),
        (b"content-length", str(len(body)).encode()),
        *headers,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
