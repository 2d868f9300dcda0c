"""What the audit log cannot be fooled by: a request it could not record (a lone surrogate)
reaching a server, a log whose end was cut off, a key given twice, and text from a server
or a client that would drive the operator's terminal."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from launcher.audit.log import AuditLog, entry_hash
from launcher.audit.read import verify
from launcher.shared.shown import visible
from tests.servers.forging_server import FORGED as FORGED_LINE
from tests.support.cli import ironcurtain
from tests.support.client import Client
from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.paths import IRONCURTAIN, TESTS
from tests.support.probe import probe_session, write_raw_policy

SESSION = "20260101-000000-abcdef"  # shaped like a real session id


def _log(path: Path, entries: int, session: str = "s1") -> list[str]:
    """One session's entries, sealed at its end as a session closing its log does."""
    log = AuditLog(str(path), session)
    for i in range(entries):
        log.write({"requestId": i, "server": "time", "tool": "t", "result": "success"})
    log.close()
    return path.read_text().splitlines()


def _verify(user: Home, path: Path) -> subprocess.CompletedProcess[str]:
    return ironcurtain(user, "audit", "verify", str(path))


# -- truncation ------------------------------------------------------------------------------


def test_a_closed_log_ends_with_a_sealed_session_end_entry(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    lines = _log(path, 3)
    end = json.loads(lines[-1])
    assert (end["event"], end["entries"], end["sessionId"]) == ("session-end", 3, "s1")
    assert end["prev"] == json.loads(lines[-2])["hash"] and end["hash"] == entry_hash(end)
    assert verify(lines) == (3, None)
    AuditLog(str(tmp_path / "b.jsonl"), "s2").close()  # a session that wrote nothing
    assert (tmp_path / "b.jsonl").read_text() == ""  # seals nothing (the session removes it)


@pytest.mark.parametrize("cut", [1, 2, 4])
def test_verify_fails_on_a_log_whose_last_lines_were_removed(user: Home, cut: int) -> None:
    path = user.root / "audit.jsonl"
    lines = _log(path, 3)
    path.write_text("".join(f"{line}\n" for line in lines[:-cut]))
    done = _verify(user, path)
    assert done.returncode == 1, done.stdout
    if cut < len(lines):
        assert f"line {len(lines) - cut} is the last and session s1 has no session-end" in (
            done.stdout
        )
        assert "truncated (its last lines removed), or it is still being written" in done.stdout
    else:
        assert "has no entries: every line was removed" in done.stdout


def test_verify_fails_when_an_earlier_session_of_a_shared_log_lost_its_end(user: Home) -> None:
    # The first session's last entry and its seal are cut off; a second session then
    # continues the chain from what is left, so every line still follows the one before.
    path = user.root / "audit.jsonl"
    lines = _log(path, 3, "s1")
    path.write_text("".join(f"{line}\n" for line in lines[:-2]))
    _log(path, 2, "s2")
    done = _verify(user, path)
    assert done.returncode == 1, done.stdout
    assert "line 3 starts session s2 but session s1 has no session-end entry" in done.stdout
    # The same with one session id for both: the seal's count gives it away.
    path.write_text("".join(f"{line}\n" for line in lines[:-2]))
    _log(path, 2, "s1")
    done = _verify(user, path)
    assert done.returncode == 1, done.stdout
    assert "line 5 ends session s1 with 2 entries, but 4 precede it" in done.stdout


def test_verify_accepts_several_sealed_sessions_in_one_log(user: Home) -> None:
    path = user.root / "audit.jsonl"
    _log(path, 3, "s1")
    _log(path, 2, "s2")
    done = _verify(user, path)
    assert done.returncode == 0, done.stdout
    assert "ok, 5 entries, chain intact, every session sealed" in done.stdout


def test_a_pid_file_of_another_process_does_not_pass_for_a_running_session(
    user: Home,
) -> None:
    # A truncated log, and a runtime directory for its session naming a live process that
    # is not its launcher (this test): still truncated.
    runtime = user.root / "run"
    user.env["XDG_RUNTIME_DIR"] = str(runtime)
    (runtime / f"ironcurtain-{SESSION}").mkdir(parents=True)
    (runtime / f"ironcurtain-{SESSION}" / "pid").write_text(str(os.getpid()))
    path = user.root / "audit.jsonl"
    lines = _log(path, 2, SESSION)
    path.write_text("".join(f"{line}\n" for line in lines[:-1]))
    done = _verify(user, path)
    assert done.returncode == 1, done.stdout
    assert "still running" not in done.stdout and "truncated" in done.stdout


# -- duplicate keys --------------------------------------------------------------------------


def test_verify_rejects_an_entry_that_gives_a_key_twice(user: Home) -> None:
    # The hash covers the last "result" (what json.loads keeps); a reader that keeps the
    # first would show "denied". The line still hashes right: only the duplicate tells.
    path = user.root / "audit.jsonl"
    lines = _log(path, 3)
    assert '"result":"success"' in lines[1]
    lines[1] = '{"result":"denied",' + lines[1][1:]
    path.write_text("".join(f"{line}\n" for line in lines))
    done = _verify(user, path)
    assert done.returncode == 1, done.stdout
    assert 'line 2 has the key "result" twice' in done.stdout


# -- what cannot be written --------------------------------------------------------------------


def test_an_entry_with_no_utf8_form_fails_the_log_instead_of_raising(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    log = AuditLog(str(path), "s1")
    assert log.write({"requestId": 1, "result": "success"})
    prepared = log.prepare({"requestId": "\ud800", "tool": "t"}, late=("result",))
    assert not log.write({"result": "success"}, prepared)  # the call's outcome: no raise
    assert log.error is not None and "surrogate" in log.error
    assert not log.write({"requestId": 2, "result": "success"})  # it stays failed
    log.close()
    (line,) = path.read_text().splitlines()
    assert verify([line])[1] is not None  # unsealed: the log failed


def test_verify_reports_a_string_with_no_utf8_form_instead_of_crashing(user: Home) -> None:
    path = user.root / "audit.jsonl"
    lines = _log(path, 2)
    path.write_text(lines[0].replace('"tool":"t"', '"tool":"\\ud800"') + "\n")
    done = _verify(user, path)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "line 1 holds a string with no UTF-8 form" in done.stdout


# -- the terminal ----------------------------------------------------------------------------

FORGING = TESTS / "servers" / "forging_server.py"
CONTROLS = "\x1b]0;pwned\x07\x1b[2J\rfake ok\x08\x9b2J\u202eevil\x00"


# What acts on a terminal or hides text: controls (newline and tab apart), direction and
# zero-width characters, separators, fillers that draw nothing, and lone surrogates.
ACTS = [
    *map(chr, range(0x20)),
    *map(chr, range(0x7F, 0xA0)),
    *"\xad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b\u180e\u200b\u200e\u200f",
    *"\u2028\u2029\u202a\u202e\u2060\u2066\u2069\u3164\ufeff\uffa0\ufffb",
    "\U000e0041",
    "\ud800",
    "\udfff",
]


def _terminal_safe(text: str) -> bool:
    return not any(c in ACTS and c not in "\t\n" for c in text)


def test_one_table_escapes_what_a_terminal_acts_on() -> None:
    assert visible("plain text, tab\there, é ü 中 😀") == "plain text, tab\there, é ü 中 😀"
    assert visible(CONTROLS) == (
        "\\x1b]0;pwned\\x07\\x1b[2J\\x0dfake ok\\x08\\x9b2J\\u202eevil\\x00"
    )
    for char in ACTS:
        shown = visible(char, one_line=True)
        assert char != "\t" or shown == "\t"
        if char != "\t":
            assert shown.isascii() and shown.startswith("\\"), hex(ord(char))
        assert _terminal_safe(visible(char)), hex(ord(char))
    assert visible("a\nb") == "a\nb" and visible("a\nb", one_line=True) == "a\\x0ab"
    # Printing it cannot fail, whatever a server sent (a lone surrogate cannot be encoded).
    visible("\ud800 \udcff", one_line=True).encode("utf-8")


def test_every_character_that_acts_or_draws_nothing_is_escaped() -> None:
    """Against this Python's Unicode tables: every control, format (direction, zero-width,
    tags), surrogate, private-use and separator character, and every variation selector
    (one per byte: text hidden after a visible character)."""
    categories = {"Cc", "Cf", "Cs", "Co", "Zl", "Zp"}
    selectors = {*range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0)}
    missed = [
        hex(code)
        for code in range(0x110000)
        if (unicodedata.category(chr(code)) in categories or code in selectors)
        and code not in (0x09, 0x0A)
        and visible(chr(code)) == chr(code)
    ]
    assert not missed, missed
    hidden = "".join(chr(0xE0100 + b - 16) if b >= 16 else chr(0xFE00 + b) for b in b"send keys")
    assert visible(f"Summarise this.{hidden}").isascii()


def test_audit_tail_and_verify_escape_control_characters(user: Home) -> None:
    path = user.root / "audit.jsonl"
    log = AuditLog(str(path), f"s{CONTROLS}")
    log.write({"event": "quarantine", "path": f"/ws/{CONTROLS}", "reason": CONTROLS})
    log.write({"requestId": 1, "server": "probe", "tool": CONTROLS, "result": "success"})
    log.close()
    with path.open("a") as handle:
        handle.write(f"not json {CONTROLS}\n")
    done = ironcurtain(user, "audit", "tail", str(path))
    assert done.returncode == 0, done.stderr
    assert _terminal_safe(done.stdout), repr(done.stdout)
    assert done.stdout.count("\\x1b]0;pwned\\x07") == 4
    lines = path.read_text().split("\n")
    path.write_text("".join(f"{line}\n" for line in lines[:2]))  # unsealed: its id is shown
    done = _verify(user, path)
    assert done.returncode == 1 and "has no session-end entry" in done.stdout
    assert _terminal_safe(done.stdout) and "s\\x1b]0;pwned" in done.stdout


def test_server_stderr_cannot_drive_the_terminal(user: Home) -> None:
    noisy = f"import sys; sys.stderr.write({CONTROLS!r} + '\\n'); sys.stderr.flush(); sys.exit(3)"
    server = {"command": sys.executable, "args": ["-c", noisy], "sandbox": False}
    config = user.root / "noisy.json"
    config.write_text(json.dumps({"mcpServers": {"noisy": server}}))
    done = ironcurtain(user, "run", "--config", str(config), "--workspace", str(user.ws()))
    assert done.returncode != 0 and "failed to start" in done.stderr, done.stderr
    assert _terminal_safe(done.stderr), repr(done.stderr)
    assert "[noisy] \\x1b]0;pwned\\x07\\x1b[2J\\x0dfake ok\\x08\\x9b2J" in done.stderr


@needs_bwrap
def test_a_name_a_server_chose_cannot_drive_the_operators_terminal(user: Home) -> None:
    """A hostile server makes a file the guard quarantines under a directory whose name
    repaints the terminal and starts a line of ironcurtain's own: the operator's stderr
    shows it escaped, on one line."""
    args, ws, _ = probe_session(user)
    forged = f"{CONTROLS[:-1]}\nironcurtain: all clear\u2028"  # a name holds no NUL
    client = Client.spawn([IRONCURTAIN, "run", *args], user.env, stderr=subprocess.PIPE)
    try:
        client.initialize({}, timeout=60)
        path = f"{ws}/{forged}/.bashrc"
        answer = client.call("probe__write_path", {"path": path, "content": "x", "parents": True})
        assert "WRITE OK" in json.dumps(answer), answer
        _finish(client)
        assert client.proc.stderr is not None
        stderr = client.proc.stderr.read().decode("utf-8", "surrogateescape")
    finally:
        client.kill()
    quarantined = [line for line in stderr.splitlines() if "quarantined" in line]
    assert len(quarantined) == 1, stderr
    assert _terminal_safe(stderr), repr(stderr)
    assert "\\x1b]0;pwned\\x07" in quarantined[0] and "\\x0aironcurtain: all clear" in stderr
    assert not any(line.startswith("ironcurtain: all clear") for line in stderr.splitlines())
    assert not (ws / forged / ".bashrc").exists()


@pytest.mark.sandbox  # the forging server runs, unsandboxed
@pytest.mark.parametrize("forge", ["error", "name"])
def test_what_a_server_lists_cannot_start_a_line_of_ironcurtains(user: Home, forge: str) -> None:
    """A server's failure text and its tools' names, quoted on the operator's terminal
    after it says its tools changed, hold a newline and a line of ironcurtain's own: it is
    shown escaped on the line that quotes it."""
    server = {"command": sys.executable, "args": [str(FORGING)], "sandbox": False,
              "env": {"FORGE": forge}}  # fmt: skip
    config = user.root / "forging.json"
    config.write_text(json.dumps({"mcpServers": {"f": server}}))
    policy = write_raw_policy(user.root / "policy", {"f": {"poke": []}})
    args = ["--config", str(config), "--policy-dir", str(policy), "--workspace", str(user.ws()),
            "--allow-unsandboxed"]  # fmt: skip
    client = Client.spawn([IRONCURTAIN, "run", *args], user.env, stderr=subprocess.PIPE)
    try:
        client.initialize({}, timeout=60)
        client.call("f__poke", {})
        # The server answers this only after its listing: by then the operator was told.
        client.call("f__poke", {})
        _finish(client)
        assert client.proc.stderr is not None
        stderr = client.proc.stderr.read().decode()
    finally:
        client.kill()
    assert FORGED_LINE in stderr, stderr  # quoted, escaped
    assert not any(line.startswith(FORGED_LINE) for line in stderr.splitlines()), stderr


# -- a real session ----------------------------------------------------------------------------


@contextlib.contextmanager
def _session(user: Home, args: list[str]) -> Iterator[Client]:
    """A session in raw JSON lines whose client can answer elicitations (so escalations ask
    it); each answer waited for at most 30 s."""
    client = Client.spawn([IRONCURTAIN, "run", *args], user.env, timeout=30)
    try:
        client.initialize({"elicitation": {}}, protocol="2025-06-18", timeout=60)
        yield client
    finally:
        client.kill()
        client.proc.wait()


def _finish(client: Client) -> None:
    client.hang_up()
    client.proc.wait(timeout=20)


def _write(ws: Path, name: str, request_id: object = 1, **extra: Any) -> dict[str, Any]:
    args = {"path": f"{ws}/{name}", "content": "x"}
    params = {"name": "probe__write_path", "arguments": args, **extra}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


@needs_bwrap
def test_a_request_the_audit_log_could_not_record_reaches_no_server(user: Home) -> None:
    ask = {"name": "ask", "if": {"tool": ["env_value"]}, "then": "escalate", "reason": "ask"}
    args, ws, audit = probe_session(user, first=[ask])
    read = {"uri": "probe://status"}
    by_argument = _write(ws, "by-argument", 4)
    by_argument["params"]["arguments"]["content"] = "\ud800"
    prompt = {"name": "probe__greet", "arguments": {"name": "\ud800"}}
    escalated = {
        "name": "probe__env_value",
        "arguments": {"name": "HOME"},
        "_meta": {"x": "\udc80"},
    }
    # (what, the message sent, the id of the answer, the start of the error's message)
    hostile: list[tuple[str, dict[str, Any] | bytes, object, str]] = [
        ("id of a call", _write(ws, "by-id", "\ud800"), None, "invalid request: its id"),
        (
            "id of a resource read",
            {"jsonrpc": "2.0", "id": "r\udfff", "method": "resources/read", "params": read},
            None,
            "invalid request: its id",
        ),
        (
            "encoded surrogate in an id",  # bytes ED A0 80: json.loads lets them through
            json.dumps(_write(ws, "by-bytes", "ID"))
            .replace('"ID"', '"\udc00"')
            .encode("utf-8", "surrogatepass"),
            None,
            "invalid request: its id",
        ),
        (
            "tool name",
            {**_write(ws, "by-name", 3), "params": {"name": "probe__write_path\ud800"}},
            3,
            "invalid request: its params",
        ),
        ("argument", by_argument, 4, "invalid request: an argument"),
        ("_meta", _write(ws, "by-meta", 5, _meta={"x": "\ud800"}), 5, "invalid request"),
        (  # a human would be asked first: refused before that, not after the approval
            "_meta of an escalated call",
            {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": escalated},
            7,
            "invalid request: its params",
        ),
        (
            "argument of a prompt",
            {"jsonrpc": "2.0", "id": 6, "method": "prompts/get", "params": prompt},
            6,
            "invalid request: a string in it",
        ),
    ]
    with _session(user, args) as session:
        for what, message, answer_id, error in hostile:
            session.send(message)
            reply = session.receive()
            assert reply["id"] == answer_id, (what, reply)
            assert reply["error"]["code"] == -32600, (what, reply)
            assert reply["error"]["message"].startswith(error), (what, reply)
            assert "surrogate" in reply["error"]["message"], (what, reply)
        session.send(_write(ws, "good", 9))
        reply = session.receive()
        assert reply["id"] == 9 and reply["result"]["content"][0]["text"] == "WRITE OK", reply
        _finish(session)
    # Nothing reached the server but the good call, which has its one entry, and the log
    # is intact and sealed.
    calls = [json.loads(line) for line in (ws / "probe-calls.jsonl").read_text().splitlines()]
    assert calls == [{"tool": "write_path", "path": f"{ws}/good"}]
    assert (ws / "good").exists()
    assert not [p.name for p in ws.iterdir() if p.name.startswith("by-")]
    entries = [json.loads(line) for line in audit.read_text().splitlines()]
    assert [(e.get("requestId"), e.get("result"), e.get("event")) for e in entries] == [
        (9, "success", None),
        (None, None, "session-end"),
    ]
    done = _verify(user, audit)
    assert done.returncode == 0 and "every session sealed" in done.stdout, done.stdout


@needs_bwrap
def test_verify_tells_a_running_session_from_a_truncated_log(user: Home) -> None:
    args, ws, audit = probe_session(user)
    with _session(user, args) as session:
        session.send(_write(ws, "a", 2))
        assert session.receive()["id"] == 2
        done = _verify(user, audit)  # its launcher is alive: not sealed yet, and said so
        assert done.returncode == 0, done.stdout
        assert "ok so far, 1 entries, chain intact; session" in done.stdout
        assert f"is still running (pid {session.proc.pid})" in done.stdout
        _finish(session)
    done = _verify(user, audit)
    assert done.returncode == 0 and "ok, 1 entries, chain intact, every session sealed" in (
        done.stdout
    )
    lines = audit.read_text().splitlines()
    audit.write_text(lines[0] + "\n")  # the seal removed once the session is gone
    done = _verify(user, audit)
    assert done.returncode == 1 and "truncated" in done.stdout, done.stdout
