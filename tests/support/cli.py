"""Running the ``ironcurtain`` command as a test's user."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.home import Home
from tests.support.paths import IRONCURTAIN


def ironcurtain(
    user: Home, *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``ironcurtain *args`` run to its end (at most a minute) in ``cwd`` (the user's root
    unless given), its output captured."""
    return subprocess.run(
        [IRONCURTAIN, *args],
        capture_output=True,
        text=True,
        env=user.env,
        cwd=user.root if cwd is None else cwd,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )


def run_args(config: Path, policy: Path, ws: Path, audit: Path) -> list[str]:
    """The usual `ironcurtain run` options of a test session."""
    return [
        "--config",
        str(config),
        "--policy-dir",
        str(policy),
        "--workspace",
        str(ws),
        "--audit-log",
        str(audit),
    ]
