"""What is kept of each caller in gateway mode (approvals for the session, the circuit
breaker): shared by the relays serving it, kept a while after the last ends, bounded."""

from __future__ import annotations

import time

import pytest

from launcher.relay.approving.approval import Approvals
from launcher.relay.gate.breaker import CircuitBreaker
from launcher.session import served
from launcher.session.served import Kept, KeptCallers
from launcher.shared.caller_identity import Caller


def _callers() -> KeptCallers:
    return KeptCallers(
        lambda caller: Kept(Approvals("deny", 1.0).for_caller(caller.audited), CircuitBreaker(3))
    )


def _caller(name: str) -> Caller:
    return Caller(name, frozenset(), "https://idp.example")


def test_a_callers_relays_share_what_is_kept_and_another_caller_has_its_own() -> None:
    kept = _callers()
    first, second = kept.take(_caller("alice")), kept.take(_caller("alice"))
    bob = kept.take(_caller("bob"))
    assert first is second and first is not bob
    assert first.approvals.caller == {"name": "alice", "issuer": "https://idp.example"}
    # Same name, another issuer: another caller.
    assert kept.take(Caller("alice", frozenset(), "https://other.example")) is not first


def test_what_is_kept_outlives_the_last_relay_until_it_expires(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    kept = _callers()
    alice = kept.take(_caller("alice"))
    alice.approvals.session_whitelist.add(("probe", "env_value", "sha256:x"))
    kept.release(_caller("alice"))
    clock[0] += served.KEEP_FOR - 1
    assert kept.take(_caller("alice")) is alice  # a new session of hers, within the time
    kept.release(_caller("alice"))
    clock[0] += served.KEEP_FOR + 1
    kept.release(_caller("bob"))  # whatever release comes next sweeps the expired
    assert len(kept) == 0
    assert not kept.take(_caller("alice")).approvals.session_whitelist


def test_at_most_max_kept_callers_no_relay_serves_are_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(served, "MAX_KEPT", 3)
    kept = _callers()
    busy = kept.take(_caller("busy"))
    for i in range(6):
        kept.take(_caller(f"c{i}"))
        kept.release(_caller(f"c{i}"))
    assert len(kept) == 4  # three unused, the most recent; and the one still served
    assert kept.take(_caller("busy")) is busy
    fresh = kept.take(_caller("c0"))
    assert fresh.users == 1 and not fresh.approvals.session_whitelist
