"""``ironcurtain approvals --web --webhook URL --webhook-secret-file FILE``: each question a
real session asks is announced to a real HTTP receiver on loopback, signed (HMAC-SHA256
over the timestamp and the body, with the shared secret) and tried again when the receiver
fails; the answer still comes through the page only. A secret file others may read, or a
webhook without the page, is refused."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import http.cookiejar
import json
import re
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

from tests.support.cli import ironcurtain
from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.paths import IRONCURTAIN
from tests.support.probe import probe_session
from tests.support.sdk import call, connect

ASK = {
    "name": "ask-before-env",
    "if": {"tool": ["env_value"]},
    "then": "escalate",
    "reason": "reading the server's environment needs a human",
}
SECRET = "webhook-secret-0123456789-abcdefghij"
URL = re.compile(rb"open (http://127\.0\.0\.1:(\d+)/\?token=[A-Za-z0-9_-]+)")


def _verified(secret: str, headers: Any, body: bytes) -> bool:
    """The receiver's check: the signature is HMAC-SHA256(secret, timestamp "." body), and
    the timestamp recent."""
    stamp = headers.get("X-IronCurtain-Timestamp", "")
    given = headers.get("X-IronCurtain-Signature", "")
    mac = hmac.new(secret.encode(), stamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    fresh = stamp.isdigit() and abs(time.time() - int(stamp)) < 300
    return fresh and hmac.compare_digest(given, f"sha256={mac}")


class _Receiver(BaseHTTPRequestHandler):
    """A chat tool's incoming hook: fails the first POST (500), takes the others (204);
    a hanging one answers nothing for a minute."""

    got: ClassVar[list[tuple[Any, bytes]]] = []
    hangs: ClassVar[bool] = False

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.got.append((self.headers, body))
        if self.hangs:
            time.sleep(60)
        self.send_response(500 if len(self.got) == 1 else 204)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def _receiver(hangs: bool = False) -> Iterator[tuple[str, list[tuple[Any, bytes]]]]:
    got: list[tuple[Any, bytes]] = []
    handler = type("R", (_Receiver,), {"got": got, "hangs": hangs})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", got
    finally:
        server.shutdown()
        server.server_close()


def _secret_file(user: Home, mode: int = 0o600) -> Path:
    path = user.root / "webhook-secret"
    path.write_text(SECRET + "\n")
    path.chmod(mode)
    return path


class _Page:
    """The page as a browser holding its cookie uses it (urllib)."""

    def __init__(self, url: str) -> None:
        self.base = url.split("/?", 1)[0]
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
        )
        self.opener.open(url, timeout=10).read()

    def html(self) -> str:
        with self.opener.open(self.base + "/", timeout=10) as reply:
            return str(reply.read().decode())

    def answer(self, html: str, answer: str) -> None:
        fields = dict(re.findall(r'name="(csrf|session|id)" value="([^"]*)"', html))
        fields["answer"] = answer
        request = urllib.request.Request(
            self.base + "/answer",
            urllib.parse.urlencode(fields).encode(),
            headers={"Origin": self.base},
        )
        self.opener.open(request, timeout=10).read()


async def _until(check: Any, what: str) -> Any:
    for _ in range(600):
        found = await asyncio.to_thread(check)
        if found:
            return found
        await asyncio.sleep(0.1)
    raise AssertionError(f"never: {what}")


def _asked_and_approved(
    user: Home, hangs: bool = False
) -> tuple[tuple[bool, str], list[tuple[Any, bytes]], str]:
    """A session's escalated call, announced to a receiver (``hangs``: one that never
    answers) and approved on the page: the call's outcome, what the receiver had got by the
    time the call completed, and the page's address."""
    args, _, _ = probe_session(user, first=[ASK])
    secret = _secret_file(user)
    result: list[Any] = []

    async def scenario() -> None:
        with _receiver(hangs) as (hook, got):
            async with connect(user, *args) as client:
                page_proc = await asyncio.create_subprocess_exec(
                    IRONCURTAIN, "approvals", "--web", "--webhook", hook,
                    "--webhook-secret-file", str(secret), env=user.env,
                    stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                )  # fmt: skip
                assert page_proc.stdout
                try:
                    found = URL.search(await asyncio.wait_for(page_proc.stdout.readline(), 60))
                    assert found
                    page = _Page(found.group(1).decode())
                    await _until(lambda: "attached to session" in page.html(), "attached")
                    asked = asyncio.create_task(call(client, "probe__env_value", {"name": "HOME"}))
                    await _until(lambda: len(got) >= 1 + (not hangs), "the announcement(s)")
                    html = await _until(
                        lambda: next((h for h in [page.html()] if 'class="question"' in h), None),
                        "the question on the page",
                    )
                    assert not asked.done()  # the webhook answers nothing
                    await asyncio.to_thread(page.answer, html, "approve")
                    out = await asyncio.wait_for(asked, 60)
                    tries_by_then = len(got)
                finally:
                    page_proc.terminate()
                    await page_proc.wait()
            result.extend([out, list(got)[:tries_by_then], page.base])

    asyncio.run(scenario())
    return result[0], result[1], result[2]


@needs_bwrap
def test_each_question_is_announced_signed_and_answered_on_the_page(
    user: Home, run_dir: Path
) -> None:
    out, got, base = _asked_and_approved(user)
    assert out[0] is False and "ESCALATION" not in out[1], out
    # The first attempt failed (500) and the same announcement came again, signed anew.
    first, second = got[0], got[1]
    assert first[1] == second[1]
    for headers, body in (first, second):
        assert _verified(SECRET, headers, body)
        # Control: the receiver's check refuses what another secret signed.
        assert not _verified("another-secret-0123456789-abcdefghij", headers, body)
    announced = json.loads(second[1])
    assert announced["server"] == "probe" and announced["tool"] == "env_value"
    assert announced["rule"] == "ask-before-env"
    assert announced["answerAt"] == base + "/"
    assert "arguments" not in announced and "HOME" not in second[1].decode()
    # Control of the signature: a body changed on the way no longer verifies.
    assert not _verified(SECRET, second[0], second[1].replace(b"probe", b"other"))


@needs_bwrap
def test_a_receiver_that_never_answers_holds_up_no_question(user: Home, run_dir: Path) -> None:
    # The receiver takes the announcement and hangs; the question is on the page and its
    # approval completes the call meanwhile, long before the webhook has made all its tries
    # (5 s each): the announcing never waited in the way of the answer.
    out, got, _ = _asked_and_approved(user, hangs=True)
    assert out[0] is False and "ESCALATION" not in out[1], out
    assert 1 <= len(got) < 3, len(got)


def test_a_secret_others_can_read_or_a_webhook_without_the_page_is_refused(user: Home) -> None:
    loose = _secret_file(user, 0o644)
    done = ironcurtain(
        user, "approvals", "--web", "--webhook", "http://127.0.0.1:9/hook",
        "--webhook-secret-file", str(loose),
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "--webhook-secret-file: " in done.stderr and "can be read by others" in done.stderr
    assert "Traceback" not in done.stderr
    loose.chmod(0o600)
    done = ironcurtain(
        user, "approvals", "--web", "--webhook", "ftp://example.org/",
        "--webhook-secret-file", str(loose),
    )  # fmt: skip
    assert done.returncode == 2 and "not an http:// or https:// URL" in done.stderr
    done = ironcurtain(user, "approvals", "--webhook", "http://127.0.0.1:9/hook")
    assert done.returncode == 2 and "use it with --web" in done.stderr
