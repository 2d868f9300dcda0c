"""``ironcurtain audit verify|tail``: thin skins over :mod:`launcher.audit`."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from launcher import dirs
from launcher.audit import describe, verify
from launcher.errors import UsageError


def find_log(path: str | None) -> Path:
    if path:
        found = Path(path).expanduser()
        if not found.is_file():
            raise UsageError(f"{path}: no such audit log")
        return found
    logs = sorted((dirs.state_dir() / "audit").glob("*.jsonl"), key=lambda p: p.stat().st_mtime)
    if not logs:
        raise UsageError(f"no audit logs in {dirs.state_dir() / 'audit'}; give a path")
    return logs[-1]


def verify_log(path: str | None) -> int:
    """0 when the chain holds, 1 at the first bad line (printed with what is wrong)."""
    log = find_log(path)
    with open(log, encoding="utf-8", errors="replace") as handle:
        count, problem = verify(line.rstrip("\n") for line in handle)
    if problem is None:
        print(f"{log}: ok, {count} entries, chain intact")
        return 0
    print(f"{log}: line {problem.line} {problem.what}")
    print(f"  ({count} entries before it are intact)")
    return 1


def tail_log(path: str | None, lines: int, follow: bool) -> None:
    log = find_log(path)
    with open(log, encoding="utf-8", errors="replace") as handle:
        for raw in handle.readlines()[-lines:] if lines > 0 else []:
            _show(raw)
        if not follow:
            return
        try:
            while True:
                raw = handle.readline()
                if raw:
                    _show(raw)
                    continue
                time.sleep(0.2)
                if not os.path.exists(log):
                    return
        except KeyboardInterrupt:
            return


def _show(raw: str) -> None:
    try:
        entry = json.loads(raw)
    except ValueError:
        print(f"(not an entry) {raw.rstrip()}")
        return
    print(describe(entry) if isinstance(entry, dict) else raw.rstrip(), flush=True)
