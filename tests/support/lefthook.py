"""The user's lefthook (from the virtual environment, else the PATH) and git, as the
autorun attacks set up the user's repositories."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

LEFTHOOK = shutil.which("lefthook", path=os.path.dirname(sys.executable)) or shutil.which(
    "lefthook"
)
LEFTHOOK_MISSING = "lefthook is not installed: scripts/install.sh --dev installs it (PyPI lefthook)"


def user_git(*args: str, cwd: Path) -> None:
    """git as the user sets up their repositories (its own identity, branch ``main``)."""
    ident = ["-c", "user.name=u", "-c", "user.email=u@x", "-c", "init.defaultBranch=main"]
    subprocess.run(["git", *ident, *args], cwd=cwd, check=True, capture_output=True)


def lefthook_path() -> str:
    """The PATH with lefthook's directory first."""
    return f"{os.path.dirname(LEFTHOOK or '/')}:{os.environ.get('PATH', '/usr/bin:/bin')}"
