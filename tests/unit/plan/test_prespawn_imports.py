"""What ``ironcurtain run`` imports before its servers start is what starting them needs:
the argument scan's detectors and the session CA's date arithmetic load later (the scan with
the gate, the dates when a brokered server's CA is made), off the path to the first answer."""

from __future__ import annotations

import subprocess
import sys

import pytest

BEFORE_THE_SPAWN = (
    "launcher.cli.run",
    "launcher.plan.session_plan",
    "launcher.session.prestart",
    "launcher.host.seccomp_cache",
)
LATER = ("policy.argument_scan", "policy.secrets", "datetime")


def _loaded(then: str) -> list[str]:
    """Which of LATER a fresh interpreter holds after the imports before the spawn (and
    ``then``)."""
    program = (
        f"import sys; import {', '.join(BEFORE_THE_SPAWN)}; {then or 'pass'}; "
        f"print(' '.join(m for m in {LATER!r} if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", program], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.parametrize(
    ("then", "loaded"),
    [
        ("", []),
        # the controls: each is seen when something does load it
        ("import launcher.relay.gate.decide", ["policy.argument_scan", "policy.secrets"]),
        ("import datetime", ["datetime"]),
    ],
    ids=["before-the-spawn", "control-the-gate", "control-datetime"],
)
def test_what_the_spawn_does_not_need_is_not_imported_before_it(
    then: str, loaded: list[str]
) -> None:
    assert _loaded(then) == loaded
