"""A server's own workspace (``sandbox.filesystem.workspace``) is the directory the
definition names, never what a link put in its place leads to. ``wrap`` writes the real
path of each directory a user's entry names; a project (a ``git pull``, a checkout, a
hostile clone) that later puts a link where that directory was would move the grant --
reads and writes the policy allows with no one asked -- to wherever the link leads: the
user's documents, another project. Not only secrets: any directory. The start refuses it,
naming the field; the control is the same directory left in place."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.paths import BIN, IRONCURTAIN
from tests.support.sdk import call

FS = os.path.join(BIN, "mcp-server-filesystem")


def _wrapped(user: Home, directory: Path) -> dict[str, Any]:
    """The entry ``wrap`` writes for the user's own filesystem server on ``directory``."""
    (user.home / ".claude.json").write_text(
        json.dumps({"mcpServers": {"files": {"command": FS, "args": [str(directory)]}}})
    )
    done = subprocess.run(
        [IRONCURTAIN, "wrap", "--client", "claude-code"], env=user.env, cwd=user.root,
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    entry: dict[str, Any] = json.loads((user.home / ".claude.json").read_text())["mcpServers"][
        "files"
    ]
    return entry


def _calls(
    user: Home, entry: dict[str, Any], calls: list[tuple[str, dict[str, Any]]]
) -> tuple[list[tuple[bool, str]], str]:
    """Start ``entry`` as the client would and make each call: the answers, or (no
    answers) what the start said when it refused."""
    out: list[tuple[bool, str]] = []
    errlog = user.root / "server-stderr.txt"

    async def scenario() -> None:
        params = StdioServerParameters(
            command=entry["command"], args=entry["args"], env={**user.env, **entry.get("env", {})},
            cwd=str(user.root),
        )  # fmt: skip
        with errlog.open("w") as err:
            async with (
                stdio_client(params, errlog=err) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                for tool, arguments in calls:
                    out.append(await call(session, tool, arguments))

    with contextlib.suppress(Exception):  # a refused start ends the connection
        asyncio.run(scenario())
    return out, errlog.read_text() if errlog.exists() else ""


@needs_bwrap
@pytest.mark.parametrize("swapped", [True, False], ids=["link-to-documents", "control"])
def test_a_workspace_swapped_for_a_link_to_an_ordinary_directory_grants_nothing_there(
    user: Home, swapped: bool
) -> None:
    project = user.root / "project"
    project.mkdir()
    (project / "notes.txt").write_text("my notes\n")
    documents = user.home / "Documents"
    documents.mkdir()
    (documents / "notes.txt").write_text("my private letters\n")
    entry = _wrapped(user, project)
    if swapped:
        # After wrap: the project's directory becomes a link to the user's documents.
        project.rename(user.root / "moved-away")
        project.symlink_to(documents)
    calls = [
        ("read_text_file", {"path": str(project / "notes.txt")}),
        ("write_file", {"path": str(project / "planted.txt"), "content": "planted\n"}),
    ]
    out, said = _calls(user, entry, calls)
    if swapped:
        # The promise: nothing in the documents is read or written through the grant.
        assert not any("private letters" in text for _, text in out), out
        assert not (documents / "planted.txt").exists()
        assert out == [], out
        assert f"'{project}' is a link to {documents}" in said, said
        assert "sandbox.filesystem.workspace[0]" in said, said
    else:
        assert out[0] == (False, "my notes\n"), out
        assert (project / "planted.txt").read_text() == "planted\n"
