"""``ironcurtain run --approval web``: the approvals page as the session's own channel. The
session prints the page's address (with its token) on stderr at start; a real MCP client's
escalated call waits until it is answered there, in a real browser (Debian's chromium); the
page is gone when the session stops. A mode that does not exist is one clear error."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.error
import urllib.request
from pathlib import Path

from tests.sandbox.test_approvals_page import ASK, _browser, _opened
from tests.support.cli import ironcurtain
from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.paths import IRONCURTAIN
from tests.support.probe import probe_session
from tests.support.sdk import call, connect

pytestmark = needs_bwrap

SAID = re.compile(r"ironcurtain: approvals page: open (http://127\.0\.0\.1:\d+/\?token=[\w-]+)")


async def _address(stderr: Path) -> str:
    """The page's address, once the session has said it."""
    for _ in range(600):
        found = SAID.search(stderr.read_text()) if stderr.exists() else None
        if found:
            return found.group(1)
        await asyncio.sleep(0.1)
    raise AssertionError(f"no page address in the session's stderr: {stderr.read_text()!r}")


def test_a_sessions_question_is_answered_on_its_page(user: Home, run_dir: Path) -> None:
    args, _, audit = probe_session(user, first=[ASK])
    stderr = user.root / "run.stderr"
    # The session's stderr to a file (the client's stdio is the protocol).
    wrapped = ["sh", "-c", f'exec "$0" run "$@" 2>>"{stderr}"', IRONCURTAIN]
    state: dict[str, str] = {}

    async def scenario() -> None:
        async with connect(user, command=[*wrapped, *args, "--approval", "web"]) as client:
            url = await _address(stderr)
            state["url"] = url
            async with _browser() as browser:
                page = await _opened(browser, url)
                asked = asyncio.create_task(call(client, "probe__env_value", {"name": "HOME"}))
                question = page.locator(".question")
                await question.wait_for(timeout=60_000)
                shown = await question.inner_text()
                assert "env_value" in shown and '"name": "HOME"' in shown, shown
                await asyncio.sleep(1)
                assert not asked.done()  # nobody answered yet: it waits for the page
                await page.get_by_role("button", name="Approve", exact=True).click()
                out = await asyncio.wait_for(asked, 60)
                assert out[0] is False and "ESCALATION" not in out[1], out
                # Approved once, not for the session: the same call asks again.
                again = asyncio.create_task(call(client, "probe__env_value", {"name": "HOME"}))
                await page.locator(".question").wait_for(timeout=60_000)
                await page.get_by_role("button", name="Deny").click()
                out = await asyncio.wait_for(again, 60)
                assert out[0] and "the user answered deny" in out[1], out
                # The audit log's decisions, as the log has them: the argument hashed.
                rows = page.locator("#logged tr")
                await page.wait_for_function(
                    "document.querySelectorAll('#logged tr').length === 3", timeout=60_000
                )
                state["logged"] = await page.locator("#logged").inner_text()
                state["rows"] = str(await rows.count())

    asyncio.run(scenario())
    assert "approvals: " in stderr.read_text() and "approvals page" in stderr.read_text()
    entries = [json.loads(line) for line in audit.read_text().splitlines()]
    hashed = entries[0]["arguments"]["name"]
    assert hashed.startswith("sha256:") and hashed in state["logged"], state["logged"]
    assert "HOME" not in state["logged"]
    newest, oldest = state["logged"].splitlines()[1:3]
    assert "denied" in newest and "approved" in oldest, state["logged"]
    assert ironcurtain(user, "audit", "verify", str(audit)).returncode == 0  # only read
    # The session stopped: so did its page.
    try:
        urllib.request.urlopen(state["url"], timeout=10)
        raise AssertionError("the page still answers after its session stopped")
    except urllib.error.URLError as exc:
        assert isinstance(exc.reason, ConnectionRefusedError), exc


def test_a_mode_that_does_not_exist_is_one_clear_error(user: Home) -> None:
    args, _, _ = probe_session(user)
    done = ironcurtain(user, "run", *args, "--approval", "webpage")
    assert done.returncode == 2, done.stderr
    assert "--approval" in done.stderr and "auto, elicit, socket, web or deny" in done.stderr
    assert "Traceback" not in done.stderr and "approvals page: open" not in done.stderr
