"""The approvals webhook tells a chat room that a question waits, never what the call's
arguments hold: a call that would write beyond its server's sandbox is announced without the
path an approval would open (the page, for the operator, shows it). Real bwrap, the bundled
filesystem server, a real receiver on loopback."""

from __future__ import annotations

import asyncio
import json
import subprocess

from tests.sandbox.test_approvals_webhook import URL, _Page, _receiver, _secret_file, _until
from tests.sandbox.test_widen import _places
from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.paths import IRONCURTAIN
from tests.support.sdk import call, connect

SECRET_NAME = "merger-with-acme-plan.md"  # a file name a chat room should not hear


def _question(page: _Page) -> str | None:
    html = page.html()
    return html if 'class="question"' in html else None


@needs_bwrap
def test_a_widening_question_is_announced_without_its_path(user: Home) -> None:
    ws, notes, audit = _places(user)
    target = notes / SECRET_NAME
    secret = _secret_file(user)
    seen: dict[str, object] = {}

    async def scenario() -> None:
        args = ["--server", "filesystem", "--workspace", str(ws), "--audit-log", str(audit)]
        with _receiver() as (hook, got):
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
                    page = await asyncio.to_thread(_Page, found.group(1).decode())
                    await _until(lambda: "attached to session" in page.html(), "the page attached")
                    writing = {"path": str(target), "content": "x"}
                    asked = asyncio.create_task(call(client, "write_file", writing))
                    html = await _until(lambda: _question(page), "the question on the page")
                    await _until(lambda: len(got) >= 2, "the announcement (after one retry)")
                    seen["html"], seen["body"] = html, got[-1][1].decode()
                    await asyncio.to_thread(page.answer, html, "deny")
                    seen["out"] = await asyncio.wait_for(asked, 60)
                finally:
                    page_proc.terminate()
                    await page_proc.wait()

    asyncio.run(scenario())
    # Control: the question had the path (the page shows the operator what it would open).
    assert SECRET_NAME in str(seen["html"]), seen["html"]
    body = str(seen["body"])
    assert SECRET_NAME not in body and str(notes) not in body, body
    announced = json.loads(body)
    assert announced["beyondSandbox"] is True and announced["tool"] == "write_file"
    assert not target.exists()


def _first_lines(user: Home, hook: str) -> str:
    """What ``approvals --web`` with ``hook`` says on stderr before it serves."""
    secret = _secret_file(user)
    with subprocess.Popen(
        [IRONCURTAIN, "approvals", "--web", "--webhook", hook, "--webhook-secret-file",
         str(secret)],
        env=user.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    ) as proc:  # fmt: skip
        assert proc.stdout and proc.stderr
        try:
            assert URL.search(proc.stdout.readline())  # served
        finally:
            proc.terminate()
        return proc.stderr.read().decode()


def test_a_webhook_in_clear_to_another_machine_is_warned_of(user: Home) -> None:
    said = _first_lines(user, "http://192.0.2.7/hook")
    assert "WARNING: --webhook http://192.0.2.7/hook is plain http" in said, said
    # Control: plain http to this machine's loopback, and https anywhere, are not.
    for quiet in ("http://127.0.0.1:9/hook", "https://192.0.2.7/hook"):
        said = _first_lines(user, quiet)
        assert "WARNING" not in said, (quiet, said)
