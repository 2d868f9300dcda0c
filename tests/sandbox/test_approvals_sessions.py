"""``ironcurtain approvals`` with no ``--session`` serves every running session of the
user's at once: real sessions (wrapped servers, ``ironcurtain run``), each question named
by its session and answered back to it; sessions that start later are taken in, those that
end drop out; sockets that are not a session's of the user's are never attached."""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

from mcp import ClientSession, StdioServerParameters, stdio_client

from tests.support.audit import audit_entries
from tests.support.cli import ironcurtain
from tests.support.home import Home, git_repo
from tests.support.marks import needs_bwrap
from tests.support.paths import BIN, IRONCURTAIN
from tests.support.probe import probe_session
from tests.support.sdk import answer_asked, attached, attached_terminal, call, connect, leave

pytestmark = needs_bwrap

ASK = {
    "name": "ask-before-env",
    "if": {"tool": ["env_value"]},
    "then": "escalate",
    "reason": "reading the server's environment needs a human",
}


def _wrapped_project(user: Home, name: str, entry: dict[str, object]) -> Path:
    """A Claude Code project of its own with the one server ``name``, wrapped."""
    project = user.root / f"proj-{name}"
    project.mkdir()
    git_repo(project)
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {name: entry}}))
    done = ironcurtain(user, "wrap", "--client", "claude-code", cwd=project)
    assert done.returncode == 0, done.stderr
    return project


@asynccontextmanager
async def _started(user: Home, project: Path, name: str) -> AsyncIterator[ClientSession]:
    """The wrapped entry ``name`` started as Claude Code starts it (a client that cannot
    elicit: escalations go to an attached terminal)."""
    entry = json.loads((project / ".mcp.json").read_text())["mcpServers"][name]
    params = StdioServerParameters(
        command=entry["command"], args=entry["args"], env=user.env, cwd=str(project)
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def _sessions(run_dir: Path) -> list[str]:
    """The ids of the sessions running in ``run_dir``, oldest first."""
    made = sorted(run_dir.glob("ironcurtain-*"), key=lambda p: p.stat().st_mtime)
    return [p.name.removeprefix("ironcurtain-") for p in made]


def test_the_older_of_two_wrapped_servers_is_answered_without_naming_its_session(
    user: Home, run_dir: Path
) -> None:
    # Two projects, a server wrapped in each (two sessions of ironcurtain, one per server).
    fs_project = _wrapped_project(
        user, "filesystem", {"command": os.path.join(BIN, "mcp-server-filesystem"), "args": ["."]}
    )
    git_project = _wrapped_project(
        user, "git", {"command": os.path.join(BIN, "mcp-server-git"), "args": ["--repository", "."]}
    )
    note = user.home / "notes.txt"  # outside the project: the write is escalated

    async def scenario(*terminal_args: str) -> tuple[tuple[bool, str], str]:
        async with (
            _started(user, fs_project, "filesystem") as fs,  # the older session: it asks
            _started(user, git_project, "git"),
        ):
            assert len(_sessions(run_dir)) == 2
            newest = _sessions(run_dir)[-1]
            args = [a.replace("NEWEST", newest) for a in terminal_args]
            terminal = await attached_terminal(user, *args, sessions=1 if args else 2)
            write = {"path": str(note), "content": "from the older session"}
            asked = asyncio.create_task(call(fs, "write_file", write))
            if args:  # attached to the newest alone: nobody is asked
                out = await asked
                return out, await leave(terminal)
            shown = await answer_asked(terminal, b"a")
            out = await asked
        return out, shown + await leave(terminal)

    out, shown = asyncio.run(scenario())
    assert out[0] is False, out[1]
    assert note.read_text() == "from the older session"
    assert re.search(r"\[session \S+\] filesystem/write_file needs your approval", shown)
    # Attached to both: it saw each end.
    assert len(set(re.findall(r"session (\S+) ended", shown))) == 2
    note.unlink()
    # Control: attached to the newest session only (what a terminal did before), the older
    # one's question reaches no one and its write is not made.
    out, shown = asyncio.run(scenario("--session", "NEWEST"))
    assert out[0] and out[1].startswith("ESCALATION REQUIRED"), out
    assert not note.exists()


def test_sessions_that_start_later_are_served_and_one_that_ends_drops_out(
    user: Home, run_dir: Path
) -> None:
    args, ws, audit = probe_session(user, first=[ASK])
    other = user.root / "other-audit.jsonl"  # the second session's own audit and workspace
    swap = {str(audit): str(other), str(ws): str(user.ws("ws-two"))}
    args_two = [swap.get(a, a) for a in args]
    out: dict[str, tuple[bool, str]] = {}
    shown: list[str] = []

    async def scenario() -> None:
        # The terminal first, no session yet: it waits for them.
        terminal = await asyncio.create_subprocess_exec(
            IRONCURTAIN, "approvals", env=user.env,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert terminal.stdout
        shown.append((await terminal.stdout.readline()).decode())
        async with AsyncExitStack() as stack:
            one = await stack.enter_async_context(connect(user, *args))
            async with connect(user, *args_two) as two:
                await attached(terminal, 2)  # from now on each puts its questions here
                # Two questions at once, one from each session: both are shown, one at a
                # time; each answer reaches the session that asked.
                asks = {
                    "HOME": asyncio.create_task(call(one, "probe__env_value", {"name": "HOME"})),
                    "LANG": asyncio.create_task(call(two, "probe__env_value", {"name": "LANG"})),
                }
                first = await answer_asked(terminal, b"a")
                second = await answer_asked(terminal, b"d")
                shown.extend([first, second])
                for name, task in asks.items():
                    out[name] = await task
            # The second session ended: the first is still served.
            third = asyncio.create_task(call(one, "probe__env_value", {"name": "USER"}))
            shown.append(await answer_asked(terminal, b"d"))
            out["USER"] = await third
        shown.append(await leave(terminal))

    asyncio.run(scenario())
    assert "no session running" in shown[0] and "waiting" in shown[0]
    approved = "HOME" if '"name": "HOME"' in shown[1] else "LANG"
    denied = "LANG" if approved == "HOME" else "HOME"
    assert f'"name": "{denied}"' in shown[2]
    # The question names its session: two different ones.
    heads = [re.search(r"\[session (\S+)\] probe/env_value", s) for s in shown[1:3]]
    assert all(heads) and heads[0][1] != heads[1][1]  # type: ignore[index]
    assert out[approved][0] is False and out[approved][1] in ("/tmp/home", "C.UTF-8")
    assert out[denied][0] and "the user answered deny" in out[denied][1]
    assert "ended" in shown[3] and '"name": "USER"' in shown[3]
    assert out["USER"][0] and "the user answered deny" in out["USER"][1]
    escalations = [e["escalation"] for log in (audit, other) for e in audit_entries(log)]
    assert sorted(escalations) == ["approved", "denied", "denied"]
