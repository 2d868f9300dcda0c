"""A remote server that requires OAuth and the authorization server that issues its tokens
(tests/servers/oauth_server.py) in a subprocess on loopback, and the ``$BROWSER`` that
approves a login (tests/servers/approving_browser.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.home import Home
from tests.support.paths import TESTS

SERVER = TESTS / "servers" / "oauth_server.py"
BROWSER = TESTS / "servers" / "approving_browser.py"


@dataclass
class OAuthRemote:
    """A running OAuth-protected server: where it listens, and what it recorded (tokens it
    issued, calls that reached it with the bearer token each came with)."""

    port: int
    record: Path

    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/mcp"

    def events(self) -> list[dict[str, Any]]:
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]

    def grants(self) -> list[dict[str, Any]]:
        return [e for e in self.events() if "grant" in e]

    def registered(self) -> list[str]:
        """The client IDs it registered (dynamic registration)."""
        return [e["registered"] for e in self.events() if "registered" in e]

    def revoked(self) -> set[str]:
        """The tokens revoked at its revocation endpoint."""
        return {e["revoked"] for e in self.events() if "revoked" in e}

    def calls(self) -> list[dict[str, Any]]:
        return [e for e in self.events() if "tool" in e]

    def seen(self) -> list[str]:
        """The ``Authorization`` header of every request that reached it."""
        return [e["seen"] for e in self.events() if "seen" in e]

    def tokens(self) -> set[str]:
        """Every token it issued."""
        return {t for e in self.grants() for t in (e["access"], e["refresh"])}


@contextmanager
def oauth_server(
    record_dir: Path,
    port: int,
    lifetime: int,
    moved_to: str | None = None,
    host: str = "127.0.0.1",
    client: str = "",
    revoke: bool = True,
) -> Iterator[OAuthRemote]:
    """The server on ``port`` until the block ends; it records into ``record_dir`` (keep
    that outside the user's home and state: the record holds tokens in clear). With
    ``moved_to``, it names that authorization server instead of its own; ``client``
    (``ID:SECRET``) is a client registered with it beforehand; ``revoke`` false: it offers
    no revocation endpoint."""
    record = record_dir / f"oauth-{port}.jsonl"
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), str(port), str(record), str(lifetime)]
        + ([moved_to] if moved_to else []),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={
            **os.environ,
            "OAUTH_HOST": host,
            "OAUTH_CLIENT": client,
            "OAUTH_REVOKE": "1" if revoke else "0",
        },
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                err = proc.stderr.read().decode() if proc.stderr else ""
                raise RuntimeError(f"the OAuth server did not start: {err}")
            time.sleep(0.05)
        yield OAuthRemote(port, record, host)
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


def approving(user: Home) -> Home:
    """``user`` with a ``$BROWSER`` that approves every login (a program of its own: what
    ``$BROWSER`` names is run with the address as its one argument)."""
    program = user.root / "approving-browser"
    program.write_text(f'#!/bin/sh\nexec {sys.executable} {BROWSER} "$@"\n')
    program.chmod(0o755)
    user.env["BROWSER"] = str(program)
    return user


def files_holding(roots: list[Path], needles: set[str]) -> list[Path]:
    """Every file under ``roots`` whose bytes hold any of ``needles``."""
    found = []
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file() and not path.is_symlink():
                data = path.read_bytes()
                if any(n.encode() in data for n in needles):
                    found.append(path)
    return found
