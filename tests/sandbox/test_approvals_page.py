"""``ironcurtain approvals --web`` in a real browser (Debian's chromium, driven by
playwright): a real session's escalated call, made by a real MCP client, waits; its question
appears on the page; approving there completes the call. The page refuses whoever lacks its
token, and a POST from another page in the same browser (a page of another origin, holding
the page's cookie as the browser sends it) answers nothing; a question's arguments that hold
markup show as text, and no script in them runs."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Page, async_playwright

from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.paths import IRONCURTAIN
from tests.support.probe import probe_session
from tests.support.sdk import call, connect

pytestmark = needs_bwrap

CHROMIUM = "/usr/bin/chromium"
ASK = {
    "name": "ask-before-env",
    "if": {"tool": ["env_value"]},
    "then": "escalate",
    "reason": "reading the server's environment needs a human",
}
URL = re.compile(rb"open (http://127\.0\.0\.1:(\d+)/\?token=([A-Za-z0-9_-]+))")


@asynccontextmanager
async def _browser() -> AsyncIterator[Browser]:
    """Debian's chromium, headless (a test fails, never skips, where it is missing: CI and
    ``scripts/install.sh --dev`` install it)."""
    if not os.access(CHROMIUM, os.X_OK) and shutil.which("chromium") is None:
        pytest.fail("chromium is not installed (scripts/install.sh --dev installs it)")
    args = ["--disable-background-networking", "--disable-dev-shm-usage", "--no-first-run"]
    if os.getuid() == 0:
        args.append("--no-sandbox")  # chromium's own sandbox refuses to start as root
    async with async_playwright() as driver:
        browser = await driver.chromium.launch(
            executable_path=CHROMIUM if os.access(CHROMIUM, os.X_OK) else shutil.which("chromium"),
            headless=True,
            args=args,
        )
        try:
            yield browser
        finally:
            await browser.close()


@asynccontextmanager
async def _page_server(user: Home) -> AsyncIterator[tuple[str, int]]:
    """``ironcurtain approvals --web`` as ``user``: the address it printed, and its port."""
    proc = await asyncio.create_subprocess_exec(
        IRONCURTAIN, "approvals", "--web", env=user.env,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        found = URL.search(line)
        assert found, line
        yield found.group(1).decode(), int(found.group(2))
    finally:
        proc.terminate()
        await proc.wait()


class _Foreign(BaseHTTPRequestHandler):
    """Another site's page: it posts an approval to the approvals page as soon as it loads."""

    form: bytes = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(self.form)

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def _foreign_site(target: str, fields: dict[str, str]) -> Iterator[str]:
    inputs = "".join(f'<input type="hidden" name="{k}" value="{v}">' for k, v in fields.items())
    form = (
        f'<html><body><form id="f" method="post" action="{target}">{inputs}</form>'
        '<script>document.getElementById("f").submit()</script></body></html>'
    ).encode()
    handler = type("Foreign", (_Foreign,), {"form": form})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


async def _opened(browser: Browser, url: str) -> Page:
    """The page opened at its printed address, once it is attached to the session."""
    page = await browser.new_page()
    await page.goto(url)
    await page.wait_for_function(
        "document.getElementById('notes') && "
        "document.getElementById('notes').textContent.includes('attached to session')",
        timeout=60_000,
    )
    return page


def test_a_question_is_answered_on_the_page_and_foreign_requests_answer_nothing(
    user: Home, run_dir: Path
) -> None:
    args, _, _ = probe_session(user, first=[ASK])

    async def scenario() -> None:
        async with (
            connect(user, *args) as client,
            _page_server(user) as (url, port),
            _browser() as browser,
        ):
            base = f"http://127.0.0.1:{port}"
            # Without the token (a fresh browser context: no cookie), or with a wrong one:
            # refused. Control: with the token, the page.
            stranger = await browser.new_context()
            for address in (f"{base}/", f"{base}/?token=wrong", f"{base}/board"):
                reply = await (await stranger.new_page()).goto(address)
                assert reply is not None and reply.status == 403, address
            reply = await (await stranger.new_page()).goto(url)
            assert reply is not None and reply.status == 200
            assert "ironcurtain approvals" in await reply.text()
            await stranger.close()

            page = await _opened(browser, url)
            assert "token=" not in page.url  # the address bar keeps no token
            asked = asyncio.create_task(call(client, "probe__env_value", {"name": "HOME"}))
            question = page.locator(".question")
            await question.wait_for(timeout=60_000)
            shown = await question.inner_text()
            for said in ("probe", "env_value", "ask-before-env", '"name": "HOME"'):
                assert said in shown, shown
            session = await question.get_attribute("data-session")
            qid = await question.get_attribute("data-id")
            csrf = await page.locator('meta[name="csrf"]').get_attribute("content")
            assert session and qid and csrf

            # Another origin's page in the same browser (its cookie goes along: same host),
            # posting a complete, valid answer, form token and all: refused, still pending.
            fields = {"csrf": csrf, "session": session, "id": qid, "answer": "approve"}
            with _foreign_site(f"{base}/answer", fields) as foreign:
                attacker = await browser.new_page()
                async with attacker.expect_response(f"{base}/answer") as posted:
                    await attacker.goto(foreign)
                assert (await posted.value).status == 403
            await asyncio.sleep(2)
            assert not asked.done()
            assert await page.locator(".question").count() == 1
            # Control: the same fields posted from the page's own origin are taken (below,
            # by its button); a wrong form token from the page's own origin is refused.
            status = await page.evaluate(
                """async (fields) => (await fetch('/answer', {method: 'POST',
                    body: new URLSearchParams(fields), redirect: 'manual'})).status""",
                {**fields, "csrf": "0" * 64},
            )
            assert status == 403
            assert not asked.done()

            await page.get_by_role("button", name="Approve", exact=True).click()
            out = await asyncio.wait_for(asked, 60)
            assert out[0] is False and "ESCALATION" not in out[1], out
            await page.locator("#recent").wait_for(timeout=30_000)
            assert "approve" in await page.locator("#recent").inner_text()
            assert await page.locator(".question").count() == 0

    asyncio.run(scenario())


PAYLOAD = (
    '</pre><script>window.pwned = 1; document.title = "pwned"</script>'
    '<img src=x onerror="window.pwned = 2">'
)


def test_arguments_holding_markup_show_as_text_and_run_nothing(user: Home, run_dir: Path) -> None:
    args, _, _ = probe_session(user, first=[ASK])

    async def scenario() -> None:
        async with (
            connect(user, *args) as client,
            _page_server(user) as (url, _),
            _browser() as browser,
        ):
            # Control: the payload is live markup in this browser (its script runs).
            control = await browser.new_page()
            await control.set_content(f"<html><body><pre>{PAYLOAD}</body></html>")
            assert await control.evaluate("window.pwned") in (1, 2)

            page = await _opened(browser, url)
            asked = asyncio.create_task(call(client, "probe__env_value", {"name": PAYLOAD}))
            question = page.locator(".question")
            await question.wait_for(timeout=60_000)
            assert "<script>window.pwned = 1" in await question.inner_text()
            await page.reload()  # the first render too, not only the live update
            await page.locator(".question").wait_for(timeout=60_000)
            assert "<script>window.pwned = 1" in await page.locator(".question").inner_text()
            assert await page.evaluate("window.pwned") is None
            assert await page.title() == "ironcurtain approvals"
            assert await page.locator(".question img").count() == 0
            await page.get_by_role("button", name="Deny").click()
            out = await asyncio.wait_for(asked, 60)
            assert out[0] and "the user answered deny" in out[1], out

    asyncio.run(scenario())
