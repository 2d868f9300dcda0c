"""The terminal's side of the approvals sockets: the sessions attached (one, or every
running session of this user, new ones as they start), each question put to the human one
at a time and each answer sent back on the socket of the session that asked."""

from __future__ import annotations

import os
import selectors
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from launcher.shared.shown import visible
from launcher.shared.user_errors import UsageError
from launcher.transports.approvals.client import RESCAN, Link, Sessions


@dataclass(eq=False)
class Question:
    link: Link
    message: dict[str, Any]


class Desk(Sessions):
    """The sessions attached and the questions they asked, for one human at one terminal.

    ``only``: the one session to attach to (None: every running session of this user's).
    ``ask``: shows a question and its prompt.
    """

    def __init__(self, only: str | None, ask: Callable[[Question], None]) -> None:
        super().__init__(only)
        self.ask = ask
        self.queue: list[Question] = []
        self.shown: Question | None = None
        # The question shown was closed (answered elsewhere, given up, its session ended):
        # the next line typed only acknowledges it, so it cannot answer the question after.
        self.stale = False

    def note(self, text: str) -> None:
        note(text)

    def asked(self, link: Link, message: dict[str, Any]) -> None:
        self.queue.append(Question(link, message))

    def closed(self, link: Link, qid: object) -> None:
        self.queue = [q for q in self.queue if q.link is not link or q.message["id"] != qid]
        shown = self.shown
        if shown is not None and shown.link is link and shown.message["id"] == qid:
            self.close_shown()

    def dropped(self, link: Link) -> None:
        self.queue = [q for q in self.queue if q.link is not link]
        if self.shown is not None and self.shown.link is link:
            self.close_shown()

    def read_from(self, stdin: int) -> None:
        """Take the human's answers from ``stdin`` (a terminal or a pipe)."""
        try:
            self.selector.register(stdin, selectors.EVENT_READ, None)
        except (OSError, ValueError):
            raise UsageError(
                "ironcurtain approvals reads its answers from a terminal or a pipe, "
                "not from a file or nothing"
            ) from None

    def close_shown(self) -> None:
        self.shown = None
        self.stale = True
        print("  (no longer asked; press Enter for the next question)", flush=True)

    # -- the human -------------------------------------------------------------------------

    def show_next(self) -> None:
        if self.shown is None and not self.stale and self.queue:
            self.shown = self.queue.pop(0)
            self.ask(self.shown)

    def typed(self, line: str, keys: dict[str, str]) -> None:
        """A line the human typed: the answer to the question shown (asked again when it is
        none), or the acknowledgement of one closed; with no question shown, nothing."""
        if self.stale:
            self.stale = False
            return
        shown = self.shown
        if shown is None:
            return
        said = _pattern_chosen(line, shown.message) or keys.get(line.strip().lower()[:1])
        if said is None:
            prompt()
            return
        self.shown = None
        if self.answer(shown.link, shown.message["id"], said):
            print(f"  -> {visible(said, one_line=True)}", flush=True)


def pattern_choices(message: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The patterns a question offers: what to type (``p1``...), the answer it sends, and
    the pattern's exact words."""
    offered = message.get("patterns")
    if not isinstance(offered, list):
        return []
    return [
        (f"p{n}", str(p.get("answer")), str(p.get("text")))
        for n, p in enumerate(offered, 1)
        if isinstance(p, dict)
    ]


def _pattern_chosen(line: str, message: dict[str, Any]) -> str | None:
    typed = line.strip().lower()
    return next((answer for key, answer, _ in pattern_choices(message) if key == typed), None)


def prompt() -> None:
    print("[a]pprove, approve for this [s]ession, [d]eny? ", end="", flush=True)


def note(text: str) -> None:
    """One line of the terminal's own (what would act on the terminal shown as escapes)."""
    print(f"ironcurtain approvals: {visible(text, one_line=True)}", flush=True)


def serve(desk: Desk, keys: dict[str, str], stdin: int) -> str:
    """Serve ``desk`` until its one session ends ('ended'), or the human leaves: the input
    ``stdin`` (given to :meth:`Desk.read_from`) ends ('left'); Ctrl-C is left to the
    caller."""
    pending = b""
    next_scan = time.monotonic() + RESCAN
    while True:
        desk.show_next()
        for key, _ in desk.selector.select(max(0.0, next_scan - time.monotonic())):
            if key.data is not None:
                desk.receive(key.data)
                continue
            chunk = os.read(stdin, 4096)
            if not chunk:
                return "left"
            pending += chunk
            *lines, pending = pending.split(b"\n")
            pending = pending[-65536:]  # a line that long is no answer anyway
            for line in lines:
                desk.typed(line.decode(errors="replace"), keys)
        if desk.only is not None and not desk.links:
            return "ended"
        if desk.only is None and time.monotonic() >= next_scan:
            desk.scan()
            next_scan = time.monotonic() + RESCAN
