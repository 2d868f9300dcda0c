"""A remote MCP server on the ``mcp`` SDK that requires OAuth, and the authorization server
that issues its tokens, in one process on loopback (streamable HTTP): protected-resource
metadata, authorization-server metadata, dynamic registration, the authorization code with
PKCE, refresh (rotating the refresh token), all the SDK's own server parts. Tokens are
bound to the resource they were asked for and live ``LIFETIME`` seconds.

The authorization endpoint approves at once (a person who says yes), redirecting back with
the code, the state and the ``iss`` (RFC 9207). It writes one JSON line per event to the
record file: each token issued (``grant``, ``access``, ``refresh``, ``resource``), each tool
call (``tool``, ``args``) and the bearer token it came with, and the ``Authorization`` header
of every request (``seen``).

Its revocation endpoint (RFC 7009) records each token revoked (``revoked``);
``$OAUTH_REVOKE`` set to ``0``: it offers none. ``$OAUTH_CLIENT`` names a pre-registered
client (``ID:SECRET``); each registration is recorded (``registered``), and each grant its
client and scopes.

Usage: ``oauth_server.py PORT RECORD LIFETIME [MOVED_TO]``; with ``MOVED_TO`` (an issuer URL)
the server names that authorization server instead and has none of its own.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Any

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    IdentityAssertionParams,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import InvalidRedirectUriError, OAuthClientInformationFull, OAuthToken
from pydantic import AnyUrl

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else 0
RECORD = Path(sys.argv[2]) if len(sys.argv) > 2 else Path("/dev/null")
LIFETIME = int(sys.argv[3]) if len(sys.argv) > 3 else 3600
# The name it is reached by (``$OAUTH_HOST``, default 127.0.0.1): its issuer and resource.
HOST = os.environ.get("OAUTH_HOST", "127.0.0.1")
ISSUER = f"http://{HOST}:{PORT}"
RESOURCE = f"{ISSUER}/mcp"
MOVED_TO = sys.argv[4] if len(sys.argv) > 4 else None


def _record(**event: Any) -> None:
    with RECORD.open("a") as out:
        out.write(json.dumps(event) + "\n")


class Loopback(OAuthClientInformationFull):
    """A pre-registered client: its redirect URI on 127.0.0.1 at any port (RFC 8252 7.3)."""

    def validate_redirect_uri(self, redirect_uri: AnyUrl | None) -> AnyUrl:
        if (
            redirect_uri is None
            or redirect_uri.host != "127.0.0.1"
            or redirect_uri.scheme != "http"
        ):
            raise InvalidRedirectUriError(f"Redirect URI '{redirect_uri}' not registered")
        return redirect_uri


def _pre_registered() -> dict[str, OAuthClientInformationFull]:
    """``$OAUTH_CLIENT`` (``ID:SECRET``, or ``ID`` for a public client): a client registered
    beforehand, for the scopes ``mcp`` and ``extra``."""
    given = os.environ.get("OAUTH_CLIENT")
    if not given:
        return {}
    client_id, _, secret = given.partition(":")
    client = Loopback(
        client_id=client_id,
        client_secret=secret or None,
        redirect_uris=[AnyUrl("http://127.0.0.1/callback")],
        token_endpoint_auth_method="client_secret_basic" if secret else "none",
        grant_types=["authorization_code", "refresh_token"],
        scope="mcp extra",
    )
    return {client_id: client}


class Provider:
    """An authorization server kept in memory that says yes to everyone."""

    def __init__(self) -> None:
        self.clients: dict[str, OAuthClientInformationFull] = _pre_registered()
        self.codes: dict[str, AuthorizationCode] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.access: dict[str, AccessToken] = {}

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info
        _record(registered=client_info.client_id, scope=client_info.scope)

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        code = secrets.token_urlsafe(16)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or ["mcp"],
            expires_at=time.time() + 300,
            client_id=client.client_id or "",
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        return construct_redirect_uri(
            str(params.redirect_uri), code=code, state=params.state, iss=ISSUER
        )

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    def _issue(
        self, grant: str, client_id: str, scopes: list[str], resource: str | None
    ) -> OAuthToken:
        access, refresh = f"at-{secrets.token_hex(16)}", f"rt-{secrets.token_hex(16)}"
        expires = int(time.time()) + LIFETIME
        self.access[access] = AccessToken(
            token=access, client_id=client_id, scopes=scopes, expires_at=expires, resource=resource
        )
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=resource
        )
        _record(
            grant=grant,
            access=access,
            refresh=refresh,
            resource=resource,
            client=client_id,
            scopes=scopes,
        )
        return OAuthToken(
            access_token=access, expires_in=LIFETIME, scope=" ".join(scopes), refresh_token=refresh
        )

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        del self.codes[authorization_code.code]
        scopes = authorization_code.scopes
        return self._issue(
            "authorization_code", client.client_id or "", scopes, authorization_code.resource
        )

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(
        self,
        client: OAuthClientInformationFull,
        refresh_token: RefreshToken,
        scopes: list[str],
    ) -> OAuthToken:
        if self.refresh.pop(refresh_token.token, None) is None:  # good for one use
            raise TokenError("invalid_grant", "refresh token already used")
        scopes = scopes or refresh_token.scopes
        return self._issue("refresh_token", client.client_id or "", scopes, refresh_token.resource)

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            return None
        return found

    async def exchange_identity_assertion(
        self, client: OAuthClientInformationFull, params: IdentityAssertionParams
    ) -> OAuthToken:
        raise TokenError("unsupported_grant_type", "not this grant")

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        _record(revoked=token.token)
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)


class Nobody:
    """A resource server's token check that accepts no token at all."""

    async def verify_token(self, token: str) -> AccessToken | None:
        return None


