"""Where ironcurtain keeps things (XDG base directories)."""

from __future__ import annotations

import os
from pathlib import Path


def _xdg(var: str, fallback: str) -> Path:
    value = os.environ.get(var)
    return Path(value) if value and os.path.isabs(value) else Path.home() / fallback


def config_dir() -> Path:
    return _xdg("XDG_CONFIG_HOME", ".config") / "ironcurtain"


def state_dir() -> Path:
    """Audit logs, session records and per-session workspaces."""
    return _xdg("XDG_STATE_HOME", ".local/state") / "ironcurtain"


def make_state(parts: tuple[str, ...]) -> None:
    """The state directory and the directories ``parts`` in it, owner-only, unless there."""
    state = state_dir()
    for part in parts:
        os.makedirs(state / part, mode=0o700, exist_ok=True)


def cache_dir() -> Path:
    """What is kept across starts, keyed by content (``policy.cache``): the validated
    config and policy files, the compiled system-call filter."""
    return state_dir() / "cache"


def bundled_config() -> Path:
    return Path(__file__).resolve().parent.parent / "defaults" / "mcp-servers.json"
