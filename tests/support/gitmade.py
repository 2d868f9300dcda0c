"""Helpers for the tests of what git lays down in a repository a server makes: a guard
settled as a session settles it (whenever its inotify descriptor has events), the host's
git run as the user runs it, and a hook that leaves a marker when anything runs it."""

from __future__ import annotations

import os
import select
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from launcher.guard.watch import Guard, GuardFailure, Quarantined

IDENTITY = {
    "GIT_AUTHOR_NAME": "u",
    "GIT_AUTHOR_EMAIL": "u@example.com",
    "GIT_COMMITTER_NAME": "u",
    "GIT_COMMITTER_EMAIL": "u@example.com",
}


def host_env(home: Path) -> dict[str, str]:
    """The user's environment for git: a home of its own, no system configuration."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "LANG": "C",
        **IDENTITY,
    }


def git(cwd: Path, *args: str, env: dict[str, str] | None = None, check: bool = True) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if check and done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)}: {done.stderr}")
    return done.stdout + done.stderr


def marker_script(path: Path, marker: Path) -> Path:
    """An executable at ``path`` that leaves ``marker`` when run."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # One descriptor: the guard may move the file out while it is being written.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o755)
    try:
        os.write(fd, f"#!/bin/sh\necho ran >> '{marker}'\n".encode())
        os.fchmod(fd, 0o755)
    finally:
        os.close(fd)
    return path


def bare_repo(where: Path) -> Path:
    """A bare repository at ``where`` with one commit on ``main`` (a file, README.md)."""
    src = where.parent / (where.name + "-src")
    env = host_env(where.parent)
    subprocess.run(["git", "init", "-q", "-b", "main", str(src)], check=True, env=env)
    (src / "README.md").write_text("hello\n")
    git(src, "add", "README.md", env=env)
    git(src, "commit", "-qm", "first", env=env)
    git(where.parent, "clone", "-q", "--bare", str(src), str(where), env=env)
    return where


class Watched:
    """A guard over a workspace, settled as a session settles it."""

    def __init__(self, guard: Guard | None) -> None:
        self.guard = guard
        self.moved: list[Quarantined] = []
        self.failures: list[GuardFailure] = []
        self.lock = threading.Lock()

    def returned(self) -> None:
        """The call returns: the session settles the guard first."""
        if self.guard is not None:
            with self.lock:
                self.guard.settle()

    def paths(self, ws: Path) -> set[str]:
        return {Path(r.path).relative_to(ws).as_posix() for r in self.moved}


@contextmanager
def settled(ws: Path, quarantine: Path, on: bool = True) -> Iterator[Watched]:
    """A guard over ``ws`` settled whenever it has events, as a session's is (with no
    guard at all when ``on`` is false: the control); its sweep at the end."""
    if not on:
        yield Watched(None)
        return
    watched = Watched(None)
    guard = Guard([str(ws)], [], str(quarantine), watched.moved.append, watched.failures.append)
    watched.guard = guard
    guard.start()
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            ready, _, _ = select.select([guard.fd], [], [], 0.05)
            if ready:
                watched.returned()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield watched
    finally:
        stop.set()
        thread.join()
        guard.settle()
        guard.sweep()
        guard.close()
