"""Programs that stand in for real ones on a test user's PATH."""

from __future__ import annotations

from pathlib import Path

from tests.support.home import Home

# A bwrap that reports its version but cannot create a sandbox (as where user namespaces
# are off).
FAILING_BWRAP = (
    'case "$1" in --version) echo "bubblewrap 0.8.0";; *) '
    'echo "bwrap: setting up uid map: Permission denied" >&2; exit 1;; esac\n'
)


def fake_bin(user: Home, name: str, script: str) -> Path:
    """A directory (made once per user) holding a shell script ``name`` that runs ``script``:
    put it first on the user's PATH to stand in for a program."""
    bin_dir = user.root / "fake-bin"
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | 0o100)
    return bin_dir
