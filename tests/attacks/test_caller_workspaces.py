"""A caller whose name reads as a path cannot reach another caller's places, nor a place
outside the directory that holds them: the session of a gateway (callers from a provider on
loopback), planned for every caller, is planned again for the attacker as it would be when
the attacker calls. Each attack is run again with the caller's raw name put in the paths
(the control): then it reaches the victim's directory, or leaves the parent."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.guard.places import inside
from launcher.plan.caller_plan import plan_for_caller
from launcher.plan.session_plan import RunOptions, SessionPlan, plan_session
from launcher.shared.caller_identity import Caller
from tests.support.home import Home, in_process, make_home
from tests.support.idp import AUDIENCE, identity_provider
from tests.support.marks import needs_bwrap

pytestmark = needs_bwrap  # the session is planned as it runs: bwrap must be able to sandbox
VICTIM = "alice"
# Names an identity provider could give an attacker (its ``sub``), and what the raw name
# would reach in a path ``parent/${caller}``.
ATTACKS = [
    ("x/../alice", "the victim's"),
    ("./alice", "the victim's"),
    ("alice/.", "the victim's"),
    ("alice/", "the victim's"),
    ("../work/alice", "the victim's"),
    ("../../elsewhere", "outside the parent"),
    ("../x", "outside the parent"),
]


@pytest.fixture
def gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Home, SessionPlan]]:
    """A gateway session planned for every caller: its workspace and a directory each
    server may write, each a caller's."""
    user = in_process(make_home(tmp_path), monkeypatch)
    monkeypatch.setenv("HOME", user.env["HOME"])
    shared = tmp_path / "shared"
    server = {
        "command": "mcp-server-filesystem",
        "args": ["${workspace}"],
        "cwd": "${workspace}",
        "sandbox": {"filesystem": {"allowWrite": [f"{shared}/${{caller}}"]}},
    }
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"filesystem": server}}))
    with identity_provider() as idp:
        opts = RunOptions(
            config=str(config),
            workspace=f"{tmp_path}/work/${{caller}}",
            http_port=0,
            oidc_issuer=idp.issuer,
            oidc_audience=AUDIENCE,
        )
        plan = plan_session(opts)
    assert plan.per_caller
    yield user, plan


def _places(plan: SessionPlan) -> list[str]:
    """Where a caller's servers may write, and work."""
    fs = plan.servers["filesystem"]
    assert fs.profile is not None
    return [plan.workspace, *fs.profile.writable, fs.cwd or ""]


def _made(base: SessionPlan, name: str) -> SessionPlan:
    """``name``'s plan once what its first call makes is there: its workspace, and its
    directory of ``allowWrite`` (one is mounted only when it is there)."""
    plan = plan_for_caller(base, Caller(name, frozenset()))
    sandbox = plan.servers["filesystem"].config.sandbox
    assert sandbox is not False
    for place in (plan.workspace, *sandbox.filesystem.allow_write):
        os.makedirs(place, exist_ok=True)
    return plan_for_caller(base, Caller(name, frozenset()))


def _outside(user: Home, place: str) -> bool:
    """``place`` is not in one of the directories that hold the callers' own."""
    return not any(inside(place, str(user.root / d)) for d in ("work", "shared"))


@pytest.mark.parametrize(("name", "reach"), ATTACKS)
def test_a_name_that_reads_as_a_path_stays_in_its_own_place(
    gateway: tuple[Home, SessionPlan], name: str, reach: str
) -> None:
    user, base = gateway
    victim = _made(base, VICTIM)
    attacker = _made(base, name)
    theirs = set(_places(victim))
    for place in _places(attacker):
        assert place not in theirs, (name, place)
        assert not _outside(user, place), place
        assert os.path.dirname(place) in (str(user.root / "work"), str(user.root / "shared"))


@pytest.mark.parametrize(("name", "reach"), ATTACKS)
def test_control_with_the_raw_name_the_attack_reaches(
    gateway: tuple[Home, SessionPlan], name: str, reach: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    user, base = gateway
    victim = _made(base, VICTIM)
    monkeypatch.setattr(Caller, "path_name", property(lambda caller: caller.name))
    attacker = plan_for_caller(base, Caller(name, frozenset()))
    places = _places(attacker)
    if reach == "the victim's":
        assert victim.workspace in places
    else:
        assert any(_outside(user, place) for place in places)