def _server() -> MCPServer:
    """The server and its own authorization server; or, given ``MOVED_TO``, the server
    alone, naming that other authorization server (and taking no token of the old one's)."""
    if MOVED_TO is not None:
        return MCPServer(
            "oauth-remote",
            token_verifier=Nobody(),
            auth=AuthSettings(
                issuer_url=MOVED_TO, resource_server_url=RESOURCE, validate_token_resource=True
            ),
        )
    return MCPServer(
        "oauth-remote",
        auth_server_provider=Provider(),
        auth=AuthSettings(
            issuer_url=ISSUER,
            resource_server_url=RESOURCE,
            validate_token_resource=True,
            client_registration_options=ClientRegistrationOptions(
                enabled=True, valid_scopes=["mcp", "extra"]
            ),
            required_scopes=["mcp"],
            revocation_options=RevocationOptions(enabled=os.environ.get("OAUTH_REVOKE") != "0"),
        ),
    )


mcp = _server()


@mcp.tool()
def echo(text: str) -> str:
    """Say the text back."""
    token = get_access_token()
    _record(tool="echo", args={"text": text}, bearer=token.token if token else None)
    return f"echo: {text}"


def _seeing(app: Any) -> Any:
    """``app``, recording the ``Authorization`` header of every request that reaches it
    (``seen``), taken or not."""

    async def seeing(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope["headers"]).get(b"authorization")
            if given is not None:
                _record(seen=given.decode(errors="replace"), path=scope["path"])
        await app(scope, receive, send)

    return seeing


def _public_revocation(app: Any) -> Any:
    """``app``, whose revocation endpoint takes a public client's request (RFC 7009 asks no
    ``client_secret`` of one; the SDK's handler wants the field there, empty or not)."""

    async def revoking(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/revoke":
            await app(scope, receive, send)
            return
        body = b""
        while True:
            part = await receive()
            body += part.get("body", b"")
            if not part.get("more_body"):
                break
        if b"client_secret=" not in body:
            body += b"&client_secret="
        headers = [(k, v) for k, v in scope["headers"] if k != b"content-length"]
        scope = {**scope, "headers": [*headers, (b"content-length", str(len(body)).encode())]}
        sent = False

        async def again() -> dict[str, Any]:
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await app(scope, again, send)

    return revoking


def main() -> None:
    import uvicorn

    app = _seeing(_public_revocation(mcp.streamable_http_app()))
    uvicorn.run(app, host="127.0.0.1", port=PORT, log_level="warning")


if __name__ == "__main__":
    main()
