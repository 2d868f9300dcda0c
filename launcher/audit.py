"""The audit log: one JSON line per call (SPEC §8). Arguments hashed unless told otherwise."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Mapping
from typing import Any


def hash_value(value: object) -> str:
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def hashed_arguments(args: Mapping[str, object]) -> dict[str, str]:
    """Each argument as ``sha256:<hex>`` of its canonical JSON.

    >>> hashed_arguments({"a": 1})["a"][:15]
    'sha256:6b86b273'
    """
    return {key: hash_value(value) for key, value in args.items()}


class AuditLog:
    """Append-only JSONL writer. Once a write fails it stays failed: the session must deny."""

    def __init__(self, path: str, session_id: str) -> None:
        self.path = path
        self.session_id = session_id
        self.error: str | None = None
        os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._file = os.fdopen(fd, "a", encoding="utf-8", buffering=1)

    @property
    def healthy(self) -> bool:
        return self.error is None

    def write(self, entry: dict[str, Any]) -> bool:
        if self.error is not None:
            return False
        now = time.time()
        record = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
            + f".{int(now * 1000) % 1000:03d}Z",
            "sessionId": self.session_id,
            **entry,
        }
        try:
            self._file.write(json.dumps(record, ensure_ascii=False) + "\n")
            self._file.flush()
        except (OSError, ValueError) as exc:
            self.error = str(exc)
            return False
        return True

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._file.close()
