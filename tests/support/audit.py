"""Reading the audit logs a test session wrote."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def audit_entries(path: Path) -> list[dict[str, Any]]:
    """The log's entries, without the sealed end each session writes."""
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    return [e for e in entries if e.get("event") != "session-end"]
