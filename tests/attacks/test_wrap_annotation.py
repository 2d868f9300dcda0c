"""``wrap`` annotates each new server on its own: one that cannot be annotated (a token its
client keeps as a reference that is unset here, which the server checks before it serves)
leaves the others annotated, their calls decided by the policy's rules rather than all
refused as unknown tools. A value the client's entry holds as text is given to the
annotation run; an unset reference a server starts without gets a placeholder (said).
``clients`` names the unannotated server with the command that annotates it, and that
command works once the variable is set. The control: one annotation run over all of them
(what wrap did before) annotates none."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

from mcp import ClientSession, StdioServerParameters, stdio_client

from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.paths import IRONCURTAIN, PROBE
from tests.support.sdk import call


def _cli(
    user: Home, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [IRONCURTAIN, *args], env={**user.env, **(env or {})}, cwd=user.root,
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600,
    )  # fmt: skip


def _entries() -> dict[str, dict[str, object]]:
    probe = {"command": sys.executable, "args": [str(PROBE)]}
    return {
        "alpha": dict(probe),
        # Started without its token: the reference is unset here, a placeholder lists it.
        "beta": {**probe, "env": {"PROBE_API_KEY": "${PROBE_API_KEY}"}},
        # Checks its token before it serves; the token is a reference unset here.
        "gamma": {**probe, "env": {"PROBE_GAMMA_TOKEN": "${PROBE_GAMMA_TOKEN}",
                                   "PROBE_REQUIRE": "PROBE_GAMMA_TOKEN=open-sesame"}},
        # Checks its token; the client's entry holds it as text.
        "delta": {**probe, "env": {"PROBE_DELTA_TOKEN": "open-sesame",
                                   "PROBE_REQUIRE": "PROBE_DELTA_TOKEN=open-sesame"}},
    }  # fmt: skip


def _annotated(user: Home) -> set[str]:
    path = user.config / "ironcurtain" / "policy" / "tool-annotations.json"
    return set(json.loads(path.read_text())["servers"])


def _read_etc(user: Home, entry: dict[str, object]) -> tuple[bool, str]:
    out: list[tuple[bool, str]] = []

    async def scenario() -> None:
        params = StdioServerParameters(
            command=str(entry["command"]), args=list(entry["args"]),  # type: ignore[call-overload]
            env={**user.env, **entry.get("env", {})}, cwd=str(user.root),  # type: ignore[dict-item]
        )  # fmt: skip
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            out.append(await call(session, "read_path", {"path": "/etc/hostname"}))

    asyncio.run(scenario())
    return out[0]


@needs_bwrap
def test_one_server_that_cannot_be_annotated_leaves_the_others_annotated(user: Home) -> None:
    (user.home / ".claude.json").write_text(json.dumps({"mcpServers": _entries()}))
    done = _cli(user, "wrap", "--client", "claude-code")
    assert done.returncode == 0, done.stderr
    assert _annotated(user) >= {"alpha", "beta", "delta"}
    assert "gamma" not in _annotated(user)
    said = done.stderr
    assert "beta: listed with a placeholder for PROBE_API_KEY" in said
    line = next(x for x in said.splitlines() if "gamma: tools not annotated" in x)
    assert "it needs PROBE_GAMMA_TOKEN set" in line
    later = line.split("run later: ", 1)[1]
    assert later.startswith("PROBE_GAMMA_TOKEN=VALUE ironcurtain annotate-tools --server gamma")

    wrapped = json.loads((user.home / ".claude.json").read_text())["mcpServers"]
    for name in ("alpha", "delta"):  # decided by the rules through its draft, not unknown
        failed, text = _read_etc(user, wrapped[name])
        assert failed and "DENIED (rule: " in text and "structural-unknown" not in text, text

    listed = _cli(user, "clients").stdout
    row = next(x for x in listed.splitlines() if x.strip().startswith("gamma "))
    assert "wrapped, tools not annotated" in row and "annotate-tools --server gamma" in row
    assert "1 wrapped server has tools not annotated" in listed
    for name in ("alpha", "beta", "delta"):
        row = next(x for x in listed.splitlines() if x.strip().startswith(f"{name} "))
        assert row.endswith("runs through ironcurtain"), row

    # The command wrap suggested annotates it, with the variable set.
    command = later.replace("PROBE_GAMMA_TOKEN=VALUE ", "")
    again = subprocess.run(
        ["bash", "-c", command], env={**user.env, "PROBE_GAMMA_TOKEN": "open-sesame"},
        cwd=user.root, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "gamma" in _annotated(user)
    row = next(x for x in _cli(user, "clients").stdout.splitlines() if "gamma " in x)
    assert row.endswith("runs through ironcurtain"), row


@needs_bwrap
def test_control_one_run_over_every_server_annotates_none(user: Home) -> None:
    (user.home / ".claude.json").write_text(json.dumps({"mcpServers": _entries()}))
    done = _cli(user, "wrap", "--client", "claude-code", "--no-annotate")
    assert done.returncode == 0, done.stderr
    output = user.root / "joint.json"
    names = [a for n in _entries() for a in ("--server", n)]
    joint = _cli(user, "annotate-tools", *names, "--heuristic", "--config",
                 str(user.config / "ironcurtain" / "mcp-servers.json"),
                 "--output", str(output))  # fmt: skip
    assert joint.returncode != 0
    assert not output.exists() or not json.loads(output.read_text()).get("servers")
    listed = _cli(user, "clients").stdout
    rows = [x for x in listed.splitlines() if "wrapped, tools not annotated" in x]
    assert len(rows) == len(_entries()), listed
