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
import re
import shutil
import sys
from collections.abc import Iterable, Sequence
from dataclasses import field
from pathlib import Path
from typing import Any

from launcher import dirs
from launcher.clients import BY_NAME, CLIENTS, ClientFile, Entry, found
from launcher.errors import UsageError
from launcher.jsonc import JsoncError, parse
from sandbox_profiles.discover import PackageNotInstalled, npx_roots, resolve_npx
from sandbox_profiles.records import mutable

# A client's own variable for the project directory, which it expands in an entry's args:
# the moved definition says ${workspace} instead, and the client's entry passes the
# directory to ironcurtain as --workspace.
PROJECT_VARIABLES = {"vscode": "${workspaceFolder}", "cursor": "${workspaceFolder}"}
# Words of an environment variable's name (split at _ and -) that mark a secret.
SECRET_WORDS = frozenset(
    {
        "KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASS", "PWD",
        "CREDENTIAL", "CREDENTIALS", "AUTH", "COOKIE", "SESSION", "PAT", "PRIVATE",
    }
)  # fmt: skip


def secret_name(name: str) -> bool:
    """
    >>> [secret_name(n) for n in ("OPENAI_API_KEY", "DB_PASSWORD", "GIT_AUTHOR_NAME", "TZ")]
    [True, True, False, False]
    """
    return any(word in SECRET_WORDS for word in re.split(r"[_\-]", name.upper()))


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


def user_config() -> Path:
    return dirs.config_dir() / "mcp-servers.json"


def user_policy() -> Path:
    return dirs.config_dir() / "policy"


def select(
    home: Path, project: Path | None, clients: Sequence[str], everything: bool
) -> list[ClientFile]:
    unknown = [c for c in clients if c not in BY_NAME]
    if unknown:
        raise UsageError(
            f"--client {unknown[0]}: no such client (known: {', '.join(c.name for c in CLIENTS)})"
        )
    if not clients and not everything:
        raise UsageError(
            "name the clients: --client NAME (repeatable; see `ironcurtain clients`) or --all"
        )
    return [f for f in found(home, project) if everything or f.client.name in clients]


def describe(files: Iterable[ClientFile]) -> str:
    """The clients' servers, one line each, for ``ironcurtain clients``."""
    lines: list[str] = []
    for f in files:
        scope = f"local: {f.project}" if f.scope == "local" else f.scope
        lines.append(f"{f.client.label} ({scope}): {f.path}")
        if not f.entries:
            lines.append("  (no servers)")
        width = max((len(e.name) for e in f.entries), default=0)
        for e in f.entries:
            if e.wrapped:
                how = "runs through ironcurtain"
            elif e.command:
                how = "stdio: " + " ".join([e.command, *e.args])
            elif e.url:
                how = f"remote: {e.url} (not sandboxable: left alone)"
            else:
                how = "no command: left alone"
            lines.append(f"  {e.name:<{width}}  {how}")
    return "\n".join(lines) or "no MCP client configuration found"


def ironcurtain_exe() -> str:
    exe = shutil.which("ironcurtain")
    return exe or os.path.join(os.path.dirname(sys.executable), "ironcurtain")


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
            if resolved.is_dir():
                full = str(resolved.resolve())
                writable.append(full)
                value = f"{option}={full}" if inline else full
            elif resolved.is_file():  # a script the command runs, with what lies beside it
                full = str(resolved.resolve())
                readable.append(str(Path(full).parent))
                value = f"{option}={full}" if inline else full
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
    run = ["run", "--config", str(user_config()), "--policy-dir", str(user_policy()),
           "--server", e.name]  # fmt: skip
    variable = PROJECT_VARIABLES.get(f.client.name)
    if variable and any(variable in a for a in e.args):
        run[1:1] = ["--workspace", variable]
    elif f.client.cwd == "project" and f.project is not None:
        # A project's own file: the client starts the server in the project, which is
        # where the agent works; the workspace is that directory.
        run[1:1] = ["--workspace", str(f.project)]
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


def plan_wrap(files: Sequence[ClientFile], servers: Sequence[str]) -> tuple[list[Change], Change]:
    """What wrapping changes: each client file, and ironcurtain's user config."""
    config_path = user_config()
    config_text = (
        config_path.read_text(encoding="utf-8")
        if config_path.exists()
        else '{\n  "mcpServers": {}\n}\n'
    )
    config = Change(config_path, config_text if config_path.exists() else "", config_text)
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
            text = f.path.read_text(encoding="utf-8")
            change = Change(f.path, text, text)
        for e in f.entries:
            if servers and e.name not in servers:
                continue
            if e.wrapped:
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
    return "".join(
        difflib.unified_diff(
            change.before.splitlines(keepends=True),
            change.after.splitlines(keepends=True),
            f"{change.path} (now)",
            f"{change.path} (wrapped)",
        )
    )
