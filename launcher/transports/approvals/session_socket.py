"""The approvals socket: where ``ironcurtain approvals`` terminals attach and answer the
session's escalations, a unix socket in the session's owner-only runtime directory."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
from collections.abc import Callable, Sequence
from typing import Any

APPROVALS_SOCKET = "approvals.sock"  # in the session's runtime directory
PATTERNS_SOCKET = "patterns.sock"  # beside it: where pattern approvals are listed and revoked


class ApprovalsSocket:
    """The approvals socket: ``ironcurtain approvals`` terminals attach and answer.

    JSON lines. To a terminal: ``{"type": "attached", "servers", "auditLog"}`` (the
    session's servers, and its audit log's path, for the approvals page's recent decisions)
    once it counts as attached (from then on escalations go to it), ``{"type": "request",
    "id", "server", "tool", "arguments", "rule", "reason", "question"}`` (``question``: whose
    request it is and what it asks, in words) for every question open now or later, and
    ``{"type": "closed", "id"}`` once it is answered anywhere or given up. From a terminal:
    ``{"type": "answer", "id", "answer"}``. The first answer counts; an answer to an
    unknown (old) id is ignored. A question may offer patterns (``"patterns": [{"answer",
    "text"}]``): answering with one's ``answer`` gives that pattern.

    Beside it, on a socket of its own (:data:`PATTERNS_SOCKET`, so that a lister never
    counts as an attached terminal), the pattern approvals in force are listed
    (``{"type": "patterns"}`` answered with ``{"type": "patterns", "patterns": [...]}``) and
    revoked (``{"type": "revoke", "id"}`` answered with ``{"type": "revoked", "id",
    "pattern"}``, ``pattern`` null when there was none) by :attr:`control`.
    """

    def __init__(self, path: str, servers: Sequence[str] = (), audit_log: str = "") -> None:
        self.path = path
        hello = {"type": "attached", "servers": list(servers), "auditLog": audit_log}
        self._hello = json.dumps(hello).encode() + b"\n"
        self._server: asyncio.AbstractServer | None = None
        self._listers: asyncio.AbstractServer | None = None
        self.patterns_path = os.path.join(os.path.dirname(path), PATTERNS_SOCKET)
        self._writers: set[asyncio.StreamWriter] = set()
        self._open: dict[str, tuple[dict[str, Any], asyncio.Future[str]]] = {}
        self._ids = itertools.count(1)
        # Answers a lister's request (the session sets it); None: patterns are not kept.
        self.control: Callable[[dict[str, Any]], dict[str, Any]] | None = None

    @property
    def attached(self) -> bool:
        return bool(self._writers)

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(self._terminal, path=self.path)
        os.chmod(self.path, 0o600)
        self._listers = await asyncio.start_unix_server(self._lister, path=self.patterns_path)
        os.chmod(self.patterns_path, 0o600)

    async def stop(self) -> None:
        for server in (self._server, self._listers):
            if server is not None:
                server.close()
        for writer in list(self._writers):
            writer.close()
        for path in (self.path, self.patterns_path):
            with contextlib.suppress(OSError):
                os.unlink(path)

    async def ask(self, question: dict[str, Any], timeout: float) -> str:
        """The answer to ``question`` (TimeoutError when none comes in time)."""
        qid = f"q{next(self._ids)}"
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        message = {"type": "request", "id": qid, **question}
        self._open[qid] = (message, future)
        self._broadcast(message)
        try:
            return await asyncio.wait_for(future, timeout)
        finally:
            self._open.pop(qid, None)
            self._broadcast({"type": "closed", "id": qid})

    def _broadcast(self, message: dict[str, Any]) -> None:
        data = json.dumps(message).encode() + b"\n"
        for writer in list(self._writers):
            try:
                writer.write(data)
            except (OSError, RuntimeError):
                self._writers.discard(writer)

    async def _lister(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A lister of pattern approvals: each request line answered on one line."""
        try:
            while line := await reader.readline():
                try:
                    request = json.loads(line)
                except (ValueError, RecursionError):
                    continue
                if isinstance(request, dict) and request.get("type") in ("patterns", "revoke"):
                    writer.write(json.dumps(self._controlled(request)).encode() + b"\n")
        except (OSError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    def _controlled(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.control is None:
            return {"type": "error", "error": "this session keeps no pattern approvals"}
        try:
            return self.control(request)
        except Exception as exc:  # the lister is told; the session goes on
            return {"type": "error", "error": str(exc)}

    async def _terminal(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            writer.write(self._hello)
            for message, _ in list(self._open.values()):
                writer.write(json.dumps(message).encode() + b"\n")
            while line := await reader.readline():
                try:
                    answer = json.loads(line)
                except (ValueError, RecursionError):
                    continue
                if not isinstance(answer, dict) or answer.get("type") != "answer":
                    continue
                entry = self._open.get(str(answer.get("id")))
                if entry is not None and not entry[1].done():
                    entry[1].set_result(str(answer.get("answer")))
        except (OSError, ConnectionError):
            pass
        except asyncio.CancelledError:
            # The session is ending. Returning (not re-raising) keeps Python 3.11's stream
            # server from printing the cancelled handler as an error on the way out.
            pass
        finally:
            self._writers.discard(writer)
            writer.close()
