"""The recent decisions of an audit log, for the approvals page: the last entries that went
to a human (those with an ``escalation``), read from the end of the file and never written.
Arguments stay as the log has them (hashed, unless the session logs them in clear)."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Collection
from typing import Any

TAIL = 256 * 1024  # bytes read from the end of a log


def _tail(path: str) -> bytes:
    """The last :data:`TAIL` bytes of the regular file ``path`` (its first, partial line
    left out); nothing when it is not one or cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return b""
        start = max(0, info.st_size - TAIL)
        data = os.pread(fd, TAIL, start)
    except OSError:
        return b""
    finally:
        os.close(fd)
    return data.split(b"\n", 1)[1] if start and b"\n" in data else data


def decisions(path: str, sessions: Collection[str], count: int) -> list[dict[str, Any]]:
    """The last ``count`` entries of the audit log ``path`` that a human decided (or that
    waited for one), of the ``sessions`` given, oldest first; lines that are not entries are
    passed over.

    >>> import tempfile
    >>> log = tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False)
    >>> _ = log.write('{"sessionId": "s", "escalation": "approved"}\\nnot json\\n'
    ...               '{"sessionId": "other", "escalation": "denied"}\\n{"sessionId": "s"}\\n')
    >>> log.close()
    >>> decisions(log.name, {"s"}, 10)
    [{'sessionId': 's', 'escalation': 'approved'}]
    >>> os.unlink(log.name)
    """
    found: list[dict[str, Any]] = []
    for line in _tail(path).splitlines():
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if (
            isinstance(entry, dict)
            and isinstance(entry.get("escalation"), str)
            and entry.get("sessionId") in sessions
        ):
            found.append(entry)
    return found[-count:]


def size(path: str) -> int:
    """The size of ``path`` (-1 when it cannot be had): a change means new entries."""
    try:
        return os.stat(path).st_size
    except OSError:
        return -1
