"""The approvals page attacked from the operator's own browser and from this machine:

- another local user's server on another port of 127.0.0.1 is sent the page's cookie by the
  browser (cookies are not kept apart by port); that user, holding it, opens and answers
  nothing (control: the same stolen cookie from this user's process opens the page);
- another site frames the page to have the operator click through it (clickjacking; framed
  at its printed address, so the frame would hold the cookie): the browser shows nothing of
  it in the frame (control: a frameable page in the same frame);
- another site reads the live stream or the board with ``EventSource``/``fetch``: refused;
- a call's arguments or names holding characters that reorder or hide text (U+202E and the
  like) show as escapes, never reordering what the operator reads.

Real chromium (playwright), a real ``ironcurtain approvals --web`` and, for the questions, a
real session's escalated call."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page

from launcher.transports.approvals.page import COOKIE
from tests.sandbox.test_approvals_page import ASK, _browser, _opened, _page_server
from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.probe import probe_session
from tests.support.sdk import call, connect

OTHER_UID = 65534

# What another user runs with the cookie its server was sent: the page's board, and an
# answer posted with the page's own Origin (a script sets any header it likes).
USE_COOKIE = r"""
import sys, urllib.request, urllib.error
base, cookie, first = sys.argv[1], sys.argv[2], sys.argv[3]
def go(path, data=None):
    req = urllib.request.Request(base + path, data, headers={"Cookie": cookie, "Origin": base})
    try:
        with urllib.request.urlopen(req, timeout=30) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
answer = b"csrf=x&session=s&id=q1&answer=approve"
for status, body in (go(first), go("/board"), go("/answer", answer)):
    print(status, body.replace("\n", " ")[:300])
