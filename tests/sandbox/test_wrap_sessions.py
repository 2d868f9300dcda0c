"""Wrapped entries started as their client starts them, real servers in their sandboxes:
a Claude Code project's servers keep their tool names and every call is audited, and a
server ironcurtain has never seen is annotated with the heuristic when wrapped, its calls
then decided by the constitution's rules."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from mcp import ClientSession, StdioServerParameters, stdio_client

from tests.support.audit import audit_entries
from tests.support.cli import ironcurtain
from tests.support.home import Home, git_repo
from tests.support.marks import needs_bwrap
from tests.support.paths import BIN, PROBE
from tests.support.sdk import call


@needs_bwrap
def test_a_wrapped_claude_code_project_keeps_its_tool_names_and_each_call_is_audited(
    user: Home,
) -> None:
    project = user.root / "proj"
    project.mkdir()
    git_repo(project)
    entries = {
        "filesystem": {"command": os.path.join(BIN, "mcp-server-filesystem"), "args": ["."]},
        "git": {"command": os.path.join(BIN, "mcp-server-git"), "args": ["--repository", "."]},
    }
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": entries}, indent=2))

    def started(name: str) -> tuple[list[str], tuple[bool, str] | None]:
        """The entry started as Claude Code starts it: its command, args and env, in the
        project; its tool names, and for the filesystem one listing of the project."""
        entry = json.loads((project / ".mcp.json").read_text())["mcpServers"][name]
        out: list[Any] = []

        async def scenario() -> None:
            params = StdioServerParameters(
                command=entry["command"], args=entry.get("args", []),
                env={**user.env, **entry.get("env", {})}, cwd=str(project),
            )  # fmt: skip
            async with (
                stdio_client(params) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                out.append(sorted(t.name for t in (await session.list_tools()).tools))
                if name == "filesystem":
                    args = {"path": str(project)}
                    out.append(await call(session, "list_directory", args))

        asyncio.run(scenario())
        return out[0], out[1] if len(out) > 1 else None

    before = {name: started(name)[0] for name in entries}
    done = ironcurtain(user, "wrap", "--client", "claude-code", cwd=project)
    assert done.returncode == 0, done.stderr
    wrapped = json.loads((project / ".mcp.json").read_text())["mcpServers"]
    assert all(e["command"].endswith("ironcurtain") for e in wrapped.values())
    assert wrapped["git"]["args"][1:3] == ["--workspace", str(project)]
    names, listing = started("filesystem")
    assert names == before["filesystem"]
    assert listing is not None and not listing[0] and "README.md" in listing[1]
    assert started("git")[0] == before["git"]
    logs = sorted((user.state / "ironcurtain" / "audit").glob("*.jsonl"))
    calls = [e for log in logs for e in audit_entries(log) if e.get("tool") == "list_directory"]
    assert [(c["server"], c["result"], c["sandboxed"]) for c in calls] == [
        ("filesystem", "success", True)
    ]


@needs_bwrap
def test_a_server_ironcurtain_has_never_seen_is_annotated_when_wrapped(user: Home) -> None:
    # The user's own entry: a project's would not be given a script outside the project.
    project = user.root / "proj"
    project.mkdir()
    entry = {"command": sys.executable, "args": [str(PROBE)]}
    (user.home / ".claude.json").write_text(json.dumps({"mcpServers": {"probe": entry}}))
    done = ironcurtain(user, "wrap", "--client", "claude-code", cwd=project)
    assert done.returncode == 0, done.stderr
    assert f"probe: readable in its sandbox: {PROBE.parent}" in done.stderr
    assert "annotated probe with the heuristic (drafts:" in done.stderr
    # What it could not classify is named, with the command that reviews it.
    said = next(line for line in done.stderr.splitlines() if "could not classify" in line)
    assert "probe: the heuristic could not classify " in said and "burn" in said
    assert said.endswith("until reviewed: ironcurtain compile-policy --server probe")
    annotations = json.loads(
        (user.config / "ironcurtain" / "policy" / "tool-annotations.json").read_text()
    )
    drafts = annotations["servers"]["probe"]["tools"]
    assert {"instance", "read_path"} <= {t["toolName"] for t in drafts}
    assert all(t["draft"] is True for t in drafts)
    read_path = next(t for t in drafts if t["toolName"] == "read_path")
    assert read_path["args"]["path"] == ["read-path"]  # role-based rules apply to it

    wrapped = json.loads((user.home / ".claude.json").read_text())["mcpServers"]["probe"]
    out: list[tuple[bool, str]] = []

    async def scenario() -> None:
        params = StdioServerParameters(
            command=wrapped["command"], args=wrapped["args"], env=user.env, cwd=str(project)
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            out.append(await call(session, "read_path", {"path": "/etc/hostname"}))

    asyncio.run(scenario())
    # Decided by the constitution's rules through its draft annotation, not refused as an
    # unknown tool: a read outside the workspace is denied.
    assert out[0][0] and "DENIED (rule: " in out[0][1]
    assert "structural-unknown" not in out[0][1]
