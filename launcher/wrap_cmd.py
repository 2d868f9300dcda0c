"""``ironcurtain clients``, ``wrap`` and ``unwrap``: the servers a user already has, in the
clients they use, run through ironcurtain under the same names.

``wrap`` moves each selected stdio entry's definition into ironcurtain's user config and
points the client's entry at ``ironcurtain run --config USER_CONFIG --policy-dir
USER_POLICY --server NAME`` (one server: its tool names stay as the client knows them).
Only the entry's value changes in the client's file; comments and layout stay. Directory
arguments become writable mounts of the server's sandbox; environment entries that look
like secrets stay in the client's entry (the client hands them to ironcurtain) and the moved
definition refers to them as ``${NAME}``. Every file changed is backed up first and written
atomically; what was written is recorded, so ``unwrap`` restores each file exactly, and
refuses one that changed since (:mod:`launcher.wrap_files`).
"""

from __future__ import annotations

import difflib
import os
import shutil
from collections.abc import Sequence
from dataclasses import field
from pathlib import Path
from typing import Any

from launcher.client_io import Refused, Source, read_user
from launcher.clients import (
    BY_NAME,
    CLIENTS,
    PROJECT_VARIABLES,
    ClientFile,
    Entry,
    Found,
    found,
    holds_home,
    home,
    ironcurtain_exe,
    not_protected,
    run_args,
    secret_name,
    user_config,
    workspace_of,
)
from launcher.errors import UsageError
from launcher.jsonc import JsoncError, parse
from launcher.shown import visible
from sandbox_profiles.discover import PackageNotInstalled, npx_roots, resolve_npx
from sandbox_profiles.records import mutable

# As the bundled config has it for its git server.
GIT_SAFE_DIRECTORY = {
    "GIT_CONFIG_COUNT": "1",
    "GIT_CONFIG_KEY_0": "safe.directory",
    "GIT_CONFIG_VALUE_0": "*",
}
DIRECTORY_OPTIONS = ("--repository", "--repo", "--root", "--dir", "--directory", "--path")


@mutable
class Change:
    path: Path
    before: str
    after: str
    notes: list[str] = field(default_factory=list)
    servers: list[str] = field(default_factory=list)
    source: Source | None = None  # the file as it was read (None: ironcurtain's own config)


def select(home: Path, project: Path | None, clients: Sequence[str], everything: bool) -> Found:
    unknown = [c for c in clients if c not in BY_NAME]
    if unknown:
        raise UsageError(
            f"--client {unknown[0]}: no such client (known: {', '.join(c.name for c in CLIENTS)})"
        )
    if not clients and not everything:
        raise UsageError(
            "name the clients: --client NAME (repeatable; see `ironcurtain clients`) or --all"
        )
    return found(home, project).of(None if everything else clients)


def refuse(files: Found, what: str) -> None:
    """UsageError when a chosen client's file is there but could not be read: wrap and
    unwrap change nothing then."""
    if files.refused:
        raise UsageError(f"{files.refused[0][1]}; {what}")


def describe(files: Found) -> str:
    """The clients' servers, one line each, for ``ironcurtain clients`` (what the files
    name shown as escapes where it could act on a terminal)."""
    lines: list[str] = []
    for f in files.files:
        scope = f"local: {f.at[1]}" if f.scope == "local" else f.scope
        lines.append(shown(f"{f.client.label} ({scope}): {f.path}"))
        if not f.entries:
            lines.append("  (no servers)")
        names = {e.name: shown(e.name) for e in f.entries}
        width = max((len(n) for n in names.values()), default=0)
        for e in f.entries:
            reason = not_protected(f, e) if e.calls_ironcurtain else None
            if e.calls_ironcurtain and reason is None:
                how = "runs through ironcurtain"
            elif reason is not None:
                how = f"NOT protected: {' '.join([e.command or '', *e.args])} ({reason})"
            elif e.command:
                how = "stdio: " + " ".join([e.command, *e.args])
            elif e.url:
                how = f"remote: {e.url} (not sandboxable: left alone)"
            else:
                how = "no command: left alone"
            lines.append(f"  {names[e.name]:<{width}}  {shown(how)}")
    for client, why in files.refused:
        lines.append(shown(f"{client.label}: {why}"))
    return "\n".join(lines) or "no MCP client configuration found"


def shown(text: str) -> str:
    """One line of what a client's file names, safe to print."""
    return visible(text, one_line=True)


