"""The terminal's side of the approvals sockets: attached to one session, or to every
running session of this user (new ones as they start), each question put to the human one
at a time and each answer sent back on the socket of the session that asked."""

from __future__ import annotations

import json
import os
import selectors
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from launcher.shared import rundir
from launcher.shared.shown import visible
from launcher.shared.user_errors import UsageError
from launcher.transports.approvals_socket import APPROVALS_SOCKET

RESCAN = 1.0  # seconds between looks for sessions started since
MAX_LINE = 16 * 2**20  # bytes of one message from a session; a longer one drops it
CONNECT_TIMEOUT = 1.0  # a socket that does not take a connection by then is given up
SEND_TIMEOUT = 5.0  # a session that does not take an answer by then is dropped


@dataclass(eq=False)
class Link:
    """One attached session."""

    session: str  # its id
    sock: socket.socket
    buffer: bytearray = field(default_factory=bytearray)


@dataclass(eq=False)
class Question:
    link: Link
    message: dict[str, Any]


def session_of(path: str) -> str:
    """The session id of the socket ``path``, from its runtime directory's name."""
    return os.path.basename(os.path.dirname(path)).removeprefix(rundir.PREFIX)


def _connect(path: str) -> socket.socket:
    """A connection to the socket ``path`` whose listening process is this user's
    (OSError otherwise, TimeoutError when it takes no connection in time)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(CONNECT_TIMEOUT)
        sock.connect(path)
        if hasattr(socket, "SO_PEERCRED"):
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            if struct.unpack("3i", creds)[1] != os.getuid():
                raise PermissionError(f"{path}: served by another user's process")
        sock.settimeout(SEND_TIMEOUT)
    except BaseException:
        sock.close()
        raise
    return sock


class Desk:
    """The sessions attached and the questions they asked, for one human at one terminal.

    ``only``: the one session to attach to (None: every running session of this user's,
    found again every :data:`RESCAN` seconds). ``ask``: shows a question and its prompt.
    """

    def __init__(self, only: str | None, ask: Callable[[Question], None]) -> None:
        self.only = only
        self.ask = ask
        self.selector = selectors.DefaultSelector()
        self.links: dict[str, Link] = {}  # by socket path
        self.queue: list[Question] = []
        self.shown: Question | None = None
        # The question shown was closed (answered elsewhere, given up, its session ended):
        # the next line typed only acknowledges it, so it cannot answer the question after.
        self.stale = False
        self.doubted: dict[str, str] = {}  # a socket refused once: why (said if it stays)
        self.said: set[str] = set()
        self.given_up: set[str] = set()  # sockets that took no connection in time

    # -- sessions --------------------------------------------------------------------------

    def candidates(self) -> list[str]:
        if self.only is not None:
            return rundir.find(self.only, APPROVALS_SOCKET)
        return [os.path.join(d, APPROVALS_SOCKET) for d in rundir.serving()]

    def scan(self) -> None:
        """Attach to every candidate socket not attached yet that a session of this user's
        made; say once why one that stays refused is not attached."""
        for path in self.candidates():
            if path in self.links or path in self.given_up or not os.path.exists(path):
                continue
            why = rundir.doubt(path)
            if why:
                # Seen once between its making and its closing to others, a session's
                # own socket passes the next time; one that stays refused is said.
                if self.doubted.get(path) == why and path not in self.said:
                    self.said.add(path)
                    note(f"not attaching to {path}: {why}")
                self.doubted[path] = why
                continue
            self.attach(path)
            if self.only is not None and self.links:
                return

    def attach(self, path: str) -> None:
        try:
            sock = _connect(path)
        except TimeoutError:
            self.given_up.add(path)
            note(f"not attaching to {path}: it takes no connection")
            return
        except PermissionError as exc:
            self.given_up.add(path)
            note(f"not attaching to {path}: {exc}")
            return
        except OSError:
            return  # a session killed without its clean-up: nobody answers there
        link = Link(session_of(path), sock)
        self.links[path] = link
        self.selector.register(sock, selectors.EVENT_READ, link)

    def drop(self, link: Link, why: str) -> None:
        for path, known in list(self.links.items()):
            if known is link:
                del self.links[path]
        self.selector.unregister(link.sock)
        link.sock.close()
        self.queue = [q for q in self.queue if q.link is not link]
        note(f"session {link.session} {why}")
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

    # -- what sessions send ----------------------------------------------------------------

    def receive(self, link: Link) -> None:
        try:
            data = link.sock.recv(65536)
        except OSError:
            data = b""
        if not data:
            self.drop(link, "ended")
            return
        link.buffer += data
        if b"\n" in data:
            *lines, rest = link.buffer.split(b"\n")
            link.buffer = bytearray(rest)
        else:
            lines = []
        if len(link.buffer) > MAX_LINE:
            self.drop(link, f"sent a message over {MAX_LINE} bytes: detached from it")
            return
        for line in lines:
            self.take(link, line)

    def take(self, link: Link, line: bytes | bytearray) -> None:
        """One message from ``link``'s session; what is not one is ignored."""
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):
            return
        if not isinstance(message, dict):
            return
        kind = message.get("type")
        if kind == "attached":
            servers = message.get("servers")
            named = ", ".join(map(str, servers)) if isinstance(servers, list) else ""
            note(f"attached to session {link.session}" + (f" (servers: {named})" if named else ""))
        elif kind == "request" and isinstance(message.get("id"), str):
            self.queue.append(Question(link, message))
        elif kind == "closed":
            qid = message.get("id")
            self.queue = [q for q in self.queue if q.link is not link or q.message["id"] != qid]
            shown = self.shown
            if shown is not None and shown.link is link and shown.message["id"] == qid:
                self.close_shown()

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
        choice = line.strip().lower()[:1]
        if choice not in keys:
            prompt()
            return
        self.shown = None
        answer = {"type": "answer", "id": shown.message["id"], "answer": keys[choice]}
        try:
            shown.link.sock.sendall(json.dumps(answer).encode() + b"\n")
        except OSError:
            self.drop(shown.link, "did not take the answer")
            return
        print(f"  -> {keys[choice]}", flush=True)


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
