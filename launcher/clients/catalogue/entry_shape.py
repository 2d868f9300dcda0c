"""How each client says what a server entry starts (its :class:`Shape`), and which keys and
values of an entry wrap may pass over: those that change nothing of what the client starts,
nor how, and values a client starts exactly as written (strings where it takes strings). An
entry with anything else is neither wrapped nor counted as running through ironcurtain: the
client could start something else from it.

Most clients say ``{"command": PROGRAM, "args": [...], "env": {...}}``; Goose says ``cmd``
and ``envs``, opencode the whole argument vector in ``command`` and ``environment``. One
:class:`Shape` per form reads an entry (:func:`started`) and writes the wrapped one
(:func:`wrapped`): nothing else of wrap knows the forms apart.
"""

from __future__ import annotations

import json
from typing import Any

from sandbox_profiles.records import frozen

# Keys of an entry that change nothing of what the client starts, nor how: kept as they are
# when wrap rewrites an entry. Any other key (``url``, ``envFile``, ``env_vars``, ``cwd``,
# ``headers``, a client's own next one) could make the client start something else, or
# start it otherwise, so such an entry is neither wrapped nor counted as protected.
INERT_KEYS = frozenset(
    {
        "description", "disabled", "enabled", "timeout", "trust", "autoApprove",
        "alwaysAllow", "startup_timeout_ms", "startup_timeout_sec", "tool_timeout_sec",
        "includeTools", "excludeTools", "disabledTools", "disabled_tools", "tools",
    }
)  # fmt: skip
# Keys whose only harmless values are those given: a local server started by its command.
FIXED_KEYS: dict[str, tuple[Any, ...]] = {
    "type": ("stdio",), "source": ("custom",), "transport": ("stdio",),
}  # fmt: skip


@frozen
class Shape:
    """One client's form of a local server's entry."""

    name: str
    command: str = "command"  # the program (``args`` None: the whole argument vector)
    args: str | None = "args"
    env: str = "env"
    fixed: tuple[tuple[str, tuple[Any, ...]], ...] = tuple(FIXED_KEYS.items())
    inert: frozenset[str] = INERT_KEYS
    keep_env: bool = False  # an environment left empty stays, empty (the client wants it)

    @property
    def entry_keys(self) -> frozenset[str]:
        return frozenset(k for k in (self.command, self.args, self.env) if k)


STANDARD = Shape("standard")
# An entry of a list, found by its name (Continue's YAML, Mistral Vibe's TOML).
NAMED = Shape("named", inert=INERT_KEYS | {"name", "connectionTimeout"})
# GitHub Copilot CLI: "local" is its word for a stdio server.
COPILOT = Shape("copilot", fixed=(("type", ("local", "stdio")),))
GOOSE = Shape(
    "goose", command="cmd", env="envs",
    # env_keys names secrets goose fills from its keyring: only an empty list is inert.
    fixed=(("type", ("stdio",)), ("env_keys", ([],)), ("bundled", (None, False))),
    inert=INERT_KEYS | {"name", "available_tools"}, keep_env=True,
)  # fmt: skip
OPENCODE = Shape(
    "opencode", args=None, env="environment", fixed=(("type", ("local",)),),
    inert=frozenset({"enabled", "timeout"}),
)  # fmt: skip


def started(shape: Shape, raw: dict[str, Any]) -> tuple[Any, Any, Any]:
    """The program, arguments and environment the entry names, as written (unchecked)."""
    command = raw.get(shape.command)
    if shape.args is None:  # the whole argument vector
        argv = command if isinstance(command, list) and command else [None]
        return argv[0], argv[1:], raw.get(shape.env)
    if isinstance(command, dict):  # Zed's older form: {"command": {"path", "args", "env"}}
        return command.get("path"), command.get("args"), command.get("env")
    return command, raw.get(shape.args), raw.get(shape.env)


def wrapped(
    shape: Shape, raw: dict[str, Any], exe: str, run: list[str], env: dict[str, str]
) -> dict[str, Any]:
    """The entry ``raw`` (its inert keys kept) starting ``exe run...`` with ``env``; its
    working directory dropped (it moves with the definition)."""
    out = dict(raw)
    out.pop("cwd", None)
    if isinstance(out.get(shape.command), dict):  # Zed's older form
        out[shape.command] = {"path": exe, "args": run, "env": env}
        return out
    if shape.args is None:
        out[shape.command] = [exe, *run]
    else:
        out[shape.command] = exe
        out[shape.args] = run
    if env or (shape.keep_env and shape.env in out):
        out[shape.env] = env
    else:
        out.pop(shape.env, None)
    return out


def odd_key(raw: dict[str, Any], shape: Shape, also: frozenset[str] = frozenset()) -> str | None:
    """Why a key of the entry could change what the client starts (None: none does);
    ``also``: more keys allowed."""
    fixed = dict(shape.fixed)
    for key, value in raw.items():
        if key in fixed:
            if not any(value == allowed for allowed in fixed[key]):
                wants = " or ".join(json.dumps(a) for a in fixed[key])
                return f"its {key} is {_json(value)}, not {wants}"
        elif key not in shape.entry_keys | shape.inert | also:
            return f"it has the key {key!r}, which wrap does not write"
    command = raw.get(shape.command)
    if isinstance(command, dict):  # Zed's older form
        extra = sorted(set(command) - {"path", "args", "env"})
        if extra:
            return f"its command has the key {extra[0]!r}, which wrap does not write"
    return None


def shape_problem(raw: dict[str, Any], shape: Shape) -> str | None:
    """Why the entry's command, args, env or cwd are not what a client starts as written
    (None: they are): a client may turn any other value into text (``["--allow-x"]`` into
    ``--allow-x``), so what is not a string is never passed over."""
    nested = isinstance(raw.get(shape.command), dict)
    at = f"{shape.command}." if nested else ""
    names = ("path", "args", "env") if nested else (shape.command, shape.args, shape.env)
    command, args, env = started(shape, raw)
    if shape.args is None:
        whole = raw.get(shape.command)
        if whole is not None and not (isinstance(whole, list) and whole):
            return f"its {shape.command} is {_json(whole)}, not a list of strings"
        args = whole[1:] if whole else None
        names = (shape.command, shape.command, shape.env)
    if command is not None and not isinstance(command, str):
        return f"its {at}{names[0]} is {_json(command)}, not a string"
    if args is not None and not isinstance(args, list):
        return f"its {at}{names[1]} is {_json(args)}, not a list of strings"
    for arg in args or []:
        if not isinstance(arg, str):
            return f"its {at}{names[1]} hold {_json(arg)}, not a string"
    if env is not None and not isinstance(env, dict):
        return f"its {at}{names[2]} is {_json(env)}, not an object of strings"
    for name, value in (env or {}).items():
        if not isinstance(value, str):
            return f"its {at}{names[2]} {name} is {_json(value)}, not a string"
    if "cwd" in raw and not isinstance(raw["cwd"], str):
        return f"its cwd is {_json(raw['cwd'])}, not a string"
    return None


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=True, default=str)[:80]
