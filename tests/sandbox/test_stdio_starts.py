"""Every start answers ``tools/list`` whole, however soon the client writes and however long
the answer: a session on stdio started many times under load, with a server whose listing is
longer than a pipe holds (a stdlib server for most starts, the design's git server for some).

A client that writes before the session is ready has its requests read as soon as the
session reads stdin; an answer written then must go through the writer that waits for the
client, never around it while stdout is being made non-blocking (a ``tools/list`` of more
than 64 KiB was then cut off part-way, and the client waited for ever)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tests.support.cli import run_args
from tests.support.client import Client
from tests.support.gitserver import git_server_arguments, needs_git_server, write_git_config
from tests.support.home import Home, git_repo
from tests.support.marks import needs_bwrap
from tests.support.paths import IRONCURTAIN, TESTS
from tests.support.probe import write_raw_policy

pytestmark = needs_bwrap

WIDE = TESTS / "servers" / "wide_list_server.py"
WIDE_TOOLS = {f"tool_{i:03d}": [f"field_{j}" for j in range(6)] for i in range(200)}
ATTEMPT = 30.0  # seconds one start may take before it counts as a hang


def _wide_session(user: Home) -> list[str]:
    sandbox = {"filesystem": {"allowRead": [str(WIDE.parent)]}}
    entry = {"command": sys.executable, "args": [str(WIDE)], "sandbox": sandbox}
    config = user.root / "wide.json"
    config.write_text(json.dumps({"mcpServers": {"wide": entry}}))
    policy = write_raw_policy(user.root / "policy-wide", {"wide": WIDE_TOOLS})
    return run_args(config, policy, user.ws(), user.root / "audit-wide.jsonl")


def _git_session(user: Home) -> list[str]:
    ws = user.ws("repo")
    git_repo(ws)
    config = write_git_config(user.root / "git.json")
    policy = write_raw_policy(user.root / "policy-git", {"git": git_server_arguments()})
    return run_args(config, policy, ws, user.root / "audit-git.jsonl")


def _listed(user: Home, args: list[str], pipelined: bool, log: Path) -> int:
    """How many tools one session lists to a client that writes everything at once (before
    the session is ready) or waits for each answer. TimeoutError when one never comes."""
    with log.open("wb") as stderr:
        client = Client.spawn(
            [IRONCURTAIN, "run", *args], user.env, stderr=stderr.fileno(), timeout=ATTEMPT
        )
    try:
        if pipelined:
            first = client.start_initialize()
            client.notify("notifications/initialized")
            listing = client.request("tools/list")
            client.answer(first)
        else:
            client.initialize()
            listing = client.request("tools/list")
        answer: dict[str, Any] = client.answer(listing)
        return len(answer["result"]["tools"])
    finally:
        client.close()


def test_a_listing_longer_than_a_pipe_reaches_a_client_that_wrote_before_ready(
    user: Home,
) -> None:
    # The client writes its three messages at once, then reads nothing until the session
    # has said it is ready and some more: the answer must wait for it whole.
    args = _wide_session(user)
    log = user.root / "early.log"
    with log.open("wb") as stderr:
        client = Client.spawn(
            [IRONCURTAIN, "run", *args], user.env, stderr=stderr.fileno(), timeout=ATTEMPT
        )
    try:
        first = client.start_initialize()
        client.notify("notifications/initialized")
        listing = client.request("tools/list")
        deadline = time.monotonic() + ATTEMPT
        while b"ready, serving MCP" not in log.read_bytes() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # the session answers meanwhile, into a pipe nobody reads yet
        assert client.answer(first)["result"]["serverInfo"]["name"] == "ironcurtain"
        assert [t["name"] for t in client.answer(listing)["result"]["tools"]] == [
            f"wide__{name}" for name in WIDE_TOOLS
        ]
    finally:
        client.close()
    assert b"Traceback" not in log.read_bytes()


def _burn() -> list[subprocess.Popen[bytes]]:
    """A process that keeps a CPU busy while the sessions start (three at a time: with it,
    more runnable processes than a two-core machine has cores)."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)]


def _starts(user: Home, args: list[str], count: int, expected: int) -> list[str]:
    """``count`` starts, three at a time, half of them with a client that writes before the
    session is ready; what went wrong in each that did not list ``expected`` tools."""

    def attempt(i: int) -> str:
        log = user.root / f"start-{i}.log"
        try:
            got = _listed(user, args, pipelined=i % 2 == 0, log=log)
        except (TimeoutError, EOFError, KeyError) as exc:
            return f"start {i}: {type(exc).__name__}: {exc}; {log.read_text()[-400:]}"
        return "" if got == expected else f"start {i}: {got} tools"

    burners = _burn()
    try:
        with ThreadPoolExecutor(3) as pool:
            return [said for said in pool.map(attempt, range(count)) if said]
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


def test_forty_starts_under_load_each_list_a_long_listing(user: Home) -> None:
    assert _starts(user, _wide_session(user), 40, len(WIDE_TOOLS)) == []


@needs_git_server
def test_the_git_server_started_ten_times_under_load_lists_its_tools(user: Home) -> None:
    assert _starts(user, _git_session(user), 10, len(git_server_arguments())) == []
