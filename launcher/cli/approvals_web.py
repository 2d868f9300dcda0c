"""``ironcurtain approvals --web``: answer running sessions' escalations on a local web page."""

from __future__ import annotations

import sys

from launcher.relay.approving.approval import APPROVE, APPROVE_SESSION, DENY
from launcher.shared import rundir
from launcher.shared.shown import visible
from launcher.shared.user_errors import UsageError
from launcher.transports.http.listener import listen_http


def _say(text: str) -> None:
    print(f"ironcurtain approvals: {visible(text, one_line=True)}", file=sys.stderr, flush=True)


def serve_web(session: str | None) -> int:
    """Serve the approvals page for ``session``, else for every running session of this
    user's (those started later too), until interrupted."""
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise UsageError(
            "the approvals page needs the http extra: pip install 'ironcurtain[http]'"
        ) from None
    from launcher.transports.approvals_board import Board
    from launcher.transports.approvals_page import serve_page

    answers = {"approve": APPROVE, "session": APPROVE_SESSION, "deny": DENY}
    board = Board(session, answers)
    board.scan()
    if session is not None and not board.links:
        for path, why in board.doubted.items():
            raise UsageError(f"not attaching to {path}: {why}")
        raise UsageError(
            f"no approvals socket for session {session} in {rundir.bases()[0]}: "
            "is `ironcurtain run` running (with --approval auto or socket) as this user?"
        )
    if not board.links:
        board.note(f"no session running in {rundir.bases()[0]} yet; waiting for one")
    sock = listen_http(0)

    def announce(url: str) -> None:
        # The token is in the address: it goes to this terminal only (stdout), never a log.
        print(f"ironcurtain approvals: open {url}", flush=True)
        _say(
            "the page answers every running session of yours (Ctrl-C stops)"
            if session is None
            else f"the page answers session {session} (Ctrl-C stops)"
        )

    serve_page(board, sock, announce)
    return 0
