"""The git server the design names, ``@cyanheads/git-mcp-server``, as a user installs it with
npm (``scripts/install.sh --dev`` puts it in ``.venv/git-mcp-server``): its config entry,
its recorded tool listing, the mark for tests that need it, and a session of it through
ironcurtain with its heuristic annotations and a policy a user would write."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.marks import needs_installed
from tests.support.paths import REPO, TESTS

GIT_SERVER = REPO / ".venv" / "git-mcp-server" / "node_modules" / ".bin" / "git-mcp-server"
GIT_SERVER_SCRIPT = (
    REPO / ".venv" / "git-mcp-server" / "node_modules" / "@cyanheads" / "git-mcp-server"
    / "dist" / "index.js"
)  # fmt: skip
LISTING = TESTS / "data" / "servers" / "cyanheads-git-mcp-server-2.15.3.json"

needs_git_server = needs_installed(
    not GIT_SERVER.exists(), "@cyanheads/git-mcp-server is not installed (install.sh --dev)"
)


def git_server_tools() -> dict[str, Any]:
    """Its 28 tools as it lists them (name -> the tool), recorded from version 2.15.3."""
    listed = json.loads(LISTING.read_text())["tools"]
    return {tool["name"]: tool for tool in listed}


def git_server_entry() -> dict[str, Any]:
    """Its ``mcpServers`` entry, as a user would write it: as the bundled config's git
    server, ``safe.directory=*`` (run as root, ironcurtain starts servers as another uid,
    and git would refuse a repository that uid does not own) and an identity to commit as."""
    env = {
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "safe.directory",
        "GIT_CONFIG_VALUE_0": "*",
        "GIT_AUTHOR_NAME": "agent",
        "GIT_AUTHOR_EMAIL": "agent@ironcurtain.invalid",
        "GIT_COMMITTER_NAME": "agent",
        "GIT_COMMITTER_EMAIL": "agent@ironcurtain.invalid",
    }
    return {"command": str(GIT_SERVER), "env": env}


def git_server_arguments() -> dict[str, list[str]]:
    """Tool name -> its argument names."""
    return {
        name: list(tool.get("inputSchema", {}).get("properties", {}))
        for name, tool in git_server_tools().items()
    }


def write_git_config(path: Path, entry: dict[str, Any] | None = None) -> Path:
    """A config whose one server, ``git``, is this server; ``path``."""
    path.write_text(json.dumps({"mcpServers": {"git": entry or git_server_entry()}}))
    return path


def design_rules(workspace: str) -> list[dict[str, Any]]:
    """The design's policy for this server: reads in the workspace allowed, writes in the
    workspace allowed, everything else asked."""
    return [
        {
            "name": "reads-in-workspace",
            "if": {"effect": ["read"], "paths": {"roles": ["read-path"], "within": workspace}},
            "then": "allow",
            "reason": "reads in the workspace",
        },
        {
            "name": "writes-in-workspace",
            "if": {
                "effect": ["write"],
                "paths": {"roles": ["read-path", "write-path"], "within": workspace},
            },
            "then": "allow",
            "reason": "writes in the workspace",
        },
        {"name": "ask", "if": {}, "then": "escalate", "reason": "everything else"},
    ]


def heuristic_annotation_of(tool: str) -> dict[str, Any]:
    """The heuristic's draft of one tool."""
    from policy.pipeline.heuristic import heuristic_annotation

    return heuristic_annotation("git", git_server_tools()[tool])


def heuristic_drafts(overrides: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The heuristic's draft of every tool, with ``overrides`` (tool -> keys) laid over."""
    from policy.pipeline.heuristic import heuristic_annotation

    drafts = [heuristic_annotation("git", tool) for tool in git_server_tools().values()]
    for draft in drafts:
        draft.update((overrides or {}).get(draft["toolName"], {}))
    return drafts


def write_design_policy(
    directory: Path, workspace: str, overrides: dict[str, dict[str, Any]] | None = None
) -> Path:
    """The heuristic's drafts (with ``overrides``) and the design's rules, as files."""
    directory.mkdir(parents=True, exist_ok=True)
    tools = heuristic_drafts(overrides)
    annotations = {"servers": {"git": {"tools": tools}}}
    (directory / "tool-annotations.json").write_text(json.dumps(annotations))
    rules = {"rules": design_rules(workspace)}
    (directory / "compiled-policy.json").write_text(json.dumps(rules))
    return directory


def installed_git_server() -> Path:
    """The server's entry script; a test that needs it fails, saying why, where it is not
    installed (``install.sh --dev`` installs it: a test skipped would prove nothing)."""
    if not GIT_SERVER_SCRIPT.is_file():
        pytest.fail("@cyanheads/git-mcp-server is not installed: run scripts/install.sh --dev")
    return GIT_SERVER_SCRIPT


def write_git_session(
    root: Path, entry: Path, ws: Path, readable: tuple[Path, ...] = ()
) -> list[str]:
    """A config, tool annotations and policy for the server in ``root``; the
    ``ironcurtain run`` options of a session of it in ``ws``; ``readable``: more the
    server may read (a repository to clone from)."""
    policy = write_design_policy(root / "policy", "${workspace}")
    config = root / "git-servers.json"
    package = entry.parents[3]  # the install's node_modules: the server and what it loads
    server: dict[str, Any] = {
        "command": "node",
        "args": [str(entry)],
        "sandbox": {"filesystem": {"allowRead": [str(package), *map(str, readable)]}},
        "env": {"GIT_AUTHOR_NAME": "s", "GIT_AUTHOR_EMAIL": "s@example.com",
                "GIT_COMMITTER_NAME": "s", "GIT_COMMITTER_EMAIL": "s@example.com",
                **_safe(readable)},
    }  # fmt: skip
    config.write_text(json.dumps({"mcpServers": {"git": server}}))
    return ["--config", str(config), "--policy-dir", str(policy), "--workspace", str(ws)]


def _safe(readable: tuple[Path, ...]) -> dict[str, str]:
    """The user's repositories named safe for the server's git, as a user would: run as
    root, ironcurtain starts the server as another uid, and git refuses a repository that
    uid does not own. A global configuration of its own, beside what it may read (the
    ``GIT_CONFIG_COUNT`` form is not passed on to the git that serves a local clone)."""
    if not readable:
        return {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory",
                "GIT_CONFIG_VALUE_0": "*"}  # fmt: skip
    config = readable[0] / "server.gitconfig"
    config.write_text("[safe]\n\tdirectory = *\n")
    return {"GIT_CONFIG_GLOBAL": str(config)}
