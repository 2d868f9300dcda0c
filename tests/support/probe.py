"""The hostile probe server (``tests/servers/probe_server.py``): its config, the raw policy
that lets every call through (only the OS sandbox stands in its way), one session of it."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.support.cli import run_args
from tests.support.home import Home
from tests.support.paths import PROBE
from tests.support.sdk import Calls, call, connect

# name -> argument names; every argument has the role "none", so no path is checked by policy
PROBE_TOOLS = {
    "read_path": ["path"],
    "write_path": ["path", "content", "parents"],
    "env_value": ["name"],
    "list_dir": ["path"],
    "symlink_write": ["link", "target", "content"],
    "processes": [],
    "find_secret": ["needle"],
    "connect_tcp": ["host", "port"],
    "connect_unix": ["path"],
    "http_get": ["url"],
    "http_send": ["url", "headers", "body", "basic", "insecure"],
    "udp_send": ["host", "port"],
    "resolve": ["name"],
    "send_signal": ["pid"],
    "ptrace_child": [],
    "new_user_namespace": [],
    "raw_syscall": ["name"],
    "x32_syscall": [],
    "inject_tty": [],
    "allocate": ["megabytes", "processes"],
    "spawn": ["count"],
    "identity": [],
    "burn": ["seconds"],
    "linger": [],
    "fs_ops": ["base", "ops"],
    "write_above": ["levels", "rel", "content"],
    "write_under_env": ["var", "rel", "content"],
    "hold_connections": ["path", "count"],
    "peek": ["path", "socket_path"],
    "move": ["source", "destination"],
    "overreach": ["path", "content", "others", "link_to", "fifo", "mode"],
    "ask_user": ["question"],
    "sample": ["prompt"],
    "roots": [],
    "client_can": [],
    "instance": [],
    "slow": ["steps"],
    "touch": ["uri"],
    "log_each": [],
    "record": ["customer_id"],
    "card": ["customer_id"],
}

ALLOW_EVERYTHING = {"name": "allow-everything", "if": {}, "then": "allow", "reason": "test"}


def write_raw_policy(
    directory: Path,
    servers: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
    first: Sequence[Mapping[str, Any]] = (),
) -> Path:
    """A policy that allows every call of each server's tools (server -> tool -> argument
    names; the probe's by default) and treats every argument as opaque (role ``none``):
    only the OS sandbox stands in the way. ``first``: rules that come before that."""
    directory.mkdir(parents=True, exist_ok=True)
    annotations = {
        server: {
            "tools": [
                {
                    "toolName": tool,
                    "serverName": server,
                    "effect": "other",
                    "sideEffects": True,
                    "args": {a: ["none"] for a in args},
                }
                for tool, args in tools.items()
            ]
        }
        for server, tools in (servers or {"probe": PROBE_TOOLS}).items()
    }
    (directory / "tool-annotations.json").write_text(json.dumps({"servers": annotations}))
    rules = [*first, ALLOW_EVERYTHING]
    (directory / "compiled-policy.json").write_text(json.dumps({"rules": rules}))
    return directory


def probe_server_config(
    sandboxed: bool = True, limits: dict[str, Any] | None = None, allow_read: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The probe's entry in ``mcpServers``; it logs its calls to the workspace's
    ``probe-calls.jsonl``."""
    server: dict[str, Any] = {
        "command": sys.executable,
        "args": [str(PROBE)],
        "env": {"PROBE_LOG": "${workspace}/probe-calls.jsonl"},
        # Written on the mcp SDK, it serves both eras; its tools ask in the handshake era's
        # way, and the tests that bring it a stateless client bridge such a server: spoken
        # to in the handshake era whatever its client's.
        "era": "handshake",
    }
    if sandboxed:
        # Its tools take no path role (the raw policy checks nothing), so it would not see
        # the workspace at all: it asks for it (it logs there and is attacked there).
        server["sandbox"] = {
            "filesystem": {
                "allowRead": [str(PROBE.parent), *allow_read],
                "allowWrite": ["${workspace}"],
            }
        }
        if limits:
            server["sandbox"]["limits"] = limits
    else:
        server["sandbox"] = False
    return server


def write_probe_config(user: Home, server: dict[str, Any] | None = None) -> Path:
    """A config with the probe (sandboxed, unless ``server`` says otherwise) as its one
    server."""
    config = user.root / "probe.json"
    entry = probe_server_config(True) if server is None else server
    config.write_text(json.dumps({"mcpServers": {"probe": entry}}))
    return config


def probe_session(
    user: Home, policy: Path | None = None, first: Sequence[Mapping[str, Any]] = ()
) -> tuple[list[str], Path, Path]:
    """A session of the sandboxed probe under ``policy`` (by default the raw policy, with
    ``first`` rules before it): its ``ironcurtain run`` options, workspace and audit log."""
    ws = user.ws()
    audit = user.root / "audit.jsonl"
    if policy is None:
        policy = write_raw_policy(user.root / "policy", first=first)
    return run_args(write_probe_config(user), policy, ws, audit), ws, audit


def run_probe(
    user: Home,
    ws: Path,
    server: dict[str, Any],
    calls: Callable[[], Calls],
    before: Callable[[], None] = lambda: None,
    prefix: Sequence[str] = (),
) -> list[tuple[bool, str]]:
    """One ``ironcurtain run`` session of the probe under the raw policy: ``before`` runs
    once it is up, then each call of ``calls()`` (made only then, so it can use what
    ``before`` found); every (is error, text) answer, in order. ``prefix``: a program that
    runs ``ironcurtain`` (``prlimit …``)."""
    config = write_probe_config(user, server)
    policy = write_raw_policy(user.root / "policy")
    out: list[tuple[bool, str]] = []
    args = ["--config", str(config), "--policy-dir", str(policy), "--workspace", str(ws)]

    async def scenario() -> None:
        async with connect(user, *args, prefix=prefix) as session:
            before()
            for tool, arguments in calls():
                out.append(await call(session, f"probe__{tool}", arguments))

    asyncio.run(scenario())
    return out


def probe_calls(ws: Path) -> list[dict[str, Any]]:
    """What the probe logged of the calls that reached it (none: an empty list)."""
    log = ws / "probe-calls.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
