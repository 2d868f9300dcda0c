"""``ironcurtain approvals``: answer a running session's escalations in a terminal."""

from __future__ import annotations

import json
import os
import socket
import sys

from launcher.relay.approval import APPROVE, APPROVE_SESSION, DENY
from launcher.shared import rundir
from launcher.shared.errors import UsageError
from launcher.shared.shown import visible
from launcher.transports.approvals_socket import APPROVALS_SOCKET

_KEYS = {"a": APPROVE, "s": APPROVE_SESSION, "d": DENY}


def find_socket(session: str | None) -> str:
    """The approvals socket of ``session``, else of this user's newest running session
    (a session killed without its clean-up leaves a socket nobody answers: skipped)."""
    for path in rundir.find(session, APPROVALS_SOCKET):
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
        except OSError:
            continue
        finally:
            probe.close()
        return path
    what = f"session {session}" if session else "any running session"
    raise UsageError(
        f"no approvals socket for {what} in {rundir.bases()[0]}: "
        "is `ironcurtain run` running "
        "(with --approval auto or socket) as this user?"
    )


def _ask(message: dict[str, object]) -> str:
    args = json.dumps(message.get("arguments"), indent=2, ensure_ascii=False, sort_keys=True)
    # Which call, then whose request it is in words (the session's); names on one line.
    said = f": {message['question']}" if message.get("question") else ""
    head = visible(
        f"{message.get('server')}/{message.get('tool')} needs your approval{said}", one_line=True
    )
    rule = visible(f"rule {message.get('rule')}: {message.get('reason')}", one_line=True)
    caller = message.get("caller")
    asker = (
        visible(f"asked by caller {caller.get('name')} ({caller.get('issuer')})", one_line=True)
        if isinstance(caller, dict)
        else ""
    )
    text = (
        f"\n{head}\n"
        + (f"  {asker}\n" if asker else "")
        + f"  {rule}\n"
        + (f"  {visible(str(message['grant']), one_line=True)}\n" if message.get("grant") else "")
        + f"  arguments: {visible(args)}"
    )
    print(text, flush=True)  # what would act on the terminal shown as escapes
    while True:
        print("[a]pprove, approve for this [s]ession, [d]eny? ", end="", flush=True)
        line = sys.stdin.readline()
        if not line:
            raise EOFError
        choice = line.strip().lower()[:1]
        if choice in _KEYS:
            return _KEYS[choice]


def attach(session: str | None) -> int:
    path = find_socket(session)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError as exc:
        raise UsageError(f"{path}: cannot attach: {exc.strerror}") from None
    stream = sock.makefile("rwb", buffering=0)
    try:
        for raw in stream:
            message = json.loads(raw)
            if message.get("type") == "attached":
                # Said only once the session counts this terminal in: from now on its
                # escalations come here.
                print(
                    f"ironcurtain approvals: attached to {os.path.dirname(path)}; "
                    "waiting (Ctrl-C leaves)",
                    flush=True,
                )
            if message.get("type") != "request":
                continue
            answer = _ask(message)
            stream.write(
                json.dumps({"type": "answer", "id": message["id"], "answer": answer}).encode()
                + b"\n"
            )
            print(f"  -> {answer}", flush=True)
    except (EOFError, KeyboardInterrupt):
        return 0
    finally:
        sock.close()
    print("ironcurtain approvals: the session ended")
    return 0
