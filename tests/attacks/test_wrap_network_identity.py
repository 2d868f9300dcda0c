"""``wrap`` gives network from its table only to the package the table names: never to an
entry that may run other code under the same name. The attacks: the user's own
``python -m mcp_server_fetch`` entry whose env sets ``PYTHONPATH``, or that Claude Code keeps
for one project (it starts in the project, and ``python -m`` takes the project's
``mcp_server_fetch`` first), or whose cwd is a project; ``npx``/``uvx`` told to run another
package under the program's name (``-p``, ``--package=``, ``--from``, ``--with``); npm's
``mcp-server-fetch``, which is not PyPI's. Each would have been given any public name
(``*``). The controls: the same entry without what chooses other code gets it, and the
project's module really is what ``python -m`` runs from there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from launcher.clients.wrap.network import network_for
from tests.support.home import Home
from tests.support.paths import BIN, IRONCURTAIN

PY = os.path.join(BIN, "python3")
FETCH_MODULE = {"command": PY, "args": ["-m", "mcp_server_fetch"]}


def _wrap(user: Home, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [IRONCURTAIN, "wrap", "--client", "claude-code", "--no-annotate"], env=user.env,
        cwd=cwd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600,
    )  # fmt: skip


def _network(user: Home, name: str) -> Any:
    config = user.config / "ironcurtain" / "mcp-servers.json"
    return json.loads(config.read_text())["mcpServers"][name].get("sandbox", {}).get("network")


def _shadowing_project(user: Home) -> Path:
    """A project holding its own ``mcp_server_fetch`` (as a cloned repository may)."""
    project = user.root / "project"
    (project / "mcp_server_fetch").mkdir(parents=True)
    (project / "mcp_server_fetch" / "__init__.py").write_text("")
    (project / "mcp_server_fetch" / "__main__.py").write_text(
        "import pathlib; pathlib.Path('ran-the-projects-code').write_text('yes')\n"
    )
    return project


@pytest.mark.parametrize(
    "extra",
    [
        {"env": {"PYTHONPATH": "/tmp/elsewhere"}},
        {"cwd": "PROJECT"},
        {"env": {"NODE_OPTIONS": "-r x"}},
    ],
    ids=["pythonpath", "cwd", "node-options"],
)
def test_a_user_entry_whose_env_or_cwd_chooses_the_code_gets_no_network(
    user: Home, extra: dict[str, Any]
) -> None:
    project = _shadowing_project(user)
    entry = {**FETCH_MODULE, **json.loads(json.dumps(extra).replace("PROJECT", str(project)))}
    (user.home / ".claude.json").write_text(json.dumps({"mcpServers": {"web": entry}}))
    done = _wrap(user, user.root)
    assert done.returncode == 0, done.stderr
    assert _network(user, "web") is None, done.stderr
    assert "web: no network:" in done.stderr and "it may not be what runs" in done.stderr
    assert "grant it in mcpServers.web.sandbox.network.allowedDomains" in done.stderr


def test_control_the_same_user_entry_without_them_gets_its_network(user: Home) -> None:
    entry = {**FETCH_MODULE, "env": {"PYTHONUNBUFFERED": "1"}}
    (user.home / ".claude.json").write_text(json.dumps({"mcpServers": {"web": entry}}))
    done = _wrap(user, user.root)
    assert done.returncode == 0, done.stderr
    assert _network(user, "web") == {"allowedDomains": ["*"]}, done.stderr


def test_a_servers_claude_code_keeps_for_a_project_gets_no_network_for_the_projects_module(
    user: Home,
) -> None:
    project = _shadowing_project(user)
    local = {"mcpServers": {"web": FETCH_MODULE}}
    (user.home / ".claude.json").write_text(json.dumps({"projects": {str(project): local}}))
    done = _wrap(user, project)
    assert done.returncode == 0, done.stderr
    assert _network(user, "web") is None, done.stderr
    assert f"it starts in {project}, which may hold code its runner takes first" in done.stderr
    # The control: started where the client starts it, the entry runs the project's code.
    subprocess.run(
        [sys.executable, "-m", "mcp_server_fetch"], cwd=project, env=user.env, timeout=60,
        capture_output=True, check=True,
    )  # fmt: skip
    assert (project / "ran-the-projects-code").read_text() == "yes"


@pytest.mark.parametrize(
    "command,args",
    [
        ("npx", ["-y", "-p", "evil-pkg", "mcp-server-fetch"]),
        ("npx", ["--package=evil-pkg", "mcp-server-fetch"]),
        ("npx", ["-y", "mcp-server-fetch"]),  # npm's package of that name: not PyPI's
        ("npx", ["-y", "github-mcp-server"]),  # GitHub's server is a program, not on npm
        ("uvx", ["--from", "./evil", "mcp-server-fetch"]),
        ("uvx", ["--from=git+https://example.invalid/evil", "mcp-server-fetch"]),
        ("uvx", ["--with", "evil", "mcp-server-fetch"]),
        ("uvx", ["./evil"]),
        ("pipx", ["run", "--spec", "evil", "mcp-server-fetch"]),
        ("npx", ["-y", "some-pkg@evil", "mcp-server-fetch"]),
        ("env", ["PYTHONPATH=/tmp/evil", "mcp-server-fetch"]),
        ("/bin/sh", ["-c", "mcp-server-fetch"]),
    ],
    ids=["npx-p", "npx-package=", "npm-namesake", "npm-github", "uvx-from", "uvx-from=",
         "uvx-with", "uvx-path", "pipx-spec", "npx-first-package", "env-prefixed", "shell"],
)  # fmt: skip
def test_a_runner_told_to_run_other_code_gets_no_network(command: str, args: list[str]) -> None:
    network, said = network_for("web", command, args, ({}, [""]), False, "CONFIG")
    assert network is None, said
    assert said is not None and "mcpServers.web.sandbox.network.allowedDomains" in said


@pytest.mark.parametrize(
    "command,args,hosts",
    [
        ("uvx", ["mcp-server-fetch@2025.1.0"], ["*"]),
        ("pipx", ["run", "mcp-server-fetch"], ["*"]),
        ("npx", ["-y", "@modelcontextprotocol/server-github"], ["api.github.com"]),
        ("/usr/local/bin/github-mcp-server", ["stdio"], ["api.github.com"]),
    ],
    ids=["uvx", "pipx", "npx", "program"],
)
def test_control_the_packages_themselves_get_their_hosts(
    command: str, args: list[str], hosts: list[str]
) -> None:
    network, _ = network_for("web", command, args, ({}, [""]), False, "CONFIG")
    assert network is not None and hosts[0] in network["allowedDomains"]


def test_a_program_in_the_project_claude_code_keeps_it_for_gets_no_network(user: Home) -> None:
    # The project holds a link named mcp-server-fetch to the real program: it may point it
    # elsewhere any time later.
    project = user.root / "project"
    (project / "bin").mkdir(parents=True)
    (project / "bin" / "mcp-server-fetch").symlink_to(os.path.join(BIN, "mcp-server-fetch"))
    local = {"mcpServers": {"web": {"command": str(project / "bin" / "mcp-server-fetch")}}}
    (user.home / ".claude.json").write_text(json.dumps({"projects": {str(project): local}}))
    done = _wrap(user, project)
    assert done.returncode == 0, done.stderr
    assert _network(user, "web") is None, done.stderr
    assert f"its program lies in {project}, where other code may be put" in done.stderr
    # The control: the installed program itself, kept for the same project, gets it.
    local = {"mcpServers": {"web2": {"command": os.path.join(BIN, "mcp-server-fetch")}}}
    (user.home / ".claude.json").write_text(json.dumps({"projects": {str(project): local}}))
    done = _wrap(user, project)
    assert done.returncode == 0, done.stderr
    assert _network(user, "web2") == {"allowedDomains": ["*"]}, done.stderr
