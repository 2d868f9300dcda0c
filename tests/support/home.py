"""An isolated user for one test: its own HOME and XDG directories, a secret SSH key."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.paths import BIN


@dataclass
class Home:
    """An isolated user: HOME, XDG dirs, a secret SSH key, and the environment to run with."""

    root: Path
    home: Path
    state: Path
    config: Path
    env: dict[str, str]
    secret: str

    def left_behind(self) -> list[Path]:
        """What sessions made in ironcurtain's state directory (workspaces, audit logs,
        records), leaving out the validated files kept across starts (``cache/``, which a
        failed start may well have written): nothing when nothing was started."""
        state = self.state / "ironcurtain"
        if not state.exists():
            return []
        return [p for p in state.rglob("*") if p.relative_to(state).parts[0] != "cache"]

    def enter(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Be this user in the test's own process (its HOME and XDG directories), for code
        called in process rather than through ``ironcurtain``."""
        for key, value in self.env.items():
            monkeypatch.setenv(key, value)

    def ws(self, name: str = "ws") -> Path:
        path = self.root / name
        path.mkdir(exist_ok=True)
        return path


_RUN_BASE: list[str] = []


def short_run_dir() -> Path:
    """A runtime directory of this test's own (``$XDG_RUNTIME_DIR``), short enough that a
    session's sockets fit in it: its sessions are never made in the shared ``/tmp``, so a
    test that looks for sessions finds its own, not those of another test run (or another
    worker of this one) on the same machine. Removed when the test process ends."""
    if not _RUN_BASE:
        _RUN_BASE.append(tempfile.mkdtemp(prefix=f"icr{os.getpid()}-", dir="/tmp"))
        atexit.register(shutil.rmtree, _RUN_BASE[0], True)
    return Path(tempfile.mkdtemp(prefix="", dir=_RUN_BASE[0]))


def make_home(tmp_path: Path) -> Home:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    secret = "SECRET-KEY-" + os.urandom(8).hex()
    (home / ".ssh" / "id_rsa").write_text(secret)
    state = tmp_path / "state"
    config = tmp_path / "xdg-config"
    env = {
        "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(home),
        "XDG_STATE_HOME": str(state),
        "XDG_CONFIG_HOME": str(config),
        "LANG": "C.UTF-8",
        "CALLER_SECRET_TOKEN": secret,
        "XDG_RUNTIME_DIR": str(short_run_dir()),
    }
    return Home(tmp_path, home, state, config, env, secret)


def git_repo(ws: Path) -> None:
    """Make ``ws`` a git repository with one file, README.md."""
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    (ws / "README.md").write_text("hello\n")


def in_process(user: Home, monkeypatch: pytest.MonkeyPatch) -> Home:
    """``user``, for commands run in this process: its XDG directories (state, config, a
    cache of its own) and no real API key."""
    for key in ("XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_RUNTIME_DIR"):
        monkeypatch.setenv(key, user.env[key])
    monkeypatch.setenv("XDG_CACHE_HOME", str(user.root / "cache"))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    return user
