"""The answering side of the approvals sockets: attached to one session, or to every running
session of this user (new ones as they start), each message a session sends taken in and
each answer sent back on the socket of the session that asked. A terminal and the approvals
page both answer through it; what they show, and how, is theirs."""

from __future__ import annotations

import json
import os
import selectors
import socket
import struct
from dataclasses import dataclass, field
from typing import Any

from launcher.shared import rundir
from launcher.transports.approvals.session_socket import APPROVALS_SOCKET

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
    audit: str = ""  # its audit log's path, as it said when attached ("": not said)


def session_of(path: str) -> str:
    """The session id of the socket ``path``, from its runtime directory's name."""
    return os.path.basename(os.path.dirname(path)).removeprefix(rundir.PREFIX)


def connect(path: str) -> socket.socket:
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


class Sessions:
    """The sessions attached, for one human's answers.

    ``only``: the one session to attach to (None: every running session of this user's,
    found again every :data:`RESCAN` seconds by :meth:`scan`). What sessions say reaches the
    hooks :meth:`note`, :meth:`attached`, :meth:`asked`, :meth:`closed` and :meth:`dropped`,
    which a terminal or the page overrides.
    """

    def __init__(self, only: str | None) -> None:
        self.only = only
        self.selector = selectors.DefaultSelector()
        self.links: dict[str, Link] = {}  # by socket path
        self.doubted: dict[str, str] = {}  # a socket refused once: why (said if it stays)
        self.said: set[str] = set()
        self.given_up: set[str] = set()  # sockets that took no connection in time

    # -- hooks -----------------------------------------------------------------------------

    def note(self, text: str) -> None:
        """Something to tell the human about the sessions themselves."""

    def attached(self, link: Link, servers: list[str]) -> None:
        self.note(
            f"attached to session {link.session}"
            + (f" (servers: {', '.join(servers)})" if servers else "")
        )

    def asked(self, link: Link, message: dict[str, Any]) -> None:
        """``link``'s session asks ``message`` (a request with a string ``id``)."""

    def closed(self, link: Link, qid: object) -> None:
        """``link``'s question ``qid`` is no longer asked (answered elsewhere, given up)."""

    def dropped(self, link: Link) -> None:
        """``link``'s session is no longer attached; its questions are gone with it."""

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
                    self.note(f"not attaching to {path}: {why}")
                self.doubted[path] = why
                continue
            self.attach(path)
            if self.only is not None and self.links:
                return

    def attach(self, path: str) -> None:
        try:
            sock = connect(path)
        except TimeoutError:
            self.given_up.add(path)
            self.note(f"not attaching to {path}: it takes no connection")
            return
        except PermissionError as exc:
            self.given_up.add(path)
            self.note(f"not attaching to {path}: {exc}")
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
        self.note(f"session {link.session} {why}")
        self.dropped(link)

    def answer(self, link: Link, qid: str, answer: str) -> bool:
        """Send ``answer`` to ``link``'s question ``qid``; False (and the session dropped)
        when it does not take it."""
        message = {"type": "answer", "id": qid, "answer": answer}
        try:
            link.sock.sendall(json.dumps(message).encode() + b"\n")
        except OSError:
            self.drop(link, "did not take the answer")
            return False
        return True

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
            audit = message.get("auditLog")
            link.audit = audit if isinstance(audit, str) else ""
            servers = message.get("servers")
            self.attached(link, list(map(str, servers)) if isinstance(servers, list) else [])
        elif kind == "request" and isinstance(message.get("id"), str):
            self.asked(link, message)
        elif kind == "closed":
            self.closed(link, message.get("id"))

    def close(self) -> None:
        for link in list(self.links.values()):
            self.selector.unregister(link.sock)
            link.sock.close()
        self.links.clear()
        self.selector.close()
