"""The MCP clients configured on this machine: where each keeps its servers, in which format,
and what each entry starts.

| client | user file | project file | servers under | format |
|---|---|---|---|---|
| Claude Desktop | ``~/.config/Claude/claude_desktop_config.json`` (macOS: ``~/Library/Application Support/Claude/``) | none | ``mcpServers`` | JSON |
| Claude Code | ``~/.claude.json`` | ``.mcp.json`` | ``mcpServers`` | JSON |
| Cursor | ``~/.cursor/mcp.json`` | ``.cursor/mcp.json`` | ``mcpServers`` | JSON |
| VS Code | ``~/.config/Code/User/mcp.json`` (macOS: ``~/Library/Application Support/Code/User/``) | ``.vscode/mcp.json`` | ``servers`` | JSONC |
| Windsurf | ``~/.codeium/windsurf/mcp_config.json`` | none | ``mcpServers`` | JSON |
| Gemini CLI | ``~/.gemini/settings.json`` | ``.gemini/settings.json`` | ``mcpServers`` | JSONC |
| Codex CLI | ``~/.codex/config.toml`` | none | ``[mcp_servers.NAME]`` | TOML |
| Zed | ``~/.config/zed/settings.json`` | ``.zed/settings.json`` | ``context_servers`` | JSONC |
"""  # noqa: E501

from __future__ import annotations

import os
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import field
from pathlib import Path
from typing import Any

from launcher.errors import UsageError
from launcher.jsonc import JsoncError, parse
from sandbox_profiles.records import frozen, mutable


@frozen
class Client:
    name: str  # as --client takes it
    label: str
    user: tuple[str, ...]  # user-level files, relative to the home directory
    project: tuple[str, ...]  # project-level files, relative to the project root
    key: str  # the object that holds the servers
    syntax: str  # json, jsonc or toml
    # Where the client starts a server: "project" (the project root) or "none" (a directory
    # of the client's own: nothing to count on).
    cwd: str


def _app_support(name: str) -> str:
    if sys.platform == "darwin":
        return f"Library/Application Support/{name}"
    return f".config/{name}"


CLIENTS: tuple[Client, ...] = (
    Client("claude-desktop", "Claude Desktop",
           (f"{_app_support('Claude')}/claude_desktop_config.json",), (), "mcpServers",
           "json", "none"),
    Client("claude-code", "Claude Code", (".claude.json",), (".mcp.json",), "mcpServers",
           "json", "project"),
    Client("cursor", "Cursor", (".cursor/mcp.json",), (".cursor/mcp.json",), "mcpServers",
           "json", "project"),
    Client("vscode", "VS Code", (f"{_app_support('Code')}/User/mcp.json",),
           (".vscode/mcp.json",), "servers", "jsonc", "project"),
    Client("windsurf", "Windsurf", (".codeium/windsurf/mcp_config.json",), (), "mcpServers",
           "json", "none"),
    Client("gemini", "Gemini CLI", (".gemini/settings.json",), (".gemini/settings.json",),
           "mcpServers", "jsonc", "project"),
    Client("codex", "Codex CLI", (".codex/config.toml",), (), "mcp_servers", "toml", "none"),
    Client("zed", "Zed", (".config/zed/settings.json",), (".zed/settings.json",),
           "context_servers", "jsonc", "project"),
)  # fmt: skip
BY_NAME = {c.name: c for c in CLIENTS}


@mutable
class Entry:
    """One server entry of a client's file, as it starts the server."""

    name: str
    raw: dict[str, Any]
    command: str | None = None
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None  # a remote server

    @property
    def wrapped(self) -> bool:
        """Whether it already runs through ``ironcurtain run``."""
        return bool(self.command) and (
            Path(self.command or "").name == "ironcurtain" and self.args[:1] == ["run"]
        )


@mutable
class ClientFile:
    """The servers of one client in one file: a whole file's, or (Claude Code's
    ``~/.claude.json``) those one project keeps in it."""

    client: Client
    path: Path
    scope: str  # user, project, or local (one project's, in a user file)
    project: Path | None  # the project the servers start in (a project or local scope)
    entries: list[Entry]
    # Where the servers are in the file (keys from the top); empty: the client's key.
    at: tuple[str, ...] = ()

    @property
    def key_path(self) -> tuple[str, ...]:
        return self.at or (self.client.key,)


def entry_of(client: Client, name: str, raw: Any) -> Entry:
    """What an entry starts, whatever the client's shape of it."""
    if not isinstance(raw, dict):
        return Entry(name, {})
    entry = Entry(name, raw)
    command = raw.get("command")
    if isinstance(command, dict):  # Zed's older form: {"command": {"path", "args", "env"}}
        entry.command = _text(command.get("path"))
        entry.args = _texts(command.get("args"))
        entry.env = _mapping(command.get("env"))
    else:
        entry.command = _text(command)
        entry.args = _texts(raw.get("args"))
        entry.env = _mapping(raw.get("env"))
    entry.cwd = _text(raw.get("cwd"))
    entry.url = _text(raw.get("url") or raw.get("httpUrl") or raw.get("serverUrl"))
    return entry


def read(client: Client, path: Path, scope: str, project: Path | None) -> ClientFile:
    """A client's file, its servers listed; UsageError names the file and the place of a
    mistake."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{path}: cannot read it: {exc.strerror}") from None
    servers = servers_in(client, text, path)
    entries = [entry_of(client, name, raw) for name, raw in servers.items()]
    return ClientFile(client, path, scope, project, entries)


def servers_in(client: Client, text: str, path: Path) -> dict[str, Any]:
    if client.syntax == "toml":
        try:
            data: Any = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise UsageError(f"{path}: not TOML: {exc}") from None
    else:
        try:
            data = parse(text).value
        except JsoncError as exc:
            raise UsageError(f"{path}: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected an object at the top")
    servers = data.get(client.key, {})
    if not isinstance(servers, dict):
        raise UsageError(f"{path}: {client.key} is not an object of servers")
    return servers


def local_servers(client: Client, path: Path) -> Iterator[ClientFile]:
    """Claude Code's servers of one project kept in the user file (``claude mcp add``'s
    default "local" scope): ``projects.<project root>.mcpServers`` of ``~/.claude.json``."""
    try:
        data = parse(path.read_text(encoding="utf-8")).value
    except (OSError, JsoncError):
        return  # read() has said what is wrong with it
    projects = data.get("projects") if isinstance(data, dict) else None
    for root, settings in (projects or {}).items() if isinstance(projects, dict) else ():
        servers = settings.get("mcpServers") if isinstance(settings, dict) else None
        if not isinstance(servers, dict) or not servers or not os.path.isabs(root):
            continue
        entries = [entry_of(client, name, raw) for name, raw in servers.items()]
        at = ("projects", root, "mcpServers")
        yield ClientFile(client, path, "local", Path(root), entries, at)


def found(home: Path, project: Path | None) -> Iterator[ClientFile]:
    """Every client file that exists, user files first."""
    for client in CLIENTS:
        for relative in client.user:
            path = home / relative
            if path.is_file():
                yield read(client, path, "user", None)
                if client.name == "claude-code":
                    yield from local_servers(client, path)
        if project is not None:
            for relative in client.project:
                path = project / relative
                if path.is_file():
                    yield read(client, path, "project", project)


def home() -> Path:
    return Path(os.path.expanduser("~"))


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _texts(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _mapping(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v) for k, v in value.items()}
