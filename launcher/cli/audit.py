"""``ironcurtain audit verify|tail``: thin skins over :mod:`launcher.audit.log`."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import psutil

from launcher.audit.read import describe, verify
from launcher.shared import dirs, rundir
from launcher.shared.shown import visible
from launcher.shared.user_errors import UsageError


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
    """0 when the chain holds and every session is sealed (or the last one still runs);
    1 at the first bad line (printed with what is wrong)."""
    log = find_log(path)
    with open(log, encoding="utf-8", errors="replace") as handle:
        count, problem = verify(line.rstrip("\n") for line in handle)
    if problem is None:
        print(f"{log}: ok, {count} entries, chain intact, every session sealed")
        return 0
    # Still written to: the last session (for an empty log, the one its name names).
    session = problem.unsealed if problem.line else log.stem if count == 0 else None
    pid = running_session(session) if session is not None else None
    if pid is not None:
        print(
            f"{log}: ok so far, {count} entries, chain intact; session "
            f"{session} is still running (pid {pid}): it seals its entries when it ends"
        )
        return 0
    where = f"line {problem.line} " if problem.line else ""
    print(visible(f"{log}: {where}{problem.what}", one_line=True))
    if problem.unsealed is None:
        print(f"  ({count} entries before it are intact)")
    else:
        print(f"  ({count} entries are intact as far as they go)")
    return 1


_SESSION_ID = re.compile(r"\d{8}-\d{6}-[0-9a-f]{6}")


def running_session(session: str) -> int | None:
    """The pid of ``session``'s launcher while it runs: its runtime directory (this user's)
    names it, and that process started before it wrote there and runs ``ironcurtain``."""
    if not _SESSION_ID.fullmatch(session):
        return None
    for pid_file in rundir.find(session, rundir.PID_FILE):
        try:
            written = os.stat(pid_file)
            if written.st_uid != os.getuid():
                continue
            with open(pid_file, encoding="utf-8") as handle:
                process = psutil.Process(int(handle.read().strip()))
            started, argv = process.create_time(), process.cmdline()
        except (OSError, ValueError, psutil.Error):
            continue
        launcher = any(os.path.basename(a) == "ironcurtain" for a in argv) and "run" in argv
        if launcher and started <= written.st_mtime + 1:  # not a later process with its pid
            return int(process.pid)
    return None


def tail_log(path: str | None, lines: int, follow: bool, caller: str | None = None) -> None:
    """The last ``lines`` entries, then (``follow``) each new one; with ``caller``, only
    the entries that name the caller of that name."""
    log = find_log(path)
    with open(log, encoding="utf-8", errors="replace") as handle:
        chosen = [raw for raw in handle.readlines() if _by(raw, caller)]
        for raw in chosen[-lines:] if lines > 0 else []:
            _show(raw)
        if not follow:
            return
        try:
            while True:
                raw = handle.readline()
                if raw:
                    if _by(raw, caller):
                        _show(raw)
                    continue
                time.sleep(0.2)
                if not os.path.exists(log):
                    return
        except KeyboardInterrupt:
            return


def _by(raw: str, caller: str | None) -> bool:
    """Whether the entry ``raw`` is one to show: any, or one that names ``caller``."""
    if caller is None:
        return True
    if f'"name":{json.dumps(caller, ensure_ascii=False)}' not in raw:
        return False  # most lines are not read further
    try:
        entry = json.loads(raw)
    except ValueError:
        return False
    named = entry.get("caller") if isinstance(entry, dict) else None
    return isinstance(named, dict) and named.get("name") == caller


def _show(raw: str) -> None:
    """One entry, readably; what a server or client put in it cannot drive the terminal."""
    try:
        entry = json.loads(raw)
    except ValueError:
        print(visible(f"(not an entry) {raw.rstrip()}", one_line=True), flush=True)
        return
    line = describe(entry) if isinstance(entry, dict) else raw.rstrip()
    print(visible(line, one_line=True), flush=True)
