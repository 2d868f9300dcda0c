"""Brokered secrets in a gateway session planned for every caller (a workspace of each
caller's own): each caller's servers hold a sentinel of their own, brokered by a proxy of
their own with its own certificate authority. Attacked by a hostile server of bob's that
learnt alice's sentinel: sent from bob's sandbox to the secret's host, it is never swapped
for the value. The control, in the same session: alice's own server sending the same
sentinel gets the value to the host, so the sentinel bob holds is a live one."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.home import Home
from tests.support.http import http_session, serving
from tests.support.idp import AUDIENCE, identity_provider
from tests.support.marks import needs_bwrap
from tests.support.probe import probe_server_config, write_raw_policy
from tests.support.sdk import call
from tests.support.tls_upstream import Seen, make_authority, recording

pytestmark = [pytest.mark.sandbox, needs_bwrap]

VALUE = "s3cr3t-Value-for-the-api-7f3a9c1e5d2b"  # matched by no credential detector


def _server(https: int) -> dict[str, Any]:
    server = probe_server_config(True)
    server["sandbox"]["network"] = {
        "allowedDomains": [f"api.test:{https}"],
        "hosts": {"api.test": "127.0.0.1"},
    }
    server["secrets"] = {"API_TOKEN": {"from": "env:MY_TOKEN", "hosts": ["api.test"]}}
    server["scanArguments"] = {"skip": ["configured-secret"]}  # a sentinel is sent as text
    return server


def _send(https: int, path: str, credential: str) -> dict[str, Any]:
    url = f"https://api.test:{https}{path}"
    return {"url": url, "headers": {"Authorization": f"Bearer {credential}"}, "insecure": False}


def _session(user: Home, tmp_path: Path) -> tuple[dict[str, Any], list[Seen]]:
    ca, chain = make_authority(tmp_path, ["api.test"])
    user.env["MY_TOKEN"] = VALUE
    user.env["SSL_CERT_FILE"] = str(ca)  # the upstream's CA, pinned for ironcurtain
    (user.root / "work").mkdir()
    config = user.root / "probe.json"
    policy = write_raw_policy(user.root / "policy")
    out: dict[str, Any] = {}
    with identity_provider() as idp, recording(chain) as (https, seen):
        config.write_text(json.dumps({"mcpServers": {"probe": _server(https)}}))
        args = ["--config", str(config), "--policy-dir", str(policy),
                "--workspace", f"{user.root}/work/${{caller}}",
                "--audit-log", str(user.root / "audit.jsonl"),
                "--oidc-issuer", idp.issuer, "--oidc-audience", AUDIENCE]  # fmt: skip

        async def scenario(url: str) -> None:
            async with (
                http_session(url, idp.token("alice")) as alice,
                http_session(url, idp.token("bob")) as bob,
            ):
                out["alice holds"] = (await call(alice, "probe__env_value", {"name": "API_TOKEN"}))[
                    1
                ]
                out["bob holds"] = (await call(bob, "probe__env_value", {"name": "API_TOKEN"}))[1]
                stolen = out["alice holds"]
                out["bob sends alice's"] = await call(
                    bob, "probe__http_send", _send(https, "/bob-with-alices", stolen)
                )
                out["bob sends his own"] = await call(
                    bob, "probe__http_send", _send(https, "/bob-own", "$API_TOKEN")
                )
                # Her second client (while the first is open): the same plan and broker.
                async with http_session(url, idp.token("alice")) as again:
                    out["alice again"] = await call(
                        again, "probe__http_send", _send(https, "/alice-again", "$API_TOKEN")
                    )
                out["alice sends hers"] = await call(
                    alice, "probe__http_send", _send(https, "/alice-own", stolen)
                )

        with serving(user, *args) as served:
            asyncio.run(scenario(served.url))
    return out, seen


def _at(seen: list[Seen], path: str) -> list[Seen]:
    return [s for s in seen if s.path.startswith(path)]


def test_a_callers_server_cannot_use_another_callers_sentinel(user: Home, tmp_path: Path) -> None:
    out, seen = _session(user, tmp_path)
    alice, bob = out["alice holds"], out["bob holds"]
    # Each holds a sentinel, its own: never the value, never the other's.
    for held in (alice, bob):
        assert held.startswith("ironcurtain-sentinel-") and VALUE not in held
    assert alice != bob
    # Bob's server sends alice's sentinel to the secret's host: refused by his proxy (a
    # sentinel it does not know), nothing reaches the host, the value never leaves.
    _, text = out["bob sends alice's"]
    assert text.startswith("FAILED 403") and "unknown sentinel" in text, text
    assert _at(seen, "/bob-with-alices") == []
    # His own sentinel is brokered by his own proxy: the value reaches the host.
    assert out["bob sends his own"][1].startswith("OK 200"), out["bob sends his own"]
    assert _at(seen, "/bob-own")[0].headers["authorization"] == f"Bearer {VALUE}"
    # The control: the same sentinel, sent by alice's own server, is swapped for the value.
    assert out["alice sends hers"][1].startswith("OK 200"), out["alice sends hers"]
    assert _at(seen, "/alice-own")[0].headers["authorization"] == f"Bearer {VALUE}"
    # The value reached the secret's host only where its holder sent its own sentinel.
    assert out["alice again"][1].startswith("OK 200"), out["alice again"]
    leaked = [s.path for s in seen if VALUE in s.whole()]
    assert sorted(leaked) == ["/alice-again", "/alice-own", "/bob-own"]
