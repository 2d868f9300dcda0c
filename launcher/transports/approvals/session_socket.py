"""The approvals socket: where ``ironcurtain approvals`` terminals attach and answer the
session's escalations, a unix socket in the session's owner-only runtime directory."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
from collections.abc import Sequence
from typing import Any

APPROVALS_SOCKET = "approvals.sock"  # in the session's runtime directory


class ApprovalsSocket:
    """The approvals socket: ``ironcurtain approvals`` terminals attach and answer.

    JSON lines. To a terminal: ``{"type": "attached", "servers", "auditLog"}`` (the
    session's servers, and its audit log's path, for the approvals page's recent decisions)
    once it counts as attached (from then on escalations go to it), ``{"type": "request",
    "id", "server", "tool", "arguments", "rule", "reason", "question"}`` (``question``: whose
    request it is and what it asks, in words) for every question open now or later, and
    ``{"type": "closed", "id"}`` once it is answered anywhere or given up. From a terminal:
    ``{"type": "answer", "id", "answer"}``. The first answer counts; an answer to an
    unknown (old) id is ignored.
    """

    def __init__(self, path: str, servers: Sequence[str] = (), audit_log: str = "") -> None:
        self.path = path
        hello = {"type": "attached", "servers": list(servers), "auditLog": audit_log}
        self._hello = json.dumps(hello).encode() + b"\n"
        self._server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._open: dict[str, tuple[dict[str, Any], asyncio.Future[str]]] = {}
        self._ids = itertools.count(1)

    @property
    def attached(self) -> bool:
        return bool(self._writers)

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(self._terminal, path=self.path)
        os.chmod(self.path, 0o600)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)

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
