"""The way in, as a new user takes it with real clients installed from npm: a filesystem
server on a project, a git server on a repository and a fetch server added at user level
with each client's own ``mcp add`` (Claude Code, Gemini CLI, opencode), then ``ironcurtain
wrap --all``. Each client's own ``mcp list`` shows every server connected through
ironcurtain; the MCP Inspector's CLI, starting each server as that client's entry says,
finds each doing its job (the filesystem server reads and writes its own directory, the git
server answers ``git_status`` on its repository, the fetch server reaches the name allowed
for it by wrap, a loopback web server's name pinned with ``sandbox.network.hosts``) while
``/etc/passwd`` stays denied; ``unwrap --all`` then gives back every file byte for byte.

One home is set up for the module (adding, wrapping); the unwrap test comes last."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from tests.support.cli import ironcurtain
from tests.support.marks import needs_bwrap, needs_installed
from tests.support.paths import BIN, IRONCURTAIN
from tests.support.real_clients import (
    Machine,
    add_servers,
    client,
    inspector_call,
    inspector_config,
    installed,
    make_machine,
)
from tests.support.web import serving_pages

pytestmark = [
    needs_bwrap,
    needs_installed(not installed(), "scripts/install.sh --dev installs the clients"),
]
SERVERS = ("filesystem", "git", "fetch")
PAGES = "pages.test"


@dataclass
class Wrapped:
    machine: Machine
    before: dict[str, bytes]  # each client's file as `mcp add` left it
    port: int
    hits: list[str]


@pytest.fixture(scope="module")
def wrapped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Wrapped]:
    machine = make_machine(tmp_path_factory.mktemp("real-clients"))
    add_servers(
        machine,
        {
            "filesystem": [f"{BIN}/mcp-server-filesystem", str(machine.project)],
            "git": [f"{BIN}/mcp-server-git", "--repository", str(machine.repo)],
            # A local name is what it is to reach: the server's own check of private
            # addresses is off, as a user reaching one would set it; the proxy still decides.
            "fetch": [f"{BIN}/mcp-server-fetch", "--ignore-robots-txt", "--allow-private-ips"],
        },
    )
    before = {name: path.read_bytes() for name, path in machine.files().items()}
    done = ironcurtain(machine.user, "wrap", "--all", cwd=machine.work)
    assert done.returncode == 0, done.stderr
    assert "fetch: network: any public name (*)" in done.stderr
    with serving_pages() as (port, hits):
        _pin_pages(machine, port)
        yield Wrapped(machine, before, port, hits)


def _pin_pages(machine: Machine, port: int) -> None:
    """The loopback web server's name pinned to 127.0.0.1 in the fetch server's definition
    as wrap moved it (``sandbox.network.hosts``); whether the name may be reached is left to
    what wrap granted."""
    path = machine.user.config / "ironcurtain" / "mcp-servers.json"
    config = json.loads(path.read_text())
    network = config["mcpServers"]["fetch"].setdefault("sandbox", {}).setdefault("network", {})
    network["hosts"] = {**network.get("hosts", {}), PAGES: "127.0.0.1"}
    path.write_text(json.dumps(config, indent=2) + "\n")


LISTED = {
    "claude": r"^{name}: {ic} run .* --server {name} - ✔ Connected$",
    "gemini": r"^✓ {name}: {ic} run .* --server {name} \(stdio\) - Connected$",
    "opencode": r"^●\s+✓ {name} connected\n│\s+{ic} run .* --server {name}$",
}


def _listed_through_ironcurtain(wrapped: Wrapped, name: str) -> None:
    said = client(wrapped.machine, name, "mcp", "list")
    for server in SERVERS:
        line = LISTED[name].format(name=server, ic=re.escape(IRONCURTAIN))
        assert re.search(line, said, re.MULTILINE), f"{server} not connected:\n{said}"


def _servers_do_their_jobs(wrapped: Wrapped, name: str) -> None:
    """The Inspector's calls, each server started as ``name``'s entry says, each call its
    own session. The servers' calls run side by side, each server's one after another (run
    as root, a session's directory is opened to the sandbox's user for one session at a
    time)."""
    machine = wrapped.machine
    config = inspector_config(machine, name)
    written = machine.project / f"from-{name}.txt"
    lanes = {
        "filesystem": {
            "read": ("read_text_file", {"path": str(machine.project / "notes.txt")}),
            "write": ("write_file", {"path": str(written), "content": name}),
            "passwd": ("read_text_file", {"path": "/etc/passwd"}),
        },
        "git": {"status": ("git_status", {"repo_path": str(machine.repo)})},
        "fetch": {"fetch": ("fetch", {"url": f"http://{PAGES}:{wrapped.port}/{name}"})},
    }

    def lane(server: str) -> dict[str, tuple[bool, str]]:
        return {
            what: inspector_call(machine, config, server, tool, **args)
            for what, (tool, args) in lanes[server].items()
        }

    with ThreadPoolExecutor(len(lanes)) as pool:
        said = {k: v for one in pool.map(lane, lanes) for k, v in one.items()}
    assert said["read"] == (False, "the project's notes\n")
    assert not said["write"][0], said["write"]
    assert written.read_text() == name
    error, text = said["passwd"]
    assert error and text.startswith("DENIED (rule: "), text
    assert "root:" not in text
    error, text = said["status"]
    assert not error and "Repository status:" in text, text
    assert "README.md" in text  # untracked, as `git status` says it
    error, text = said["fetch"]
    assert not error and "hello egress" in text, text
    assert f"{PAGES}:{wrapped.port} /{name}" in wrapped.hits


@pytest.mark.parametrize("name", ["claude", "gemini", "opencode"])
def test_each_client_lists_its_servers_through_ironcurtain_and_each_does_its_job(
    wrapped: Wrapped, name: str
) -> None:
    _listed_through_ironcurtain(wrapped, name)
    _servers_do_their_jobs(wrapped, name)


def test_unwrap_all_gives_back_every_client_file_byte_for_byte(wrapped: Wrapped) -> None:
    machine = wrapped.machine
    assert all(path.read_bytes() != wrapped.before[n] for n, path in machine.files().items())
    done = ironcurtain(machine.user, "unwrap", "--all", cwd=machine.work)
    assert done.returncode == 0, done.stderr
    assert {n: p.read_bytes() for n, p in machine.files().items()} == wrapped.before
