"""Reading an audit log: checking its chain (``audit verify``) and showing its entries
(``audit tail``), safely for a terminal."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from launcher.audit.log import GENESIS, SESSION_END, entry_hash
from sandbox_profiles.records import frozen


@frozen
class Problem:
    """What ``audit verify`` found wrong, and on which line."""

    line: int  # 1-based; 0: the log as a whole
    what: str
    unsealed: str | None = None  # the last session's id, when all that is wrong is its end


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys all differ (of a key given twice, readers differ on which
    value counts: the hash covers one, a reader may show the other)."""
    entry = dict(pairs)
    if len(entry) != len(pairs):
        keys = [key for key, _ in pairs]
        raise _DuplicateKey(next(key for key in keys if keys.count(key) > 1))
    return entry


def _intact_entry(raw: str) -> tuple[dict[str, Any] | None, str]:
    """(one line's entry, "") when it is a chained entry as it was written, else (None, what
    is wrong with it)."""
    if not raw.strip():
        return None, "an empty line"
    try:
        entry = json.loads(raw, object_pairs_hook=_unique_keys)
    except _DuplicateKey as twice:
        key = json.dumps(twice.args[0])
        return None, f"has the key {key} twice (which value counts?)"
    except ValueError:
        return None, "not a JSON entry"
    if not isinstance(entry, dict) or "hash" not in entry or "prev" not in entry:
        return None, "not a chained audit entry (no hash or prev)"
    try:
        intact = entry_hash(entry) == entry["hash"]
    except ValueError:  # a lone surrogate: no entry the launcher writes holds one
        return None, "holds a string with no UTF-8 form (a lone surrogate)"
    if not intact:
        return None, "was changed after it was written (its hash differs)"
    return entry, ""


def _out_of_place(
    number: int, entry: Mapping[str, Any], prev: object, session: object, since: int
) -> str:
    """What is wrong with where an intact entry stands in the chain ("" when nothing)."""
    if entry["prev"] != prev:
        return (
            "does not follow the line before it: a line was removed, inserted or moved here"
            if number > 1
            else "is not the first entry of its log: lines were removed before it"
        )
    if since and entry.get("sessionId") != session:
        return (
            f"starts session {entry.get('sessionId')} but session {session} has no "
            "session-end entry: its last lines were removed, or its launcher was killed"
        )
    return ""


def verify(lines: Iterator[str] | list[str]) -> tuple[int, Problem | None]:
    """(entries checked, session-end entries not counted; the first problem or None).

    Each session's entries must end with its ``session-end`` entry, counting them; the
    last session's missing one is a :class:`Problem` with ``unsealed`` set (truncated, or
    the session is still writing).

    >>> verify([])[1].what
    'has no entries: every line was removed, or its session has written none yet'
    """
    prev = GENESIS
    count = 0
    session: object = None  # the session of the entries since the last session-end
    since = 0  # how many entries it has written so far
    number = 0
    for number, raw in enumerate(lines, 1):
        entry, what = _intact_entry(raw)
        if entry is None:
            return count, Problem(number, what)
        what = _out_of_place(number, entry, prev, session, since)
        if what:
            return count, Problem(number, what)
        session = entry.get("sessionId")
        if entry.get("event") == SESSION_END:
            if entry.get("entries") != since:
                return count, Problem(
                    number,
                    f"ends session {session} with {entry.get('entries')} entries, but "
                    f"{since} precede it: lines were removed or added",
                )
            since = 0
        else:
            since += 1
            count += 1
        prev = entry["hash"]
    if number == 0:
        return count, Problem(
            0, "has no entries: every line was removed, or its session has written none yet"
        )
    if since:
        return count, Problem(
            number,
            f"is the last and session {session} has no session-end entry: the log was "
            "truncated (its last lines removed), or it is still being written",
            unsealed=str(session),
        )
    return count, None


def describe(entry: Mapping[str, Any]) -> str:
    """One readable line for ``audit tail``."""
    when = str(entry.get("time", ""))[11:23]
    if entry.get("event"):
        rest = {k: v for k, v in entry.items() if k not in ("time", "sessionId", "prev", "hash")}
        detail = " ".join(f"{k}={v}" for k, v in rest.items() if k != "event")
        return f"{when}  {str(entry['event']).upper():<10} {detail}"
    policy = entry.get("policy") or {}
    decision = str(policy.get("decision", "?"))
    mark = {"allow": "allow", "deny": "DENY", "escalate": "ESCALATE"}.get(decision, decision)
    line = (
        f"{when}  {mark:<10} {entry.get('server')}/{entry.get('tool')}  "
        f"-> {entry.get('result')} ({entry.get('durationMs')} ms)  rule={policy.get('rule')}"
    )
    missing = policy.get("missing")
    if isinstance(missing, list):  # what the caller lacked (permissions.json)
        line += f"  missing={','.join(map(str, missing))}"
    if not entry.get("sandboxed", True):
        line += "  UNSANDBOXED"
    caller = entry.get("caller")
    if isinstance(caller, dict):
        issuer = caller.get("issuer")
        line += f"  caller={caller.get('name')}" + (f" ({issuer})" if issuer != "static" else "")
    return line
