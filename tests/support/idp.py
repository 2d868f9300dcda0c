"""An identity provider as gateway mode meets one: its keys made here with ``cryptography``,
its OpenID discovery document and JWKS served on loopback by a real HTTP server, and tokens
signed with PyJWT as a provider signs them. It counts what it serves, can rotate its keys and
can stop answering; it also forges the tokens an attacker would send."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

AUDIENCE = "https://mcp.team.example/mcp"


_PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Key:
    """One signing key of the provider."""

    def __init__(self, kind: str = "RS256", kid: str | None = None) -> None:
        self.alg = kind
        self.kid = kid or f"{kind.lower()}-{uuid.uuid4().hex[:8]}"
        if kind.startswith(("RS", "PS")):
            self.private: _PrivateKey = rsa.generate_private_key(
                public_exponent=65537, key_size=2048
            )
        elif kind == "ES256":
            self.private = ec.generate_private_key(ec.SECP256R1())
        elif kind == "EdDSA":
            self.private = ed25519.Ed25519PrivateKey.generate()
        else:
            raise ValueError(kind)

    def jwk(self) -> dict[str, Any]:
        algorithm = jwt.get_algorithm_by_name(self.alg)
        data: dict[str, Any] = json.loads(algorithm.to_jwk(self.private.public_key()))
        return {**data, "kid": self.kid, "use": "sig", "alg": self.alg}

    def public_pem(self) -> bytes:
        return self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )


class Provider:
    """The provider's state: its issuer URL (once serving), keys, and what it was asked."""

    def __init__(self) -> None:
        self.keys = [Key("RS256")]
        self.issuer = ""
        self.jwks_fetches = 0
        self.discovery_fetches = 0
        self.down = False  # answer 503 to everything
        self.lock = threading.Lock()

    @property
    def key(self) -> Key:
        return self.keys[0]

    def jwks(self) -> dict[str, Any]:
        return {"keys": [k.jwk() for k in self.keys]}

    def discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "jwks_uri": f"{self.issuer}/protocol/openid-connect/certs",
            "token_endpoint": f"{self.issuer}/protocol/openid-connect/token",
            "id_token_signing_alg_values_supported": ["RS256", "ES256", "EdDSA"],
        }

    def rotate(self, kind: str = "RS256") -> Key:
        """A new key first in the set (the old one withdrawn), as a provider rotates."""
        new = Key(kind)
        self.keys = [new]
        return new

    def claims(self, sub: str = "billing-agent", **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "aud": AUDIENCE,
            "sub": sub,
            "iat": now,
            "exp": now + 300,
            "scope": "crm:read files:write",
        }
        claims.update(overrides)
        return {k: v for k, v in claims.items() if v is not None}

    def token(self, sub: str = "billing-agent", key: Key | None = None, **claims: Any) -> str:
        """A token as the provider issues it (``claims`` override; None drops one)."""
        key = key or self.key
        return jwt.encode(
            self.claims(sub, **claims), key.private, algorithm=key.alg, headers={"kid": key.kid}
        )

    def forged_none(self, sub: str = "billing-agent") -> str:
        """``alg: none``: no signature at all."""
        header = {"alg": "none", "typ": "JWT", "kid": self.key.kid}
        body = self.claims(sub)
        return f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(body).encode())}."

    def forged_hs256(self, sub: str = "billing-agent") -> str:
        """HS256 with the provider's public key (published) as the HMAC secret."""
        header = {"alg": "HS256", "typ": "JWT", "kid": self.key.kid}
        signing = (
            f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(self.claims(sub)).encode())}"
        )
        mac = hmac.new(self.key.public_pem(), signing.encode(), hashlib.sha256).digest()
        return f"{signing}.{_b64(mac)}"


def _handler(provider: Provider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with provider.lock:
                if provider.down:
                    self._send(503, {"error": "unavailable"})
                    return
                if self.path.endswith("/.well-known/openid-configuration"):
                    provider.discovery_fetches += 1
                    self._send(200, provider.discovery())
                elif self.path.endswith("/protocol/openid-connect/certs"):
                    provider.jwks_fetches += 1
                    self._send(200, provider.jwks())
                else:
                    self._send(404, {"error": "not found"})

        def _send(self, status: int, document: dict[str, Any]) -> None:
            body = json.dumps(document).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def identity_provider(realm: str = "team") -> Iterator[Provider]:
    """A provider serving on 127.0.0.1 with a Keycloak-shaped issuer
    (``http://127.0.0.1:PORT/realms/team``), until the block ends."""
    provider = Provider()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(provider))
    provider.issuer = f"http://127.0.0.1:{server.server_address[1]}/realms/{realm}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield provider
    finally:
        server.shutdown()
        server.server_close()