def launch_problem(e: Entry) -> str | None:
    """Why the entry could not start in a sandbox as it stands (None: it can). A sandbox
    has no network, so a launcher that fetches its package at start cannot run there."""
    program = Path(e.command or "").name
    if program in ("uvx", "uv"):
        return (
            f"{e.name}: `{program}` runs its package from uv's cache in your home, which no "
            "sandbox is shown; install it where one can see it (python3 -m venv "
            f"/opt/venvs/{e.name}, then /opt/venvs/{e.name}/bin/pip install PACKAGE), point "
            "the entry at the installed command, and wrap again: left alone"
        )
    if program != "npx":
        return None
    prefixes = [os.path.dirname(os.path.dirname(shutil.which("npx") or "/usr/bin/npx"))]
    cache = os.environ.get("npm_config_cache")  # noqa: SIM112 (npm's own name)
    roots = npx_roots(os.path.expanduser("~"), cache, prefixes)
    try:
        found = resolve_npx(e.args, roots)
    except PackageNotInstalled as exc:
        return f"{e.name}: {exc}; wrap again after that: left alone"
    if found is None:
        return (
            f"{e.name}: only `npx [-y] PACKAGE [ARGS]` can be sandboxed; give the installed "
            "program as the command: left alone"
        )
    return None


def git_server(e: Entry) -> bool:
    """Whether the entry starts the reference git server."""
    return any(Path(part).name == "mcp-server-git" for part in (e.command or "", *e.args))


def moved_definition(f: ClientFile, e: Entry) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """The server's definition for ironcurtain's config, the environment the client's entry
    keeps (secrets, referred to as ``${NAME}`` in the definition), and what to tell the user."""
    notes: list[str] = []
    base = f.project if f.client.cwd == "project" and f.project is not None else None
    args: list[str] = []
    writable: list[str] = []
    readable: list[str] = []
    after_option = False
    variable = PROJECT_VARIABLES.get(f.client.name)
    if variable and workspace_of(f, e) is None and any(variable in a for a in e.args):
        notes.append(
            f"{e.name}: {variable} in a user-level entry becomes the session's own workspace "
            "(a user-level entry gets none: the folder the client has open could be your home)"
        )
    for arg in e.args:
        value = arg
        if variable and variable in arg:
            args.append(arg.replace(variable, "${workspace}"))
            after_option = False
            continue
        option, _, attached = arg.partition("=")
        inline = bool(attached) and option in DIRECTORY_OPTIONS  # --repository=DIR
        candidate = attached if inline else arg
        looks_like_path = candidate.startswith(("/", "~", "./", "../")) or after_option
        if looks_like_path or (base is not None and candidate in (".", "..")):
            resolved = Path(os.path.expanduser(candidate))
            if not resolved.is_absolute() and base is not None:
                resolved = base / resolved
            if resolved.is_dir() or resolved.is_file():
                full = str(resolved.resolve())
                value = f"{option}={full}" if inline else full
                # A directory made writable; a script the command runs, with what lies
                # beside it, readable.
                mount = full if resolved.is_dir() else str(Path(full).parent)
                if holds_home(Path(mount), home()):
                    notes.append(
                        f"{e.name}: {mount} is or holds your home directory: not given to its "
                        f"sandbox (add a directory of the home to its entry in {user_config()} "
                        "yourself if you mean it)"
                    )
                else:
                    (writable if resolved.is_dir() else readable).append(mount)
        args.append(value)
        after_option = arg in DIRECTORY_OPTIONS
    definition: dict[str, Any] = {"command": e.command, "args": args}
    kept: dict[str, str] = {}
    env: dict[str, str] = {}
    for name, value in e.env.items():
        if secret_name(name):
            kept[name] = value
            env[name] = "${" + name + "}"
        else:
            env[name] = value
    if git_server(e) and "GIT_CONFIG_COUNT" not in env:
        # As root, servers run as an unprivileged uid, and git refuses a repository that
        # uid does not own unless told it is safe (the sandbox holds only what it may use).
        env.update(GIT_SAFE_DIRECTORY)
    if env:
        definition["env"] = env
    if e.cwd:
        definition["cwd"] = e.cwd
    definition["description"] = f"wrapped from {f.client.label} ({f.path})"
    mounts: dict[str, list[str]] = {}
    if writable:
        mounts["allowWrite"] = sorted(set(writable))
        notes.append(f"{e.name}: writable in its sandbox: {', '.join(mounts['allowWrite'])}")
    readable = [r for r in sorted(set(readable)) if r not in writable]
    if readable:
        mounts["allowRead"] = readable
        notes.append(f"{e.name}: readable in its sandbox: {', '.join(readable)}")
    if mounts:
        definition["sandbox"] = {"filesystem": mounts}
    if kept:
        notes.append(
            f"{e.name}: {', '.join(sorted(kept))} stay in {f.path} (the client passes them to "
            "ironcurtain); the moved definition refers to them as ${NAME}"
        )
    return definition, kept, notes


