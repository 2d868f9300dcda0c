"""The probe that tells, as a session starts, whether bwrap can sandbox here
(``launcher.host.machine.SandboxProbe``), with the real bwrap: ended at every moment of its
start, it leaves nothing running and never hangs. (The probe with a fake bwrap:
``tests/unit/cli/test_plan_errors.py``.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.marks import needs_bwrap


@needs_bwrap
def test_a_probe_ended_early_leaves_nothing_behind_and_never_hangs(tmp_path: Path) -> None:
    # The real bwrap, ended at every moment of its start: killed before its child in the new
    # namespaces is mapped, that child would wait for ever holding the probe's stderr, and
    # ending the probe (reading it to its end) would hang the session's start.
    code = (
        "import os, time\n"
        "from launcher.host.machine import SandboxProbe\n"
        "for i in range(1000):\n"
        "    with SandboxProbe(os.geteuid() == 0):\n"
        "        time.sleep((0, 0.0005, 0.002)[i % 3])\n"
    )
    ended = subprocess.run(
        [sys.executable, "-c", code], timeout=60, capture_output=True, text=True, check=False
    )
    assert ended.returncode == 0, ended.stderr
    left = subprocess.run(
        ["pgrep", "-f", "--", "--ro-bind / / -- true"], capture_output=True, text=True
    ).stdout.split()
    assert left == [], f"probes left running: {left}"
