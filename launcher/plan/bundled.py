"""The bundled default config's servers as this machine has them. ``scripts/install.sh``
installs all four; ``pip``, ``pipx`` or ``uv tool install`` of ironcurtain installs none of
the npm one and, without the ``servers`` extra, none of the Python ones. With the bundled
config (and no server named), those that are installed start and each missing one is named
with the command that adds it; a user's own config, or a server asked for by name, stays
strict (its missing command is an error)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from launcher.plan.config import BUNDLED_SOURCE, warn
from launcher.plan.config_schema import ServerConfig
from launcher.plan.programs import resolve_command
from launcher.shared import dirs
from launcher.shared.user_errors import UsageError

_PYTHON = (
    "install ironcurtain with its servers: pip install 'ironcurtain[servers]' "
    "(pipx install 'ironcurtain[servers]', uv tool install 'ironcurtain[servers]')"
)
# How each bundled server's command is added.
INSTALL = {
    "mcp-server-filesystem": "npm install -g @modelcontextprotocol/server-filesystem",
    "mcp-server-git": _PYTHON,
    "mcp-server-time": _PYTHON,
    "mcp-server-fetch": _PYTHON,
}


def missing(commands: Mapping[str, str], search: Sequence[str]) -> dict[str, str]:
    """Of the servers named in ``commands`` (name: command), those whose command is not
    installed, each with what is missing and how to add it.

    >>> missing({"x": "mcp-server-nonexistent-x"}, ["/nonexistent"])
    {'x': "command 'mcp-server-nonexistent-x' is not installed"}
    """
    out = {}
    for name, command in commands.items():
        if resolve_command(command, list(search)) is None:
            how = INSTALL.get(command)
            out[name] = f"command '{command}' is not installed" + (
                f"; to add it: {how}" if how else ""
            )
    return out


def bundled_commands() -> dict[str, str]:
    """The bundled default config's servers and their commands, as the file names them."""
    with dirs.bundled_config().open(encoding="utf-8") as handle:
        servers = json.load(handle)["mcpServers"]
    return {name: str(server["command"]) for name, server in servers.items()}


def installed(
    source: str,
    selected: dict[str, ServerConfig],
    asked: Sequence[str],
    search: Sequence[str],
) -> dict[str, ServerConfig]:
    """The servers to start: with the bundled config and no server asked for by name, those
    installed (each missing one named on stderr with the command that adds it; none
    installed is a UsageError); otherwise every selected server."""
    if source != BUNDLED_SOURCE or asked:
        return selected
    absent = missing({n: s.command for n, s in selected.items() if s.command}, search)
    if len(absent) == len(selected):
        raise UsageError(
            "none of the servers of the bundled default config is installed: "
            + "; ".join(f"{name}: {why}" for name, why in absent.items())
        )
    for name, why in absent.items():
        warn(f"server '{name}' of the bundled default config is not started: {why}")
    return {n: s for n, s in selected.items() if n not in absent}
