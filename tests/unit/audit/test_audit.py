"""The audit log's hash chain, ``audit verify`` and ``tail``. (A log that disappears during a
session, and ``--audit-args clear``: ``tests/sandbox/test_audit_sessions.py``.)"""

from __future__ import annotations

import hashlib
import http
import json
from pathlib import Path

import pytest

from launcher.audit.log import AuditLog
from launcher.audit.read import verify
from tests.support.cli import ironcurtain
from tests.support.home import Home


def _log(path: Path, entries: int) -> list[str]:
    log = AuditLog(str(path), "s1")
    for i in range(entries):
        log.write({"requestId": i, "server": "time", "tool": "t", "result": "success"})
    log.close()
    return path.read_text().splitlines()


def test_a_log_verifies_and_continues_its_chain_across_sessions(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    _log(path, 3)
    _log(path, 2)  # a second session appending to the same file
    assert verify(path.read_text().splitlines()) == (5, None)


ODD_ENTRY = {
    "requestId": "r-1",
    "server": "filesystem",
    "tool": "write_file",
    "arguments": {"path": "sha256:ab", "content": 'naïve \u2028 "quoted"\n'},
    "policy": {"decision": "allow", "rule": "r", "reason": "z before a", "extra": [1, 2.5]},
    "escalation": None,
    # Bare scalars at the top level are written without the encoder: the same text all the
    # same (an int of any size or sign, both booleans, an int's subclass left to it).
    "sandboxed": True,
    "stale": False,
    "big": -(2**70),
    "code": http.HTTPStatus.OK,
    "a": 0,
    "a!": 1,  # sorts after "a" as a key, before it once quoted: the order must be the keys'
    "whitelisted": {"b": 1, "a": 2},
    # A string at the top level is quoted without the encoder: the same text all the same.
    "note": 'tab\t ctrl\x01 "q" \\ \u2028 \u00e9 \U0001f600 \x7f',
}


@pytest.mark.parametrize("value", ["", "plain", 'a "q" \\ \n\x00 \u2028 \u00e9 \U0001f600'])
def test_a_string_argument_hashes_as_its_canonical_json(value: str) -> None:
    from launcher.audit.log import hash_value

    text = json.dumps(value, ensure_ascii=False).encode()
    assert hash_value(value) == "sha256:" + hashlib.sha256(text).hexdigest()


def test_an_entry_serialised_while_the_call_is_out_is_the_same_canonical_line(
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.jsonl"
    log = AuditLog(str(path), "s1")
    log.write({**ODD_ENTRY, "result": "success", "durationMs": 1.25})
    log.write({"result": "success", "durationMs": 1.25}, log.prepare(ODD_ENTRY))
    late = ("result", "durationMs", "zzz")
    log.write(
        {"result": "server-exited", "durationMs": 0.1, "zzz": 'a \\ "b" \u00e9'},
        log.prepare(ODD_ENTRY, late),
    )
    log.write({"result": "success", "durationMs": 3.0}, log.prepare(ODD_ENTRY, late))  # no zzz
    log.close()
    # Split on newlines only: a clear argument may hold U+2028, which splitlines() splits on
    # but JSON (and `audit verify`, reading the file line by line) leaves inside the line.
    lines = path.read_text(encoding="utf-8").rstrip("\n").split("\n")
    assert verify(lines) == (4, None)
    entries = [json.loads(line) for line in lines]
    first, second = entries[:2]
    assert entries[2]["zzz"] == 'a \\ "b" \u00e9' and "zzz" not in entries[3]
    for line, entry in zip(lines, entries, strict=True):
        # Each line is the canonical form of its entry, with its hash appended last.
        body = {k: v for k, v in entry.items() if k != "hash"}
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert line == canonical[:-1] + f',"hash":"{entry["hash"]}"}}'
    strip = ("time", "prev", "hash")
    assert {k: v for k, v in first.items() if k not in strip} == {
        k: v for k, v in second.items() if k not in strip
    }


def _edit(lines: list[str]) -> list[str]:
    entry = json.loads(lines[2])
    entry["result"] = "denied"
    return [*lines[:2], json.dumps(entry), *lines[3:]]


def _forge(lines: list[str]) -> list[str]:
    # A careful forger chains the new entry to line 2 and gives it a self-consistent hash;
    # without rewriting every later line, the next one no longer follows.
    from launcher.audit.log import entry_hash

    entry = json.loads(lines[1])
    entry["tool"] = "rm_everything"
    entry["prev"] = json.loads(lines[1])["hash"]
    entry["hash"] = entry_hash(entry)
    return [*lines[:2], json.dumps(entry), *lines[2:]]


TAMPERING = [
    ("edit", _edit, 3, "was changed"),
    ("delete", lambda ls: [*ls[:1], *ls[2:]], 2, "does not follow"),
    ("insert", lambda ls: [*ls[:2], ls[0], *ls[2:]], 3, "does not follow"),
    ("forged insert", _forge, 4, "does not follow"),
    ("reorder", lambda ls: [ls[0], ls[2], ls[1], *ls[3:]], 2, "does not follow"),
    ("cut the head", lambda ls: ls[1:], 1, "is not the first entry"),
]


@pytest.mark.parametrize(
    ("how", "tamper", "line", "what"), TAMPERING, ids=[t[0] for t in TAMPERING]
)
def test_verify_names_the_first_bad_line(
    user: Home, how: str, tamper: object, line: int, what: str
) -> None:
    path = user.root / "audit.jsonl"
    lines = _log(path, 5)
    path.write_text("\n".join(tamper(lines)) + "\n")  # type: ignore[operator]
    done = ironcurtain(user, "audit", "verify", str(path))
    assert done.returncode == 1, done.stdout
    assert f"line {line} {what}" in done.stdout


def test_verify_and_tail_of_an_intact_log(user: Home) -> None:
    path = user.root / "audit.jsonl"
    _log(path, 3)
    done = ironcurtain(user, "audit", "verify", str(path))
    assert done.returncode == 0 and "ok, 3 entries, chain intact" in done.stdout
    done = ironcurtain(user, "audit", "tail", str(path), "-n", "3")
    assert done.returncode == 0
    assert done.stdout.count("time/t") == 2 and "-> success" in done.stdout
    assert done.stdout.splitlines()[-1].endswith("SESSION-END entries=3")


def test_audit_commands_without_a_log_say_so(user: Home) -> None:
    done = ironcurtain(user, "audit", "verify")
    assert done.returncode == 2 and "no audit logs in" in done.stderr
    done = ironcurtain(user, "audit", "verify", str(user.root / "nope.jsonl"))
    assert done.returncode == 2 and "no such audit log" in done.stderr
