"""A server's own workspace (``sandbox.filesystem.workspace``) is the directory the
definition names, never what a link put in its place leads to. ``wrap`` writes the real
path of each directory a user's entry names; a project (a ``git pull``, a checkout, a
hostile clone) that later puts a link where that directory was would move the grant --
reads and writes the policy allows with no one asked -- to wherever the link leads: the
user's documents, another project. Not only secrets: any directory. The start refuses it,
naming the field; the control is the same directory left in place.

At wrap time: an entry naming ``/proc/self/cwd`` (or another path through ``/proc``) names,
for wrap, the directory wrap is run in, and for the server another: it gets no workspace
(control: the directory named itself). A directory reached through a link is given where
the link leads, and wrap says so."""

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


def _wrap_in(
    user: Home, cwd: Path, args: list[str], name: str = "files"
) -> tuple[dict[str, Any], str]:
    """Wrap the user's own filesystem entry with ``args``, run in ``cwd``: the definition
    wrap made, and what it said."""
    (user.home / ".claude.json").write_text(
        json.dumps({"mcpServers": {name: {"command": FS, "args": args}}})
    )
    done = subprocess.run(
        [IRONCURTAIN, "wrap", "--client", "claude-code", "--no-annotate"], env=user.env,
        cwd=cwd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    config = user.config / "ironcurtain" / "mcp-servers.json"
    definition: dict[str, Any] = json.loads(config.read_text())["mcpServers"][name]
    return definition, done.stderr


def _granted(definition: dict[str, Any]) -> list[str]:
    fs = definition.get("sandbox", {}).get("filesystem", {})
    return [*fs.get("allowWrite", []), *fs.get("workspace", [])]


@pytest.mark.parametrize("named", ["/proc/self/cwd", "/proc/self/root{downloads}", "control"])
def test_a_place_each_process_sees_its_own_way_gives_no_workspace(user: Home, named: str) -> None:
    # /proc/self/cwd is, for wrap, the directory wrap happens to be run in (the user's
    # downloads); for the server, wherever it starts. Wrap must not make the first its
    # workspace.
    downloads = user.root / "Downloads"
    downloads.mkdir()
    (downloads / "invoice.pdf").write_text("private\n")
    arg = str(downloads) if named == "control" else named.format(downloads=downloads)
    definition, said = _wrap_in(user, downloads, [arg])
    if named == "control":
        assert _granted(definition) == [str(downloads)] * 2, said
    else:
        assert _granted(definition) == [], said
        assert f"{downloads} is what {arg} is for wrap itself" in said, said
        assert definition["args"] == [arg]


def test_a_directory_named_through_a_link_is_said_with_what_is_given(user: Home) -> None:
    # A project the user names a directory of holds a link there (a cloned repository
    # may): what is given is where it leads, and wrap says so, not only the target.
    documents = user.root / "documents"
    documents.mkdir()
    project = user.root / "project"
    project.mkdir()
    (project / "data").symlink_to(documents)
    definition, said = _wrap_in(user, user.root, [str(project / "data")])
    assert f"{project / 'data'} is reached through a link: {documents} is what is given" in said
    assert _granted(definition) == [str(documents)] * 2
    # The control: the directory named itself is not said to be a link.
    definition, said = _wrap_in(user, user.root, [str(documents)], "docs")
    assert "reached through a link" not in said, said
    assert _granted(definition) == [str(documents)] * 2, said
