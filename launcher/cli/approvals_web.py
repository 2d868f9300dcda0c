"""``ironcurtain approvals --web``: answer running sessions' escalations on a local web page."""

from __future__ import annotations

import sys
from pathlib import Path

from launcher.relay.approving.approval import APPROVE, APPROVE_SESSION, DENY
from launcher.shared import rundir
from launcher.shared.shown import visible
from launcher.shared.user_errors import UsageError
from launcher.transports.http.listener import listen_http


def _say(text: str) -> None:
    print(f"ironcurtain approvals: {visible(text, one_line=True)}", file=sys.stderr, flush=True)


def serve_web(
    session: str | None, webhook: str | None = None, webhook_secret_file: str | None = None
) -> int:
    """Serve the approvals page for ``session``, else for every running session of this
    user's (those started later too), until interrupted; each question announced to
    ``webhook``, signed with the secret in ``webhook_secret_file``."""
    secret = _webhook_secret(webhook, webhook_secret_file)
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise UsageError(
            "the approvals page needs the http extra: pip install 'ironcurtain[http]'"
        ) from None
    from launcher.transports.approvals.board import Board
    from launcher.transports.approvals.page import serve_page

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

    hook = None
    if webhook is not None and _in_clear(webhook):
        _say(
            f"WARNING: --webhook {webhook} is plain http to another machine: each "
            "announcement (session, server, tool, rule) can be read on the way; use https"
        )
    if webhook is not None and secret is not None:
        from launcher.transports.approvals.webhook import Webhook

        page = f"http://127.0.0.1:{sock.getsockname()[1]}/"
        hook = Webhook(webhook, secret, page, board.note)
        board.announce = hook.announce
    try:
        serve_page(board, sock, announce)
    finally:
        if hook is not None:
            hook.stop()
    return 0


def _in_clear(url: str) -> bool:
    """Whether ``url`` is plain http to a host other than this machine's loopback."""
    import ipaddress
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or parts.hostname == "localhost":
        return False
    try:
        return not ipaddress.ip_address(parts.hostname or "").is_loopback
    except ValueError:
        return True  # a name: it may resolve anywhere


def _webhook_secret(webhook: str | None, secret_file: str | None) -> str | None:
    """The webhook's shared secret (None: no webhook); a :class:`UsageError` when one is
    given without the other, or the URL or the file is wrong."""
    if webhook is None and secret_file is None:
        return None
    if webhook is None or secret_file is None:
        raise UsageError(
            "--webhook and --webhook-secret-file go together: the webhook's announcements are "
            "signed with the secret in that file"
        )
    from launcher.transports.approvals.webhook import check_url
    from launcher.transports.http.bearer_token import read_secret

    try:
        check_url(webhook)
        return read_secret(Path(secret_file), "webhook_secret_file")
    except UsageError as exc:  # the library names its settings; here they are flags
        raise UsageError(exc.said(lambda field: "--" + field.replace("_", "-"))) from None
