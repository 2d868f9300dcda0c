"""Logging out of a remote server (``ironcurtain auth logout``) at its authorization server:
the login's tokens revoked there (RFC 7009), when it offers a revocation endpoint, through
the same egress check as the login, authenticated as the client the login was made as. The
login is forgotten here whatever the answer (by the caller); this says what became of the
grant there. No token is ever printed."""

from __future__ import annotations

from urllib.parse import urlsplit

from launcher.plan.remote_plan import RemoteTarget
from launcher.servers.token_store import Login


class RevokeFailed(Exception):
    """The authorization server did not revoke the login: why, in one line."""


def revocation_endpoint(login: Login) -> str | None:
    """Where the login's authorization server revokes tokens, when it says it does."""
    metadata = login.get("server_metadata") or {}
    found = metadata.get("revocation_endpoint")
    return str(found) if found else None


async def revoke(login: Login, target: RemoteTarget) -> str | None:
    """Revoke the login's refresh token, then its access token, at its authorization
    server's revocation endpoint; the endpoint (None: it offers none, nothing was sent).
    :class:`RevokeFailed` when it refuses or cannot be reached."""
    import httpx2
    from mcp.client.auth.exceptions import OAuthTokenError
    from mcp.client.auth.oauth2 import OAuthContext
    from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata

    from launcher.servers.remote_egress import EgressRefused, client_for
    from launcher.servers.remote_login import plain_endpoint_url

    endpoint = revocation_endpoint(login)
    if endpoint is None:
        return None
    plain = plain_endpoint_url("revocation endpoint", endpoint, target)
    if plain is not None:
        raise RevokeFailed(plain)
    client = OAuthClientInformationFull.model_validate(login["client"])
    context = OAuthContext(
        login["url"], OAuthClientMetadata(redirect_uris=None), _NoStorage(), None, None
    )
    context.client_info = client
    tokens = login.get("tokens", {})
    host = (urlsplit(endpoint).hostname or "").lower()
    async with client_for(target, also=frozenset({host})) as http:
        for hint in ("refresh_token", "access_token"):
            if not tokens.get(hint):
                continue
            data = {"token": str(tokens[hint]), "token_type_hint": hint}
            data["client_id"] = client.client_id or ""
            headers = {"Content-Type": "application/x-www-form-urlencoded"}
            try:
                data, headers = context.prepare_token_auth(data, headers)
                answer = await http.post(endpoint, data=data, headers=headers)
            except (OAuthTokenError, EgressRefused, httpx2.HTTPError) as exc:
                raise RevokeFailed(" ".join(str(exc).split()) or type(exc).__name__) from None
            if answer.status_code != 200:  # RFC 7009 2.2: 200 whether or not it was valid
                raise RevokeFailed(f"its revocation endpoint answered HTTP {answer.status_code}")
    return endpoint


class _NoStorage:
    """No storage: a revocation keeps nothing."""

    async def get_tokens(self) -> None:
        return None

    async def set_tokens(self, tokens: object) -> None:
        del tokens

    async def get_client_info(self) -> None:
        return None

    async def set_client_info(self, client_info: object) -> None:
        del client_info
