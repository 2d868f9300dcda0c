"""Which keys and values of a client's server entry wrap may pass over: those that change
nothing of what the client starts, nor how, and values a client starts exactly as written
(strings where it takes strings). An entry with anything else is neither wrapped nor counted
as running through ironcurtain: the client could start something else from it.
"""

from __future__ import annotations

import json
from typing import Any

# Keys of an entry that change nothing of what the client starts, nor how: kept as they are
# when wrap rewrites an entry. Any other key (``url``, ``envFile``, ``env_vars``, ``cwd``,
# ``headers``, a client's own next one) could make the client start something else, or
# start it otherwise, so such an entry is neither wrapped nor counted as protected.
INERT_KEYS = frozenset(
    {
        "description", "disabled", "enabled", "timeout", "trust", "autoApprove",
        "alwaysAllow", "startup_timeout_ms", "startup_timeout_sec", "tool_timeout_sec",
        "includeTools", "excludeTools",
    }
)  # fmt: skip
# Keys whose only harmless value is the one given: a local server started by its command.
FIXED_KEYS = {"type": "stdio", "source": "custom"}
ENTRY_KEYS = frozenset({"command", "args", "env"})


def odd_key(raw: dict[str, Any], also: frozenset[str] = frozenset()) -> str | None:
    """Why a key of the entry could change what the client starts (None: none does);
    ``also``: more keys allowed."""
    for key, value in raw.items():
        if key in FIXED_KEYS:
            if value != FIXED_KEYS[key]:
                return f"its {key} is {json.dumps(value)[:80]}, not {json.dumps(FIXED_KEYS[key])}"
        elif key not in ENTRY_KEYS | INERT_KEYS | also:
            return f"it has the key {key!r}, which wrap does not write"
    command = raw.get("command")
    if isinstance(command, dict):  # Zed's older form
        extra = sorted(set(command) - {"path", "args", "env"})
        if extra:
            return f"its command has the key {extra[0]!r}, which wrap does not write"
    return None


def shape_problem(raw: dict[str, Any]) -> str | None:
    """Why the entry's command, args, env or cwd are not what a client starts as written
    (None: they are): a client may turn any other value into text (``["--allow-x"]`` into
    ``--allow-x``), so what is not a string is never passed over."""
    parts, at = (raw["command"], "command.") if isinstance(raw.get("command"), dict) else (raw, "")
    command = parts.get("path" if at else "command")
    if command is not None and not isinstance(command, str):
        return f"its {at}{'path' if at else 'command'} is {_json(command)}, not a string"
    args = parts.get("args")
    if args is not None and not isinstance(args, list):
        return f"its {at}args is {_json(args)}, not a list of strings"
    for arg in args or []:
        if not isinstance(arg, str):
            return f"its {at}args hold {_json(arg)}, not a string"
    env = parts.get("env")
    if env is not None and not isinstance(env, dict):
        return f"its {at}env is {_json(env)}, not an object of strings"
    for name, value in (env or {}).items():
        if not isinstance(value, str):
            return f"its {at}env {name} is {_json(value)}, not a string"
    if "cwd" in raw and not isinstance(raw["cwd"], str):
        return f"its cwd is {_json(raw['cwd'])}, not a string"
    return None


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=True, default=str)[:80]
