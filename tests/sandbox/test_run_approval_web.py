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

from playwright.async_api import Page

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
    # The token went to the session's stderr only: no log, record or state file holds it.
    token = state["url"].split("token=", 1)[1]
    holding = [
        p for p in user.root.rglob("*")
        if p.is_file() and p != stderr and token.encode() in p.read_bytes()
    ]  # fmt: skip
    assert not holding, holding
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


POST = """async (fields) => { const r = await fetch('/answer', {method: 'POST',
    body: new URLSearchParams(fields), redirect: 'manual'});
    return r.type === 'opaqueredirect' ? 'taken' : r.status + ' ' + await r.text(); }"""


async def _fields(page: Page, answer: str, after: str = "") -> dict[str, str]:
    """The open question's form, as the page holds it, with ``answer`` (``after``: the id
    of a question before it, no longer open)."""
    form = page.locator(f'.question:not([data-id="{after}"]) form')
    await form.wait_for(timeout=60_000)
    names = ("csrf", "session", "id")
    values = [await form.locator(f'input[name="{n}"]').get_attribute("value") for n in names]
    return {**dict(zip(names, map(str, values), strict=True)), "answer": answer}


def test_a_stale_or_repeated_answer_approves_nothing_else(user: Home, run_dir: Path) -> None:
    """An approve posted again after its call gave up (timed out), or twice at once, or two
    operators answering at once: each call gets one answer, and no answer carries over to the
    next identical call (control: the same POST for the question open now approves it)."""
    args, _, audit = probe_session(user, first=[ASK])
    stderr = user.root / "run.stderr"
    wrapped = ["sh", "-c", f'exec "$0" run "$@" 2>>"{stderr}"', IRONCURTAIN]
    extra = ["--approval", "web", "--approval-timeout", "8"]  # long enough to be seen
    env = {"name": "HOME"}
    outs: list[tuple[bool, str]] = []

    async def scenario() -> None:
        async with connect(user, command=[*wrapped, *args, *extra]) as client:
            url = await _address(stderr)
            async with _browser() as browser:
                page = await _opened(browser, url)
                other = await _opened(browser, url)  # a second operator, same user
                first = asyncio.create_task(call(client, "probe__env_value", env))
                stale = await _fields(page, "approve")
                outs.append(await asyncio.wait_for(first, 60))  # no answer: timed out
                said = await page.evaluate(POST, stale)
                assert said.startswith("409 not taken: that question is no longer open"), said
                # The identical call asks again; the stale approve did not answer it.
                second = asyncio.create_task(call(client, "probe__env_value", env))
                live = await _fields(page, "approve", stale["id"])
                assert (await page.evaluate(POST, stale)).startswith("409 "), "stale taken"
                outs.append(await asyncio.wait_for(second, 60))
                # Control: the live question's own form, posted twice at once, approves it.
                third = asyncio.create_task(call(client, "probe__env_value", env))
                live = await _fields(page, "approve", live["id"])
                said_twice = await asyncio.gather(
                    page.evaluate(POST, live), page.evaluate(POST, live)
                )
                assert "taken" in said_twice, said_twice
                outs.append(await asyncio.wait_for(third, 60))
                # Two operators at once, one approving, one denying: one answer counts.
                fourth = asyncio.create_task(call(client, "probe__env_value", env))
                denying = await _fields(other, "deny", live["id"])
                approving = await _fields(page, "approve", live["id"])
                await asyncio.gather(page.evaluate(POST, approving), other.evaluate(POST, denying))
                outs.append(await asyncio.wait_for(fourth, 60))
                # And nothing is left over for the next identical call: it times out.
                outs.append(await call(client, "probe__env_value", env))

    asyncio.run(scenario())
    timed_out, after_stale, approved, raced, last = outs
    assert timed_out[0] and "ESCALATION" in timed_out[1], timed_out
    assert after_stale[0] and "ESCALATION" in after_stale[1], after_stale
    assert approved[0] is False, approved
    assert last[0] and "ESCALATION" in last[1], last
    calls = [e for e in map(json.loads, audit.read_text().splitlines()) if e.get("tool")]
    assert [e["escalation"] for e in calls][:3] == ["timeout", "timeout", "approved"], calls
    assert len(calls) == 5  # one entry per call: the race gave its call one answer
    assert calls[3]["escalation"] == ("denied" if raced[0] else "approved"), (raced, calls[3])