"""


class _Neighbour(BaseHTTPRequestHandler):
    """Another local service on 127.0.0.1 the operator's browser visits: keeps the cookies
    it is sent."""

    cookies: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.cookies.append(self.headers.get("Cookie", ""))
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(b"<html><body>hello</body></html>")

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def _site(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _use_cookie(base: str, cookie: str, uid: int | None, first: str = "/") -> list[str]:
    """``USE_COOKIE`` run as ``uid`` (None: as this process's user): its lines."""
    done = subprocess.run(
        ["/usr/bin/python3", "-c", USE_COOKIE, base, cookie, first],
        capture_output=True, text=True, timeout=120, check=True, cwd="/",
        user=uid, group=uid, extra_groups=[] if uid is not None else None,
    )  # fmt: skip
    return done.stdout.splitlines()


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user needs root")
def test_a_cookie_leaked_to_another_users_port_opens_nothing(user: Home, run_dir: Path) -> None:
    async def scenario() -> None:
        async with _page_server(user) as (url, port), _browser() as browser:
            base = f"http://127.0.0.1:{port}"
            page = await browser.new_page()
            await page.goto(url)
            assert "ironcurtain approvals" in await page.content()
            sent: list[str] = []
            with _site(type("N", (_Neighbour,), {"cookies": sent})) as neighbour:
                await page.goto(neighbour + "/")
            stolen = [c for c in sent if f"{COOKIE}=" in c]
            assert stolen, sent  # the browser did hand it over
            theirs = await asyncio.to_thread(_use_cookie, base, stolen[0], OTHER_UID)
            assert len(theirs) == 3 and all(line.startswith("403 ") for line in theirs), theirs
            assert not any("csrf" in line or "Waiting for you" in line for line in theirs)
            # Control: the very same cookie, from a process of this user's, is the page.
            ours = await asyncio.to_thread(_use_cookie, base, stolen[0], None)
            assert ours[0].startswith("200 ") and 'name="csrf"' in ours[0], ours
            assert ours[1].startswith("200 ") and "Waiting for you" in ours[1], ours
            # And the printed address itself, in another user's hands: refused too.
            first = url.removeprefix(base)
            theirs = await asyncio.to_thread(_use_cookie, base, "", OTHER_UID, first)
            assert theirs[0].startswith("403 "), theirs

    asyncio.run(scenario())


class _Framer(BaseHTTPRequestHandler):
    """Another site's page: frames ``target`` (to have the operator click through it), and
    reads the page's live stream and board from its script."""

    target: ClassVar[str] = ""
    framed: ClassVar[str] = ""  # the page's printed address, to leave the cookie out of it

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        if self.path.startswith("/plain"):
            self.wfile.write(b"<html><body><h1>a frameable page</h1></body></html>")
            return
        script = (
            "window.got = {};"
            f"const s = new EventSource('{self.target}/events', {{withCredentials: true}});"
            "s.onmessage = s.onopen = () => { window.got.events = 'open'; };"
            "s.addEventListener('board', () => { window.got.events = 'read'; });"
            "s.onerror = () => { window.got.events = window.got.events || 'refused'; };"
            f"fetch('{self.target}/board', {{credentials: 'include'}})"
            ".then(r => r.text()).then(t => { window.got.board = t; })"
            ".catch(() => { window.got.board = 'refused'; });"
        )
        frame = self.framed if "frame" in self.path else "/plain"
        self.wfile.write(
            f'<html><body><iframe id="f" src="{frame}" width="800" height="600"></iframe>'
            f"<script>{script}</script></body></html>".encode()
        )

    def log_message(self, *args: Any) -> None:
        pass


async def _frame_text(page: Page) -> str:
    """What the operator would see in the page's one frame (its text, "" when blocked)."""
    frame = page.frames[1]
    try:
        return str(await frame.evaluate("document.body ? document.body.innerText : ''"))
    except PlaywrightError:
        return ""


def test_another_site_cannot_frame_or_read_the_page(user: Home, run_dir: Path) -> None:
    async def scenario() -> None:
        async with _page_server(user) as (url, port), _browser() as browser:
            base = f"http://127.0.0.1:{port}"
            page = await browser.new_page()
            await page.goto(url)  # the operator's cookie is set
            handler = type("F", (_Framer,), {"target": base, "framed": url})
            with _site(handler) as foreign:
                # Control: a frameable page shows in the same frame.
                control = await browser.new_page()
                await control.goto(foreign + "/control")
                await control.wait_for_function("window.got.board && window.got.events")
                assert "a frameable page" in await _frame_text(control)
                attacker = await browser.new_page()
                await attacker.goto(foreign + "/frame")
                await attacker.wait_for_function("window.got.board && window.got.events")
                assert "approvals" not in await _frame_text(attacker)
                got = await attacker.evaluate("window.got")
                assert got == {"board": "refused", "events": "refused"}, got
            # Control: the page's own script reads both.
            read = await page.evaluate(
                """async () => [await (await fetch('/board')).text(),
                    await new Promise(done => { const s = new EventSource('/events');
                        s.addEventListener('board', e => { s.close(); done(e.data); }); })]"""
            )
            assert "Waiting for you" in read[0] and read[1].isdigit(), read

    asyncio.run(scenario())


def test_a_rebound_name_is_refused_even_with_the_cookie(user: Home, run_dir: Path) -> None:
    """DNS rebinding: a name of the attacker's that now resolves to 127.0.0.1 puts that name
    in ``Host``; the page answers only at 127.0.0.1:PORT (control: the same request with the
    page's own ``Host``)."""

    async def scenario() -> None:
        async with _page_server(user) as (url, port), _browser() as browser:
            page = await browser.new_page()
            await page.goto(url)
            cookie = next(c for c in await page.context.cookies() if c["name"] == COOKIE)
            jar = f"{COOKIE}={cookie['value']}"
            for host, status in ((f"rebound.example:{port}", 421), (f"127.0.0.1:{port}", 200)):
                got = await asyncio.to_thread(_get, port, host, jar)
                assert got[0] == status, (host, got)
            assert "Waiting for you" in got[1]

    asyncio.run(scenario())


def _get(port: int, host: str, cookie: str) -> tuple[int, str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", "/board", headers={"Host": host, "Cookie": cookie})
        reply = connection.getresponse()
        return reply.status, reply.read().decode()
    finally:
        connection.close()


RLO = "\u202e"  # right-to-left override: "/tmp/" RLO "gpj.sh" reads as "/tmp/hs.jpg"


@needs_bwrap
def test_text_reordering_characters_show_as_escapes(user: Home, run_dir: Path) -> None:
    args, _, _ = probe_session(user, first=[ASK])
    name = f"/tmp/{RLO}gpj.sh"

    async def scenario() -> None:
        async with (
            connect(user, *args) as client,
            _page_server(user) as (url, _),
            _browser() as browser,
        ):
            # Control: shown raw, the browser keeps the override (and reorders the text).
            control = await browser.new_page()
            await control.set_content(f"<html><body><pre>{json.dumps(name, ensure_ascii=False)}")
            assert RLO in await control.inner_text("pre")

            page = await _opened(browser, url)
            asked = asyncio.create_task(call(client, "probe__env_value", {"name": name}))
            question = page.locator(".question")
            await question.wait_for(timeout=60_000)
            shown = await question.inner_text()
            assert RLO not in shown and "/tmp/\\u202egpj.sh" in shown, shown
            await page.reload()
            await page.locator(".question").wait_for(timeout=60_000)
            assert RLO not in await page.locator(".question").inner_text()
            await page.get_by_role("button", name="Deny").click()
            out = await asyncio.wait_for(asked, 60)
            assert out[0], out
            # The audit log's decision shows too, its argument hashed as the log has it.
            await page.locator("#logged").wait_for(timeout=60_000)
            logged = await page.locator("#logged").inner_text()
            assert "denied" in logged and "sha256:" in logged and "gpj" not in logged, logged

    asyncio.run(scenario())


@needs_bwrap
def test_a_very_long_argument_is_shown_whole(user: Home, run_dir: Path) -> None:
    """What is approved is all of it: an argument of a megabyte, whose end is what matters,
    is on the page to its last character (nothing cut where the operator cannot see)."""
    args, _, _ = probe_session(user, first=[ASK])
    name = "harmless " * 120_000 + "; AND-THEN-THE-REAL-PAYLOAD"

    async def scenario() -> None:
        async with (
            connect(user, *args) as client,
            _page_server(user) as (url, _),
            _browser() as browser,
        ):
            page = await _opened(browser, url)
            asked = asyncio.create_task(call(client, "probe__env_value", {"name": name}))
            shown = page.locator(".question pre")
            await shown.wait_for(timeout=60_000)
            text = await shown.inner_text()
            assert text.count("harmless") == 120_000 and "AND-THEN-THE-REAL-PAYLOAD" in text
            await page.get_by_role("button", name="Deny").click()
            out = await asyncio.wait_for(asked, 60)
            assert out[0], out

    asyncio.run(scenario())
