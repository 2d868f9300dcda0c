"""``ironcurtain approvals --list`` and ``--revoke ID``: the pattern approvals in force in
this user's running sessions (or one), and taking one back."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from launcher.shared import rundir
from launcher.shared.shown import visible
from launcher.shared.user_errors import UsageError
from launcher.transports.approvals.client import MAX_LINE, connect, session_of
from launcher.transports.approvals.session_socket import PATTERNS_SOCKET


def _sockets(session: str | None) -> list[str]:
    if session is not None:
        found = rundir.find(session, PATTERNS_SOCKET)
        if not found:
            raise UsageError(
                f"no approvals socket for session {session} in {rundir.bases()[0]}: "
                "is `ironcurtain run` running (with --approval auto or socket) as this user?"
            )
        return found
    return [
        path for d in rundir.serving() if os.path.exists(path := os.path.join(d, PATTERNS_SOCKET))
    ]


def _ask(path: str, request: dict[str, Any]) -> dict[str, Any] | None:
    """The session's answer to ``request`` on its socket ``path`` (None: it gave none)."""
    if rundir.doubt(path):
        return None
    try:
        sock = connect(path)
    except OSError:
        return None
    with sock:
        sock.sendall(json.dumps(request).encode() + b"\n")
        buffer = b""
        while len(buffer) <= MAX_LINE:
            try:
                chunk = sock.recv(65536)
            except OSError:
                return None
            if not chunk:
                return None
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                if isinstance(message, dict) and message.get("type") in (
                    "patterns",
                    "revoked",
                    "error",
                ):
                    return message
    return None


def _failed(path: str, answer: dict[str, Any]) -> None:
    """A session's error (its shared state cannot be reached), said on stderr."""
    error = visible(str(answer.get("error")), one_line=True)
    print(f"ironcurtain: session {session_of(path)}: {error}", file=sys.stderr)


def list_patterns(session: str | None) -> int:
    """Print every pattern approval in force, by session (one kept in a state several
    sessions share is printed once): 1 when a session could not say."""
    shown: set[str] = set()
    failed = False
    for path in _sockets(session):
        answer = _ask(path, {"type": "patterns"})
        if answer is not None and answer.get("type") == "error":
            _failed(path, answer)
            failed = True
        if answer is None or answer.get("type") != "patterns":
            continue
        for entry in answer.get("patterns") or []:
            if str(entry.get("id")) in shown:
                continue
            issuer, _, name = str(entry.get("owner") or "").partition("\0")
            whose = f"  caller {name} ({issuer})" if issuer or name else ""
            line = (
                f"{entry.get('id')}  session {session_of(path)}{whose}  given "
                f"{entry.get('givenAt')}: {entry.get('text')}"
            )
            print(visible(line, one_line=True))
            shown.add(str(entry.get("id")))
    if not shown and not failed:
        print("no pattern approvals in force")
    return 1 if failed else 0


def revoke_pattern(pid: str, session: str | None) -> int:
    """Revoke the pattern ``pid`` in whichever running session holds it (held in a state
    several sessions share, it is revoked for all of them)."""
    failed = False
    for path in _sockets(session):
        answer = _ask(path, {"type": "revoke", "id": pid})
        if answer is not None and answer.get("type") == "error":
            _failed(path, answer)
            failed = True
        if answer is not None and answer.get("type") == "revoked" and answer.get("pattern"):
            text = visible(str(answer["pattern"].get("text")), one_line=True)
            print(f"revoked {visible(pid, one_line=True)} in session {session_of(path)}: {text}")
            return 0
    if failed:
        return 1
    raise UsageError(
        f"--revoke {visible(pid, one_line=True)}: no running session of yours holds that "
        "pattern approval (see ironcurtain approvals --list)"
    )
