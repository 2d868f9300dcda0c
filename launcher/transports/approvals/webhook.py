"""The approvals webhook: each question a session asks is announced by a signed POST to a
URL (a chat tool's incoming hook, a bot), so someone away from the page hears of it. It only
announces: the answer comes through the page or a terminal, never the webhook.

The body is JSON (the question without its arguments, which may hold what a chat room should
not see: neither their values nor the paths an approval would open, only whether it would
open any; and where to answer). Headers: ``X-IronCurtain-Timestamp`` (Unix seconds) and
``X-IronCurtain-Signature: sha256=<hex>``, the HMAC-SHA256 with the shared secret of
``<timestamp>.<body>``; a receiver recomputes it, compares in constant time and refuses an
old timestamp. Sent from a thread of its own, tried a few times, never holding up a question.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import queue
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

from launcher.shared.user_errors import UsageError

TRIES = 3  # attempts per announcement
BACKOFF = 0.5  # seconds before the second attempt, doubled for each one after
TIMEOUT = 5.0  # seconds for one attempt
BACKLOG = 100  # announcements waiting at most; more are dropped and said
SIGNATURE = "X-IronCurtain-Signature"
TIMESTAMP = "X-IronCurtain-Timestamp"


def signature(secret: bytes, timestamp: str, body: bytes) -> str:
    """The signature header's value for ``body`` sent at ``timestamp``.

    >>> signature(b"k" * 32, "1700000000", b"{}")[:15]
    'sha256=0b3b3552'
    """
    digest = hmac.new(secret, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def check_url(url: str) -> str:
    """``url`` when it is an http(s) URL with a host; a :class:`UsageError` otherwise."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"the webhook {url!r} is not an http:// or https:// URL", "webhook")
    return url


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a redirect is an error: the signed body goes where it was told


class Webhook:
    """Announces questions to ``url``, signed with ``secret``; ``page``: where they are
    answered (the page's address, without its token); ``note``: told what failed."""

    def __init__(self, url: str, secret: str, page: str, note: Callable[[str], None]) -> None:
        self.url = check_url(url)
        self._secret = secret.encode()
        self.page = page
        self.note = note
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(BACKLOG)
        self._opener = urllib.request.build_opener(_NoRedirects)
        self._thread = threading.Thread(target=self._run, name="approvals-webhook", daemon=True)
        self._thread.start()

    def announce(self, session: str, message: dict[str, Any]) -> None:
        """Queue the announcement of ``session``'s question ``message`` (never waits)."""
        body: dict[str, Any] = {
            "type": "approval-question",
            "session": session,
            "id": message.get("id"),
            "asked": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            **{
                k: message[k]
                for k in ("server", "tool", "rule", "reason", "question", "caller")
                if k in message
            },
            # What approving would grant names the paths of the arguments: the room hears
            # only that there is something beyond the sandbox; the page says what.
            "beyondSandbox": bool(message.get("grant")),
            "answerAt": self.page,
        }
        try:
            self._queue.put_nowait(body)
        except queue.Full:
            self.note(f"webhook: {BACKLOG} announcements waiting; this one is dropped")

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join(TIMEOUT)

    def _run(self) -> None:
        while (body := self._queue.get()) is not None:
            self._send(json.dumps(body, ensure_ascii=False, sort_keys=True).encode())

    def _send(self, body: bytes) -> None:
        why = ""
        for attempt in range(TRIES):
            if attempt:
                time.sleep(BACKOFF * 2 ** (attempt - 1))
            stamp = str(int(time.time()))
            request = urllib.request.Request(self.url, body, method="POST")
            request.add_header("Content-Type", "application/json")
            request.add_header(TIMESTAMP, stamp)
            request.add_header(SIGNATURE, signature(self._secret, stamp, body))
            try:
                with self._opener.open(request, timeout=TIMEOUT) as reply:
                    if 200 <= reply.status < 300:
                        return
                    why = f"HTTP {reply.status}"
            except urllib.error.HTTPError as exc:
                why = f"HTTP {exc.code}"
            except (OSError, ValueError) as exc:
                why = str(getattr(exc, "reason", exc))
        self.note(f"webhook: {self.url} did not take an announcement after {TRIES} tries ({why})")
