"""Sessions of ``ironcurtain run`` through the ``mcp`` SDK's own client over stdio: what a
real MCP client does."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import mcp.types as types
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.session import ElicitationFnT, ListRootsFnT, SamplingFnT

from tests.support.home import Home
from tests.support.paths import IRONCURTAIN

Calls = Iterable[tuple[str, dict[str, Any]]]
Elicitation = ElicitationFnT
Answer = Callable[[types.ElicitRequestParams], Awaitable[types.ElicitResult]]


@asynccontextmanager
async def connect(
    user: Home,
    *args: str,
    elicitation: Elicitation | None = None,
    prefix: Sequence[str] = (),
    sampling: SamplingFnT | None = None,
    roots: ListRootsFnT | None = None,
    command: Sequence[str] | None = None,
) -> AsyncIterator[ClientSession]:
    """``ironcurtain run *args`` as ``user``, initialized; ``elicitation``, ``sampling`` and
    ``roots`` answer what is asked of the client, ``prefix`` runs it through another program
    (``prlimit …``); ``command``: run that instead of ironcurtain (a server directly)."""
    argv = list(command) if command else [*prefix, IRONCURTAIN, "run", *args]
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=user.env, cwd=str(user.root))
    async with (
        stdio_client(params) as (read, write),
        ClientSession(
            read,
            write,
            elicitation_callback=elicitation,
            sampling_callback=sampling,
            list_roots_callback=roots,
        ) as session,
    ):
        await session.initialize()
        yield session


async def call(session: ClientSession, name: str, args: dict[str, Any]) -> tuple[bool, str]:
    """One tool call: (is error, its text)."""
    result = await session.call_tool(name, args)
    text = "\n".join(getattr(c, "text", "") for c in result.content)
    return bool(result.is_error), text


def session_calls(
    user: Home,
    args: Sequence[str],
    calls: Calls,
    elicitation: Elicitation | None = None,
    prefix: Sequence[str] = (),
) -> list[tuple[bool, str]]:
    """One session (``connect``'s arguments): each (tool, arguments) called in turn; every
    (is error, text) answer."""
    out: list[tuple[bool, str]] = []

    async def scenario() -> None:
        async with connect(user, *args, elicitation=elicitation, prefix=prefix) as session:
            for tool, arguments in calls:
                out.append(await call(session, tool, arguments))

    asyncio.run(scenario())
    return out


def answering(*answers: str) -> tuple[Answer, list[str]]:
    """A human who gives these answers in turn; the questions they saw are kept."""
    seen: list[str] = []
    queue = list(answers)

    async def answer(params: types.ElicitRequestParams) -> types.ElicitResult:
        seen.append(getattr(params, "message", ""))
        return types.ElicitResult(action="accept", content={"answer": queue.pop(0)})

    return answer, seen


async def attached_terminal(
    user: Home, *args: str, sessions: int = 1
) -> asyncio.subprocess.Process:
    """``ironcurtain approvals *args`` as ``user``, once it says it is attached to
    ``sessions`` running sessions (write its answers to its stdin; what it shows is on its
    stdout)."""
    terminal = await asyncio.create_subprocess_exec(
        IRONCURTAIN,
        "approvals",
        *args,
        env=user.env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    await attached(terminal, sessions)
    return terminal


async def attached(terminal: asyncio.subprocess.Process, sessions: int = 1) -> str:
    """What ``terminal`` shows until it has said it is attached to ``sessions`` more
    sessions (each counts it in from then on: its escalations are put to it)."""
    assert terminal.stdout
    seen = ""
    while seen.count("attached to session") < sessions:
        line = await asyncio.wait_for(terminal.stdout.readline(), 60)
        assert line, f"approvals ended before it attached:\n{seen}"
        seen += line.decode()
    return seen


PROMPT = b"[a]pprove, approve for this [s]ession, [d]eny? "


async def answer_asked(terminal: asyncio.subprocess.Process, answer: bytes) -> str:
    """What ``terminal`` (``ironcurtain approvals``) shows up to its next prompt; then
    ``answer`` is typed there (what is typed before a question is shown answers nothing)."""
    assert terminal.stdin and terminal.stdout
    shown = (await asyncio.wait_for(terminal.stdout.readuntil(PROMPT), 60)).decode()
    terminal.stdin.write(answer + b"\n")
    return shown


async def leave(terminal: asyncio.subprocess.Process) -> str:
    """End ``terminal``'s input (it leaves); what it showed up to then."""
    assert terminal.stdin and terminal.stdout
    terminal.stdin.close()
    shown = (await asyncio.wait_for(terminal.stdout.read(), 30)).decode()
    await terminal.wait()
    return shown
