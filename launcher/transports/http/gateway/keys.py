"""Gateway mode's settings and its identity provider's keys.

The keys are the issuer's JWKS (RFC 7517), found from its OpenID discovery document
(``<issuer>/.well-known/openid-configuration``, whose ``issuer`` must be the one given) or
given as a URL (``https``, ``http`` on a loopback address, or ``file://``). They are fetched
once before the session starts (a failure stops it) and kept; :class:`KeySet` says when
they may be fetched again: when a token names a key not in the set (at most
``REFETCH_BURST`` times at once, then once every ``REFETCH_EVERY`` seconds, so a flood of
tokens naming random keys cannot make the session hammer the identity provider), and when
the set is older than ``REFRESH_AFTER`` seconds (a key the provider withdrew stops being
trusted).

Only public signing keys are kept: RSA, EC and OKP (Ed25519, Ed448) keys whose ``use``,
when given, is ``sig``. A symmetric (``oct``) key is never one.
"""

from __future__ import annotations

import ipaddress
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

from launcher import __version__
from launcher.shared.user_errors import OptionError
from sandbox_profiles.records import frozen, mutable

FETCH_TIMEOUT = 5.0
MAX_DOCUMENT = 1024 * 1024
REFETCH_BURST = 3  # unknown-key refetches allowed at once
REFETCH_EVERY = 60.0  # seconds to earn one more
REFRESH_AFTER = 600.0  # seconds a fetched key set is used before it is fetched again
KEY_TYPES = ("RSA", "EC", "OKP")
DISCOVERY = "/.well-known/openid-configuration"


class FetchError(Exception):
    """A document could not be fetched or read (the text says what happened)."""


def url_problem(url: str, file_ok: bool = False) -> str | None:
    """What makes ``url`` no place to fetch keys from (None: it is one): ``https``, or plain
    ``http`` to a loopback address only (anyone on the way could swap the keys), or
    ``file://`` where ``file_ok``.

    >>> url_problem("https://id.example.com/realms/team") is None
    True
    >>> url_problem("http://id.example.com")
    'plain http is accepted only on a loopback address (127.0.0.1, ::1, localhost); use https'
    """
    parts = urlsplit(url)
    if parts.scheme == "file" and file_ok:
        if parts.netloc not in ("", "localhost"):
            return "names a file on another host"
        return None if parts.path else "names no file"
    if parts.scheme not in ("https", "http") or not parts.hostname:
        kinds = "https (or http on a loopback address" + (", or file://)" if file_ok else ")")
        return f"is not a URL this accepts: expected {kinds}"
    if parts.username or parts.password:
        return "holds a user name or password"
    if parts.scheme == "http" and not _loopback(parts.hostname):
        return (
            "plain http is accepted only on a loopback address (127.0.0.1, ::1, localhost); "
            "use https"
        )
    return None


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a 3xx is answered as the error it is here: keys come from where told


_OPENER = urllib.request.build_opener(_NoRedirects)
# To a loopback address never through a proxy the environment names (it would be the
# proxy's answer, from elsewhere).
_LOCAL_OPENER = urllib.request.build_opener(_NoRedirects, urllib.request.ProxyHandler({}))


def fetch_json(url: str) -> Mapping[str, Any]:
    """The JSON object at ``url`` (https, loopback http or file://), or a :class:`FetchError`."""
    parts = urlsplit(url)
    try:
        if parts.scheme == "file":
            with open(unquote(parts.path), "rb") as handle:
                raw = handle.read(MAX_DOCUMENT + 1)
        else:
            request = urllib.request.Request(
                url,
                headers={"Accept": "application/json", "User-Agent": f"ironcurtain/{__version__}"},
            )
            opener = _LOCAL_OPENER if _loopback(parts.hostname or "") else _OPENER
            with opener.open(request, timeout=FETCH_TIMEOUT) as answer:
                raw = answer.read(MAX_DOCUMENT + 1)
    except urllib.error.HTTPError as exc:
        raise FetchError(f"answered HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        said = getattr(reason, "strerror", None) or reason
        raise FetchError(f"could not be fetched: {said}") from None
    except OSError as exc:
        raise FetchError(f"could not be fetched: {exc.strerror or exc}") from None
    if len(raw) > MAX_DOCUMENT:
        raise FetchError(f"is larger than {MAX_DOCUMENT} bytes")
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError):
        raise FetchError("is not JSON") from None
    if not isinstance(document, dict):
        raise FetchError("is not a JSON object")
    return document


def parse_jwks(document: Mapping[str, Any]) -> dict[str | None, Any]:
    """The public signing keys of a JWKS document, by ``kid`` (``None``: a key without one),
    as PyJWT's :class:`jwt.PyJWK`; a :class:`FetchError` when it holds none."""
    from jwt import PyJWK
    from jwt.exceptions import PyJWKError, PyJWTError

    listed = document.get("keys")
    if not isinstance(listed, list):
        raise FetchError('is not a JWKS: it has no "keys" list')
    keys: dict[str | None, Any] = {}
    for jwk in listed:
        if not isinstance(jwk, dict) or jwk.get("kty") not in KEY_TYPES:
            continue
        if jwk.get("use", "sig") != "sig" or any(k in jwk for k in ("d", "p", "q", "k")):
            continue  # an encryption key, or a private one published by mistake
        kid = jwk.get("kid")
        if kid is not None and not isinstance(kid, str):
            continue
        try:
            keys[kid] = PyJWK(jwk)
        except (PyJWKError, PyJWTError, ValueError, TypeError):
            continue  # a curve or key type this verifier does not take
    if not keys:
        raise FetchError("holds no public signing key this verifier takes (RSA, EC or OKP)")
    return keys


