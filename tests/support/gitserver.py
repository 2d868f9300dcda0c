"""The design's git server, ``@cyanheads/git-mcp-server``, from npm: installed once into a
cache of the tests' own, and a session of it through ironcurtain with its heuristic
annotations and a policy a user would write (reads and writes in the workspace allowed,
anything else asked)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from policy.heuristic import heuristic_annotation

PACKAGE = "@cyanheads/git-mcp-server"
VERSION = "2.15.3"
LISTING = Path(__file__).parents[1] / "data" / "servers" / "cyanheads-git-mcp-server-2.15.3.json"


def cache_dir() -> Path:
    """Where installed npm packages of the tests are kept between runs: one per user,
    outside any home (a sandbox sees no home, and runs the package where it lies)."""
    return Path("/var/tmp") / f"ironcurtain-tests-{os.getuid()}" / "npm"


def installed_git_server() -> Path:
    """The server's entry script, installed with npm into :func:`cache_dir` the first time
    (into a temporary directory renamed into place, so a broken install is never used); the
    test is skipped, saying why, where npm cannot install it."""
    home = cache_dir() / f"cyanheads-git-mcp-server-{VERSION}"
    entry = home / "node_modules" / PACKAGE / "dist" / "index.js"
    if entry.is_file():
        return entry
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed: the real git server cannot be installed")
    home.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="install-", dir=home.parent))
    done = subprocess.run(
        [npm, "install", "--prefix", str(staging), "--no-audit", "--no-fund", "--silent",
         f"{PACKAGE}@{VERSION}"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        pytest.skip(f"npm could not install {PACKAGE}@{VERSION}: {done.stderr.strip()[-300:]}")
    try:
        staging.rename(home)
    except OSError:  # installed meanwhile by another run
        shutil.rmtree(staging, ignore_errors=True)
    return entry


def write_git_session(
    root: Path, entry: Path, ws: Path, readable: tuple[Path, ...] = ()
) -> list[str]:
    """A config, tool annotations and policy for the server in ``root``; the
    ``ironcurtain run`` options of a session of it in ``ws``; ``readable``: more the
    server may read (a repository to clone from)."""
    tools = json.loads(LISTING.read_text(encoding="utf-8"))["tools"]
    policy = root / "policy"
    policy.mkdir(parents=True, exist_ok=True)
    drafts = [heuristic_annotation("git", tool) for tool in tools]
    (policy / "tool-annotations.json").write_text(
        json.dumps({"servers": {"git": {"tools": drafts}}})
    )
    (policy / "compiled-policy.json").write_text(json.dumps({"rules": _rules()}))
    config = root / "git-servers.json"
    package = entry.parents[3]  # the install's node_modules: the server and what it loads
    server: dict[str, Any] = {
        "command": "node",
        "args": [str(entry)],
        "sandbox": {"filesystem": {"allowRead": [str(package), *map(str, readable)]}},
        "env": {"GIT_AUTHOR_NAME": "s", "GIT_AUTHOR_EMAIL": "s@example.com",
                "GIT_COMMITTER_NAME": "s", "GIT_COMMITTER_EMAIL": "s@example.com",
                **_safe(root, readable)},
    }  # fmt: skip
    config.write_text(json.dumps({"mcpServers": {"git": server}}))
    return ["--config", str(config), "--policy-dir", str(policy), "--workspace", str(ws)]


def _safe(root: Path, readable: tuple[Path, ...]) -> dict[str, str]:
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


def _rules() -> list[dict[str, Any]]:
    return [
        {
            "name": "reads-in-workspace",
            "if": {"effect": ["read"], "paths": {"roles": ["read-path"], "within": "${workspace}"}},
            "then": "allow",
            "reason": "reads in the workspace",
        },
        {
            "name": "writes-in-workspace",
            "if": {
                "effect": ["write"],
                "paths": {"roles": ["read-path", "write-path"], "within": "${workspace}"},
            },
            "then": "allow",
            "reason": "writes in the workspace",
        },
        {"name": "ask", "if": {}, "then": "escalate", "reason": "anything else"},
    ]
