"""What the approvals page shows and answers: the questions of every attached session, the
recent decisions and what the sessions said, kept by one thread that owns the sockets
(:meth:`Board.run`); the web server's threads read snapshots of it and hand it answers."""

from __future__ import annotations

import collections
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from launcher.transports.approvals import audit_tail
from launcher.transports.approvals.client import RESCAN, Link, Sessions

RECENT = 50  # decisions kept for the page
NOTES = 20  # lines about the sessions kept for the page


@dataclass(frozen=True)
class Pending:
    session: str
    qid: str
    message: dict[str, Any]
    since: float  # time.time() it was asked


@dataclass(frozen=True)
class Decided:
    session: str
    message: dict[str, Any]
    outcome: str  # the answer given here, or why it is no longer asked
    when: float


def said(message: dict[str, Any], answer: str, answers: dict[str, str]) -> str | None:
    """What the session is sent for the page's ``answer`` to ``message``: one of
    ``answers``, or ``pattern<n>``, the n-th pattern the question offers (None: neither)."""
    if answer in answers:
        return answers[answer]
    offered = message.get("patterns")
    if answer.startswith("pattern") and answer[7:].isdigit() and isinstance(offered, list):
        n = int(answer[7:])
        if 1 <= n <= len(offered) and isinstance(offered[n - 1], dict):
            return str(offered[n - 1].get("answer"))
    return None


class Board(Sessions):
    """Every running session of this user's (``only``: that one), for the page;
    ``answers``: each answer the page offers (its form value) and what the session is sent."""

    def __init__(self, only: str | None, answers: dict[str, str]) -> None:
        super().__init__(only)
        self.answers = answers
        self.lock = threading.Condition()
        self.version = 0  # changes whenever what the page shows does
        self.pending: dict[tuple[str, str], tuple[Link, Pending]] = {}
        self.recent: collections.deque[Decided] = collections.deque(maxlen=RECENT)
        self.notes: collections.deque[str] = collections.deque(maxlen=NOTES)
        self.stopping = False
        # Each session's audit log (as it said when attached, kept after it ends) and the
        # size each log had when last looked at: a new decision there changes the page.
        self.audits: dict[str, str] = {}
        self._sizes: dict[str, int] = {}
        # Told of each new question (the session's id, the question), from the sockets'
        # thread: it must not wait (the webhook queues it).
        self.announce: Callable[[str, dict[str, Any]], None] | None = None
        self._answers: list[tuple[str, str, str]] = []
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self.selector.register(self._wake_r, selectors.EVENT_READ, None)

    # -- what the page reads and asks (any thread) ------------------------------------------

    def snapshot(self) -> tuple[int, list[Pending], list[Decided], list[str]]:
        with self.lock:
            shown = sorted((p for _, p in self.pending.values()), key=lambda p: p.since)
            return self.version, shown, list(reversed(self.recent)), list(self.notes)

    def logged(self) -> list[dict[str, Any]]:
        """The recent decisions in the attached sessions' audit logs, newest first."""
        with self.lock:
            by_log: dict[str, set[str]] = {}
            for session, path in self.audits.items():
                by_log.setdefault(path, set()).add(session)
        found = [e for p, s in by_log.items() for e in audit_tail.decisions(p, s, RECENT)]
        found.sort(key=lambda entry: str(entry.get("time", "")), reverse=True)
        return found[:RECENT]

    def wait_change(self, seen: int, timeout: float) -> int:
        """The version once it differs from ``seen`` (or ``timeout`` seconds passed)."""
        with self.lock:
            self.lock.wait_for(lambda: self.version != seen or self.stopping, timeout)
            return self.version

    def give(self, session: str, qid: str, answer: str) -> bool:
        """Queue ``answer`` (a key of ``answers``) to ``session``'s question ``qid``;
        False when no such question is open (or it offers no such answer)."""
        with self.lock:
            entry = self.pending.get((session, qid))
            if entry is None or said(entry[1].message, answer, self.answers) is None:
                return False
            self._answers.append((session, qid, answer))
        self._wake_w.send(b"x")
        return True

    def stop(self) -> None:
        with self.lock:
            self.stopping = True
            self.lock.notify_all()
        self._wake_w.send(b"x")

    # -- the sockets' thread ----------------------------------------------------------------

    def run(self) -> None:
        """Attach, take in what sessions send and send the answers given, until :meth:`stop`."""
        next_scan = 0.0
        try:
            while not self.stopping:
                if time.monotonic() >= next_scan:
                    self.scan()
                    self._look_at_audits()
                    next_scan = time.monotonic() + RESCAN
                for key, _ in self.selector.select(max(0.0, next_scan - time.monotonic())):
                    if key.data is None:
                        self._drain()
                    elif key.data in self.links.values():
                        self.receive(key.data)
        finally:
            self.close()
            self._wake_r.close()
            self._wake_w.close()

    def _drain(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except BlockingIOError:
            pass
        with self.lock:
            answers, self._answers = self._answers, []
        for session, qid, answer in answers:
            with self.lock:
                entry = self.pending.pop((session, qid), None)
            if entry is None:
                continue  # closed meanwhile
            link, pending = entry
            sent_text = said(pending.message, answer, self.answers) or ""
            sent = self.answer(link, qid, sent_text)
            self._changed(pending, sent_text if sent else "not taken: session gone")

    def _look_at_audits(self) -> None:
        with self.lock:
            paths = set(self.audits.values())
        sizes = {path: audit_tail.size(path) for path in paths}
        if sizes != self._sizes:
            self._sizes = sizes
            self._changed()

    def _changed(self, gone: Pending | None = None, outcome: str = "") -> None:
        with self.lock:
            if gone is not None:
                self.recent.append(Decided(gone.session, gone.message, outcome, time.time()))
            self.version += 1
            self.lock.notify_all()

    # -- hooks ------------------------------------------------------------------------------

    def attached(self, link: Link, servers: list[str]) -> None:
        if link.audit:
            with self.lock:
                self.audits[link.session] = link.audit
        super().attached(link, servers)

    def note(self, text: str) -> None:
        with self.lock:
            self.notes.append(time.strftime("%H:%M:%S ") + text)
        self._changed()

    def asked(self, link: Link, message: dict[str, Any]) -> None:
        pending = Pending(link.session, message["id"], message, time.time())
        with self.lock:
            self.pending[(link.session, message["id"])] = (link, pending)
        self._changed()
        if self.announce is not None:
            self.announce(link.session, message)

    def closed(self, link: Link, qid: object) -> None:
        with self.lock:
            entry = self.pending.pop((link.session, str(qid)), None)
        if entry is not None:
            self._changed(entry[1], "no longer asked (answered elsewhere, or given up)")

    def dropped(self, link: Link) -> None:
        with self.lock:
            gone = [key for key, (known, _) in self.pending.items() if known is link]
            entries = [self.pending.pop(key)[1] for key in gone]
        for pending in entries:
            self._changed(pending, "no longer asked: its session ended")
        self._changed()