def same_keys(these: Mapping[str | None, Any], those: Mapping[str | None, Any]) -> bool:
    """Whether two key sets hold the same keys: the same ``kid``s, each naming the same key
    (a key replaced under its ``kid`` is another key)."""
    return _published(these) == _published(those)


def _published(keys: Mapping[str | None, Any]) -> dict[str | None, str]:
    return {
        kid: json.dumps(getattr(key, "_jwk_data", None), sort_keys=True)
        for kid, key in keys.items()
    }


@mutable
class KeySet:
    """The identity provider's keys, and when they may be fetched again."""

    url: str
    keys: dict[str | None, Any]
    fetched: float  # time.monotonic() of the last fetch that succeeded
    credit: float = REFETCH_BURST
    credited: float = 0.0  # when the credit was last worked out

    def get(self, kid: object) -> Any:
        """The key a token's ``kid`` names (without one: the only key there is), or None."""
        if kid is None:
            return next(iter(self.keys.values())) if len(self.keys) == 1 else None
        return self.keys.get(kid) if isinstance(kid, str) else None

    def may_refetch(self, now: float) -> bool:
        """Whether a token naming an unknown key may have the set fetched again now (each
        yes spends one of the ``REFETCH_BURST``, earned back one per ``REFETCH_EVERY``)."""
        if self.credited:
            self.credit = min(REFETCH_BURST, self.credit + (now - self.credited) / REFETCH_EVERY)
        self.credited = now
        if self.credit < 1:
            return False
        self.credit -= 1
        return True

    def stale(self, now: float) -> bool:
        return now - self.fetched > REFRESH_AFTER

    def fetch(self) -> dict[str | None, Any]:
        """The key set as the provider publishes it now (blocking: run in a thread)."""
        return parse_jwks(fetch_json(self.url))


@frozen
class Gateway:
    """What gateway mode checks of each request's token, and with which keys."""

    issuer: str
    audience: str
    permissions_claim: str
    keys: KeySet
    jwks_url: str
    # The claims a token must carry to make a caller (each CLAIM=GLOB must match).
    required: tuple[tuple[str, str], ...] = ()


def gateway(
    issuer: str,
    audience: str,
    jwks_url: str | None,
    permissions_claim: str = "scope",
    required: tuple[tuple[str, str], ...] = (),
) -> Gateway:
    """Gateway mode's settings with the issuer's keys fetched; an :class:`OptionError`
    names the setting that is wrong or whose document could not be had."""
    problem = url_problem(issuer)
    if problem is not None:
        raise OptionError("oidc_issuer", issuer, problem)
    if not audience.strip() or not audience.isprintable():
        raise OptionError("oidc_audience", audience, "is empty or holds control characters")
    if not permissions_claim or not permissions_claim.isprintable():
        raise OptionError("permissions_claim", permissions_claim, "is not a claim name")
    if jwks_url is None:
        jwks_url = _discovered_jwks(issuer)
    else:
        problem = url_problem(jwks_url, file_ok=True)
        if problem is not None:
            raise OptionError("oidc_jwks_url", jwks_url, problem)
    if jwks_url.startswith("file:") and not os.path.isabs(unquote(urlsplit(jwks_url).path)):
        raise OptionError("oidc_jwks_url", jwks_url, "a file:// URL names an absolute path")
    try:
        keys = parse_jwks(fetch_json(jwks_url))
    except FetchError as exc:
        raise OptionError("oidc_jwks_url", jwks_url, f"the key set (JWKS) {exc}") from None
    return Gateway(
        issuer,
        audience,
        permissions_claim,
        KeySet(jwks_url, keys, time.monotonic()),
        jwks_url,
        required,
    )


def _discovered_jwks(issuer: str) -> str:
    """The ``jwks_uri`` of the issuer's discovery document, which must name this issuer."""
    url = issuer.rstrip("/") + DISCOVERY
    try:
        document = fetch_json(url)
    except FetchError as exc:
        raise OptionError(
            "oidc_issuer",
            issuer,
            f"its discovery document {url} {exc} (give the key set's URL with "
            "{oidc_jwks_url} if the provider has no discovery document)",
            mentions=("oidc_jwks_url",),
        ) from None
    if document.get("issuer") != issuer:
        raise OptionError(
            "oidc_issuer",
            issuer,
            f"its discovery document {url} names the issuer "
            f"{json.dumps(document.get('issuer'))}; tokens carry that exact text as their "
            "iss (a trailing slash counts)",
        )
    jwks_uri = document.get("jwks_uri")
    if not isinstance(jwks_uri, str):
        raise OptionError("oidc_issuer", issuer, f"its discovery document {url} has no jwks_uri")
    problem = url_problem(jwks_uri)
    if problem is not None:
        raise OptionError(
            "oidc_issuer", issuer, f"its discovery document's jwks_uri {jwks_uri} {problem}"
        )
    return jwks_uri
