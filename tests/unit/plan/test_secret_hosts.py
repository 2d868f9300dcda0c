"""A brokered secret's hosts as the egress proxy is asked for them: a name lower-cased
without its trailing dot, an address in the one form a client asks for it whatever form the
config wrote it in (else the proxy never opens TLS for it, and the server never gets its
credential sent)."""

from __future__ import annotations

import pytest

from launcher.plan.config_schema import SecretConfig
from launcher.plan.secrets_plan import plan_secrets
from policy.egress import EgressRules

WRITTEN = {
    "a name in capitals with a trailing dot": ("API.Example.COM.", "api.example.com", 443),
    "an address in hex": ("0x7f.0.0.2:8443", "127.0.0.2", 8443),
    "an address in one number": ("2130706434:8443", "127.0.0.2", 8443),
    "an address written short": ("127.2:8443", "127.0.0.2", 8443),
}


@pytest.mark.parametrize("case", list(WRITTEN))
def test_a_secrets_host_is_the_one_a_client_asks_for(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # This test process is not the one to keep from dumps.
    monkeypatch.setattr("launcher.host.no_dumps.keep_from_dumps", lambda: None)
    written, asked, port = WRITTEN[case]
    rules = EgressRules.from_config(["api.example.com", "127.0.0.2:8443"], [])
    secret = SecretConfig(from_="env:TOKEN", hosts=[written])
    (planned,) = plan_secrets(
        "c.json", "$.mcpServers.s", {}, {"TOKEN": secret}, rules, True, {"TOKEN": "v"}
    )
    assert planned.hosts == ((asked, None if port == 443 else port),)
    assert planned.goes_to(asked, port)
