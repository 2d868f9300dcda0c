"""A wrapped entry of each file format family started as its client starts it (JSON: Claude
Code's, in ``test_wrap_sessions.py``): opencode's JSONC project file (its whole command line
in one list, its ``environment``), Mistral Vibe's TOML list of servers and Goose's YAML
extensions (``cmd`` and ``envs``). Read back with the format's own parser in the client's
documented shape, the entry starts ironcurtain, which runs the real time server in its
sandbox: the tools keep their names, the call answers, the audit has it, and the secret
the client hands over reaches ironcurtain from the entry."""

from __future__ import annotations

import asyncio
import json
import os
import tomllib
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from ruamel.yaml import YAML

from launcher.clients.files.jsonc import parse
from tests.support.audit import audit_entries
from tests.support.cli import ironcurtain
from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.paths import BIN

TIME = os.path.join(BIN, "mcp-server-time")
SECRET = "TIME_API_TOKEN"

OPENCODE = """// opencode: this project's servers
{
  "$schema": "https://opencode.ai/config.json",
  "mcp": {
    // the clock
    "time": {
      "type": "local",
      "command": ["%(time)s", "--local-timezone", "UTC"],
      "environment": {"TIME_API_TOKEN": "%(secret)s"},
      "enabled": true,
    },
  },
}
"""
VIBE = """# Mistral Vibe
active_model = "devstral-2"

[[mcp_servers]]
name = "time"  # the clock
transport = "stdio"
command = "%(time)s"
args = ["--local-timezone", "UTC"]
env = { "TIME_API_TOKEN" = "%(secret)s" }
"""
GOOSE = """# goose
GOOSE_PROVIDER: anthropic
extensions:
  time:
    args:
    - --local-timezone
    - UTC
    cmd: %(time)s
    enabled: true
    envs:
      TIME_API_TOKEN: %(secret)s   # handed to the server
    name: time
    timeout: 300
    type: stdio
"""


def _opencode(text: str) -> tuple[str, list[str], dict[str, str]]:
    entry = parse(text).value["mcp"]["time"]
    return entry["command"][0], entry["command"][1:], entry.get("environment", {})


def _vibe(text: str) -> tuple[str, list[str], dict[str, str]]:
    entry = next(s for s in tomllib.loads(text)["mcp_servers"] if s["name"] == "time")
    return entry["command"], entry["args"], entry.get("env", {})


def _goose(text: str) -> tuple[str, list[str], dict[str, str]]:
    entry = YAML(typ="safe").load(text)["extensions"]["time"]
    return entry["cmd"], entry["args"], entry.get("envs") or {}


CASES = {
    "opencode-jsonc": ("opencode", "project", "opencode.jsonc", OPENCODE, _opencode),
    "mistral-vibe-toml": ("mistral-vibe", "user", ".vibe/config.toml", VIBE, _vibe),
    "goose-yaml": ("goose", "user", ".config/goose/config.yaml", GOOSE, _goose),
}


@needs_bwrap
@pytest.mark.parametrize("case", list(CASES))
def test_a_wrapped_entry_of_each_format_runs_its_server_through_ironcurtain(
    user: Home, case: str
) -> None:
    client, scope, relative, template, started = CASES[case]
    project = user.root / "proj"
    project.mkdir()
    path = (user.home if scope == "user" else project) / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(template % {"time": TIME, "secret": user.secret})
    before = path.read_bytes()

    def run(command: str, args: list[str], env: dict[str, str]) -> list[Any]:
        out: list[Any] = []

        async def scenario() -> None:
            params = StdioServerParameters(
                command=command, args=args, env={**user.env, **env}, cwd=str(project)
            )
            async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
                await s.initialize()
                out.append(sorted(t.name for t in (await s.list_tools()).tools))
                result = await s.call_tool("get_current_time", {"timezone": "UTC"})
                out.append((result.is_error, json.dumps([c.model_dump() for c in result.content])))

        asyncio.run(scenario())
        return out

    bare = run(*started(path.read_text()))
    done = ironcurtain(user, "wrap", "--client", client, cwd=project)
    assert done.returncode == 0, done.stderr
    text = path.read_text()
    assert text.splitlines()[0] == template.splitlines()[0]  # its comments kept
    command, args, env = started(text)
    assert command.endswith("/ironcurtain") and args[-2:] == ["--server", "time"], args
    assert env == {SECRET: user.secret}  # the client still hands the secret over
    if scope == "project":
        assert args[1:3] == ["--workspace", str(project)]
    wrapped = run(command, args, env)
    assert wrapped[0] == bare[0]  # the same tool names
    assert not wrapped[1][0] and '"timezone": "UTC"' in wrapped[1][1].replace("\\", ""), wrapped
    logs = sorted((user.state / "ironcurtain" / "audit").glob("*.jsonl"))
    calls = [e for log in logs for e in audit_entries(log) if e.get("tool") == "get_current_time"]
    assert [(c["server"], c["result"], c["sandboxed"]) for c in calls] == [
        ("time", "success", True)
    ]
    assert user.secret not in (user.config / "ironcurtain" / "mcp-servers.json").read_text()
    assert ironcurtain(user, "unwrap", "--client", client, cwd=project).returncode == 0
    assert path.read_bytes() == before
