"""The approvals page as one session's channel: served from a thread of the session itself,
attached to that session's approvals socket as a terminal would be, until the session stops.
Its address (with the token) is said once it is served; everything else about the page (the
token, the checks, what it shows) is the page's own."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from launcher.transports.approvals.board import Board
from launcher.transports.approvals.page import PageGuard, page_app
from launcher.transports.http.listener import listen_http

STOP_WAIT = 3.0  # seconds the page's threads are given to end at stop


class PageThread:
    """The page for ``session`` (its id), answering with ``answers`` (the page's form values
    and what the session is sent)."""

    def __init__(self, session: str, answers: dict[str, str]) -> None:
        self.board = Board(session, answers)
        self._server: Any = None
        self._threads: list[threading.Thread] = []

    def start(self, announce: Callable[[str], None]) -> None:
        """Listen on a free port of 127.0.0.1 and serve there; ``announce`` is told the
        page's address (with its token) before this returns."""
        import uvicorn

        sock = listen_http(0)
        guard = PageGuard(sock.getsockname()[1])
        config = uvicorn.Config(
            page_app(self.board, guard),
            log_level="warning",
            lifespan="off",
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        server = self._server
        self._threads = [
            threading.Thread(target=self.board.run, name="approvals-page-board", daemon=True),
            threading.Thread(
                target=lambda: server.run(sockets=[sock]), name="approvals-page", daemon=True
            ),
        ]
        for thread in self._threads:
            thread.start()
        announce(guard.url)

    def stop(self) -> None:
        """Stop serving and detach (waits a moment for the threads to end)."""
        self.board.stop()
        if self._server is not None:
            self._server.should_exit = True
        for thread in self._threads:
            thread.join(STOP_WAIT)
