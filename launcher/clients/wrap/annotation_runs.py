"""The wrapped servers' tools annotated with the heuristic, each server in its own
``ironcurtain annotate-tools`` run: one that cannot start (a variable it needs is not set,
its command exits at once) leaves the others annotated, and is named with the command that
annotates it later.

Each run gets the environment wrap runs in, plus the values the client's entry holds as
text (the client passes them; ironcurtain's config refers to them as ``${NAME}``). A
variable the server's definition refers to that is set nowhere gets a placeholder value
for that listing run only, and this is said; when the server does not start with it, the
server stays unannotated and the command to run later names the variable to set.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

from launcher.clients.catalogue.known import ironcurtain_exe, user_config, user_policy
from policy.variables import PLACEHOLDER

PLACEHOLDER_VALUE = "ironcurtain-listing-placeholder"
# Names ironcurtain fills itself, never from the environment.
_OWN = frozenset({"workspace", "caller"})
_ERROR = "ironcurtain: error: "


def annotations_path() -> str:
    return str(user_policy() / "tool-annotations.json")


def later_command(name: str, unset: Sequence[str] = ()) -> str:
    """The command that annotates ``name`` (the variables it lacks set first)."""
    run = shlex.join([
        "ironcurtain", "annotate-tools", "--server", name, "--heuristic",
        "--config", str(user_config()), "--output", annotations_path(),
    ])  # fmt: skip
    return " ".join([*(f"{v}=VALUE" for v in unset), run])


def annotated_servers() -> set[str] | None:
    """The servers the user policy's annotations file has (None: it cannot be read)."""
    try:
        with open(annotations_path(), encoding="utf-8") as handle:
            servers = json.load(handle).get("servers")
    except (OSError, ValueError, AttributeError):
        return None
    return set(servers) if isinstance(servers, dict) else None


def _unset(definition: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """The variables ``definition`` refers to without a default that ``env`` lacks."""
    from launcher.clients.wrap.secret_env import secret_sources

    text = json.dumps(definition)
    names = [body for body in PLACEHOLDER.findall(text) if ":-" not in body]
    names += secret_sources(definition)  # a brokered secret's value, read from env:NAME
    return sorted({n for n in names if n not in _OWN and not env.get(n)})


def _run(name: str, env: Mapping[str, str]) -> tuple[bool, str]:
    """One ``annotate-tools`` run for ``name``: whether it annotated it, and its last line
    of complaint when not."""
    argv = [ironcurtain_exe(), "annotate-tools", "--server", name, "--heuristic",
            "--config", str(user_config()), "--output", annotations_path()]  # fmt: skip
    try:
        done = subprocess.run(
            argv, env=dict(env), capture_output=True, text=True, stdin=subprocess.DEVNULL,
            timeout=300,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return False, "it did not list its tools within 300 seconds"
    if done.returncode == 0:
        return True, ""
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(_ERROR)]
    if errors:  # ironcurtain's own error, not a line of the server's output
        return False, errors[-1][len(_ERROR) :]
    return False, lines[-1] if lines else f"exit status {done.returncode}"


def annotate_each(
    servers: Mapping[str, Mapping[str, Any]], given: Mapping[str, Mapping[str, str]]
) -> tuple[list[str], list[str]]:
    """Annotate each of ``servers`` (name: its moved definition) on its own; ``given``: per
    server, the values its client's entry holds as text. The servers annotated, and what to
    say."""
    done: list[str] = []
    said: list[str] = []
    for name, definition in servers.items():
        env = {**os.environ, **given.get(name, {})}
        unset = _unset(definition, env)
        ok, why = _run(name, {**env, **dict.fromkeys(unset, PLACEHOLDER_VALUE)})
        if ok:
            done.append(name)
            if unset:
                said.append(
                    f"{name}: listed with a placeholder for {', '.join(unset)} (not set here "
                    "nor held by its client's entry as text); its client gives the real value"
                )
            continue
        need = f"; it needs {', '.join(unset)} set" if unset else ""
        said.append(
            f"{name}: tools not annotated ({why}){need}: its calls are refused until they "
            f"are; run later: {later_command(name, unset)}"
        )
    return done, said