def client_entry(f: ClientFile, e: Entry, kept_env: dict[str, str]) -> dict[str, Any]:
    """The client's new entry: the same entry, starting ironcurtain for this one server."""
    run = run_args(e.name, workspace_of(f, e))
    raw = dict(e.raw)
    if isinstance(raw.get("command"), dict):  # Zed's older form
        raw["command"] = {"path": ironcurtain_exe(), "args": run, "env": kept_env}
        return raw
    raw["command"] = ironcurtain_exe()
    raw["args"] = run
    if kept_env:
        raw["env"] = kept_env
    else:
        raw.pop("env", None)
    return raw


def plan_wrap(found: Found, servers: Sequence[str]) -> tuple[list[Change], Change]:
    """What wrapping changes: each client file, and ironcurtain's user config."""
    refuse(found, "nothing written")
    files = found.files
    config_path = user_config()
    try:
        own = read_user(config_path.parent, config_path.name, None)
    except Refused as exc:
        raise UsageError(str(exc)) from None
    config_text = own.text if own is not None else '{\n  "mcpServers": {}\n}\n'
    config = Change(config_path, own.text if own is not None else "", config_text)
    try:
        existing = parse(config_text).value.get("mcpServers") or {}
    except (JsoncError, AttributeError):
        raise UsageError(f"{config_path}: not a JSON object with mcpServers") from None
    named = {e.name for f in files for e in f.entries}
    missing = [s for s in servers if s not in named]
    if missing:
        raise UsageError(
            f"--server {missing[0]}: no such server in the clients chosen "
            f"(they have: {', '.join(sorted(named)) or 'none'})"
        )
    changes: dict[Path, Change] = {}
    for f in files:
        change = changes.get(f.path)  # one file may hold several projects' servers
        if change is None:
            change = Change(f.path, f.source.text, f.source.text, source=f.source)
        for e in f.entries:
            if servers and e.name not in servers:
                continue
            if e.calls_ironcurtain:
                reason = not_protected(f, e)
                if reason is not None:
                    change.notes.append(
                        f"{e.name}: NOT protected: it starts {e.command} but is not what wrap "
                        f"writes ({reason}); left alone: unwrap it, or give the entry its own "
                        "server back, and wrap again"
                    )
                continue
            if not e.command:
                what = "a remote server" if e.url else "an entry without a command"
                change.notes.append(f"{e.name}: {what}, not sandboxable: left alone")
                continue
            problem = launch_problem(e)
            if problem is not None:
                change.notes.append(problem)
                continue
            definition, kept, notes = moved_definition(f, e)
            if e.name in existing:
                if _same(existing[e.name], definition):
                    pass
                else:
                    raise UsageError(
                        f"{config_path}: a server named {e.name!r} is already defined there, "
                        f"differently from the one in {f.path}; rename one of them"
                    )
            else:
                config.after = parse(config.after).insert(("mcpServers",), e.name, definition)
                existing[e.name] = definition
            entry = client_entry(f, e, kept)
            if f.client.syntax == "toml":
                change.after = toml_replace(change.after, f.client.key, e.name, entry)
            else:
                change.after = parse(change.after).replace((*f.key_path, e.name), entry)
            change.notes += notes
            change.servers.append(e.name)
        if change.servers or change.notes:
            changes[f.path] = change
    for change in changes.values():
        if change.after != change.before and change.source and change.source.unwritable:
            raise UsageError(f"{change.source.unwritable}; nothing written")
    return list(changes.values()), config


def toml_replace(text: str, key: str, name: str, entry: dict[str, Any]) -> str:
    """``text`` (TOML) with the ``command``, ``args`` and ``env`` of table ``key.name`` set
    from ``entry`` (an ``env`` left empty is removed); every other byte (comments, the
    table's other keys, the rest of the file) as it was."""
    import tomlkit  # only wrap needs it

    doc = tomlkit.parse(text)
    table = doc[key][name]
    table["command"] = entry["command"]
    table["args"] = entry["args"]
    if entry.get("env"):
        table["env"] = entry["env"]
    elif "env" in table:
        del table["env"]
    return tomlkit.dumps(doc)


def _same(a: Any, b: dict[str, Any]) -> bool:
    strip = ("description",)
    if not isinstance(a, dict):
        return False
    return {k: v for k, v in a.items() if k not in strip} == {
        k: v for k, v in b.items() if k not in strip
    }


def diff(change: Change) -> str:
    """The unified diff of a change, what the files hold shown as escapes where it could act
    on a terminal (lines stay lines)."""
    return visible(
        "".join(
            difflib.unified_diff(
                change.before.splitlines(keepends=True),
                change.after.splitlines(keepends=True),
                f"{shown(str(change.path))} (now)",
                f"{shown(str(change.path))} (wrapped)",
            )
        )
    )
