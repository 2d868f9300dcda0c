"""The MCP clients configured on this machine (:mod:`launcher.clients.catalogue.table` says
where each keeps its servers): each file found read once, as what it is, and what each entry
starts.

Each file is read once, as what it is (:mod:`launcher.clients.files.file_io` says how): the home
directory, or one holding it, is never a project, and a project's file that is one of the
user's is the user's. An entry counts as running through ironcurtain only when it is
exactly what ``wrap`` writes (:func:`not_protected` says why another is not).
"""

from __future__ import annotations

import fnmatch
import os
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import field, replace
from pathlib import Path
from typing import Any

from launcher.clients.catalogue.entry_shape import odd_key, shape_problem, started
from launcher.clients.catalogue.table import (
    BY_NAME,
    CLIENTS,
    PROJECT_VARIABLES,
    Client,
    listed_in,
    syntax_of,
)
from launcher.clients.catalogue.text_reads import (
    PROJECT_YAML_MAX,
    fills_text,
    loaded_above,
    read_otherwise,
)
from launcher.clients.catalogue.var_syntax import LeftAlone, translate, unread
from launcher.clients.files.file_io import Refused, Source, list_project, read_project, read_user
from launcher.clients.files.formats import load, servers_at
from launcher.clients.files.path_identity import holds_home, identity
from launcher.shared import dirs
from launcher.shared.shown import visible
from launcher.shared.user_errors import UsageError
from sandbox_profiles.records import mutable

__all__ = ["BY_NAME", "CLIENTS", "PROJECT_VARIABLES", "Client"]


# Words of an environment variable's name (split at _ and -) that mark a secret.
SECRET_WORDS = frozenset(
    {
        "KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASS", "PWD",
        "CREDENTIAL", "CREDENTIALS", "AUTH", "COOKIE", "SESSION", "PAT", "PRIVATE",
    }
)  # fmt: skip
# Variables that change what the ironcurtain process itself loads or reads.
LOADER_PREFIXES = ("LD_", "DYLD_", "PYTHON", "IRONCURTAIN_")


def secret_name(name: str) -> bool:
    """
    >>> [secret_name(n) for n in ("OPENAI_API_KEY", "DB_PASSWORD", "GIT_AUTHOR_NAME", "TZ")]
    [True, True, False, False]
    """
    return any(word in SECRET_WORDS for word in re.split(r"[_\-]", name.upper()))


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
    def calls_ironcurtain(self) -> bool:
        """Whether it starts a program named ironcurtain (which may or may not be this
        one, as wrap writes it: see :func:`not_protected`)."""
        return Path(self.command or "").name == "ironcurtain"


@mutable
class ClientFile:
    """The servers of one client in one file: a whole file's, or (Claude Code's
    ``~/.claude.json``) those one project keeps in it."""

    client: Client
    source: Source
    scope: str  # user, project, or local (one project's, in a user file)
    # The project the servers start in, which becomes their workspace (a project or local
    # scope; None for a local scope whose root is, or holds, the home directory).
    project: Path | None
    entries: list[Entry]
    # Where the servers are in the file (keys from the top); empty: the client's key.
    at: tuple[str, ...] = ()
    # Other clients that read this very file (a project's .mcp.json: Claude Code's and
    # Copilot CLI's): an entry is wrapped, or counted as protected, only as all read it.
    readers: list[Client] = field(default_factory=list)
    # Why the client fills values into the file's text before it reads it (empty: it does
    # not): an entry holding such a value is left alone.
    filled: str = ""

    @property
    def label(self) -> str:
        return ", ".join(c.label for c in (self.client, *self.readers))

    def as_read_by(self) -> list[ClientFile]:
        """The file as each client that reads it takes it."""
        return [self, *(replace(self, client=c, readers=[]) for c in self.readers)]

    @property
    def path(self) -> Path:
        return self.source.path

    @property
    def key_path(self) -> tuple[str, ...]:
        return self.at or (self.client.key,)

    @property
    def syntax(self) -> str:
        return syntax_of(self.client, self.path.name)

    @property
    def listed(self) -> bool:
        return listed_in(self.client, self.syntax)


@mutable
class Found:
    """The client files found: those read, and those there but not read (and why)."""

    files: list[ClientFile] = field(default_factory=list)
    refused: list[tuple[Client, str]] = field(default_factory=list)
    # Files there in a form wrap cannot edit safely, and why (listed, never written).
    unsupported: list[tuple[Client, str]] = field(default_factory=list)

    def of(self, names: Sequence[str] | None) -> Found:
        """Only the clients named (None: all)."""

        def keep(client: Client) -> bool:
            return names is None or client.name in names

        return Found([f for f in self.files if any(map(keep, [f.client, *f.readers]))],
                     [(c, why) for c, why in self.refused if keep(c)],
                     [(c, why) for c, why in self.unsupported if keep(c)])  # fmt: skip


def entry_of(client: Client, name: str, raw: Any) -> Entry:
    """What an entry starts, whatever the client's shape of it."""
    if not isinstance(raw, dict):
        return Entry(name, {})
    entry = Entry(name, raw)
    command, args, env = started(client.shape, raw)
    entry.command = _text(command)
    entry.args = _texts(args)
    entry.env = _mapping(env)
    entry.cwd = _text(raw.get("cwd"))
    url = next((raw[k] for k in ("url", "httpUrl", "serverUrl", "uri") if raw.get(k)), None)
    entry.url = _text(url)
    return entry


def read(client: Client, source: Source, scope: str, project: Path | None) -> ClientFile:
    """A client's file, its servers listed; UsageError names the file and the place of a
    mistake (and, for a file its client reads otherwise, the servers ironcurtain sees in it)."""
    f = ClientFile(client, source, scope, project, [])
    unread = read_otherwise(client, source, scope, f.syntax)
    if unread is not None:
        raise UsageError(f"{source.path}: {unread}{_named_in(f)}")
    f.filled = fills_text(client, source.text)
    data = load(f.syntax, source.text, source.path)
    servers = servers_at(data, f.key_path, f.listed, source.path)
    f.entries = [entry_of(client, name, raw) for name, raw in servers.items()]
    return f


def _named_in(f: ClientFile) -> str:
    """The servers of a file not read, as ironcurtain would read them (said, never used)."""
    if f.syntax == "yaml" and len(f.source.text) > PROJECT_YAML_MAX:
        return ""
    try:
        servers = servers_at(load(f.syntax, f.source.text, f.path), f.key_path, f.listed, f.path)
    except UsageError:
        return ""
    names = ", ".join(visible(str(n), one_line=True) for n in servers) or "none"
    return f" (its servers, as ironcurtain reads the file: {names}; none wrapped)"


def local_servers(client: Client, source: Source, home: Path) -> Iterator[ClientFile]:
    """Claude Code's servers of one project kept in the user file (``claude mcp add``'s
    default "local" scope): ``projects.<project root>.mcpServers`` of ``~/.claude.json``."""
    try:
        data = load("json", source.text, source.path)
    except UsageError:
        return  # read() has said what is wrong with it
    projects = data.get("projects") if isinstance(data, dict) else None
    for root, settings in (projects or {}).items() if isinstance(projects, dict) else ():
        servers = settings.get("mcpServers") if isinstance(settings, dict) else None
        if not isinstance(servers, dict) or not servers or not os.path.isabs(root):
            continue
        entries = [entry_of(client, name, raw) for name, raw in servers.items()]
        at = ("projects", root, "mcpServers")
        # Servers kept for the home as a project are the user's, and get no workspace.
        project = None if holds_home(Path(root), home) else Path(root)
        yield ClientFile(client, source, "local", project, entries, at)


def project_root(home: Path, given: str | None, cwd: str) -> tuple[Path | None, str | None]:
    """The project whose files to read (None: none), and what to tell the user. The home
    directory, or one holding it, is never a project (by identity: the home bound at
    another path is the home): its client files are the user's."""
    project = Path(given or cwd).resolve()
    if not holds_home(project, home):
        return project, None
    what = "is" if identity(project) == identity(home) else "holds"
    if given is not None:
        raise UsageError(
            f"it {what} your home directory; the home is never taken as a project (name the "
            "project's own directory)",
            "project",
            given,
        )
    return None, (
        f"{project}: it {what} your home directory, which is never taken as a project; only "
        "your user files are read (run in a project, or name one with --project)"
    )


def _expand(relative: str, names: Iterator[str] | list[str]) -> list[str]:
    """``relative`` itself, or (its last part a pattern) the names in its directory that
    match it, in order."""
    directory, _, pattern = relative.rpartition("/")
    if "*" not in pattern:
        return [relative]
    return [f"{directory}/{n}" for n in sorted(names) if fnmatch.fnmatchcase(n, pattern)]


def _user_files(home: Path, relative: str) -> list[str]:
    if "*" not in relative:
        return [relative]
    try:
        return _expand(relative, os.listdir(home / os.path.dirname(relative)))
    except OSError:
        return []


# A directory of one-file-per-server blocks holds a few: a project's with more is planted.
MAX_BLOCKS = 100


def _project_files(project: Path, relative: str) -> list[str]:
    if "*" not in relative:
        return [relative]
    paths = _expand(relative, list_project(project, os.path.dirname(relative)))
    if len(paths) > MAX_BLOCKS:
        raise Refused(
            f"{project / relative}: {len(paths)} files (at most {MAX_BLOCKS} are read): not read"
        )
    return paths


def found(home: Path, project: Path | None) -> Found:
    """Every client file that exists, user files first, each read once: a project's file
    that is one of the user's files is the user's; one two clients read is read once, with
    both named. A file that cannot be read is said, and stops nothing else."""
    out = Found()
    seen: dict[tuple[int, int], ClientFile | None] = {}
    for client in CLIENTS:
        for pattern in client.user:
            for relative in _user_files(home, pattern):
                try:
                    source = read_user(home, relative, project)
                except Refused as exc:
                    out.refused.append((client, str(exc)))
                    continue
                if source is None or (source.device, source.inode) in seen:
                    continue
                seen[(source.device, source.inode)] = None
                if _add(out, client, source, "user", None) and client.name == "claude-code":
                    out.files.extend(local_servers(client, source, home))
        for relative, why in client.unsupported:
            if os.path.lexists(home / relative):
                out.unsupported.append((client, f"{home / relative}: {why}"))
    if project is not None:
        for client in CLIENTS:
            _project_of(out, client, project, seen)
        out.refused.extend(loaded_above(home, project))
    return out


def _add(out: Found, client: Client, source: Source, scope: str, project: Path | None) -> bool:
    """Read one file into ``out`` (or say why not); whether it was read."""
    try:
        out.files.append(read(client, source, scope, project))
    except UsageError as exc:
        out.refused.append((client, str(exc)))
        return False
    return True


def _project_of(
    out: Found, client: Client, project: Path, seen: dict[tuple[int, int], ClientFile | None]
) -> None:
    """One client's files of the project, into ``out``."""
    for pattern in client.project:
        try:
            paths = _project_files(project, pattern)
        except Refused as exc:
            out.refused.append((client, str(exc)))
            continue
        for relative in paths:
            try:
                source = read_project(project, relative)
            except Refused as exc:
                out.refused.append((client, str(exc)))
                continue
            if source is None:
                continue
            mark = (source.device, source.inode)
            if mark in seen:
                shared = seen[mark]
                if shared is not None and shared.scope == "project" and shared.client != client:
                    shared.readers.append(client)  # the same file, read by one more client
                continue
            seen[mark] = None
            if _add(out, client, source, "project", project):
                seen[mark] = out.files[-1]


def home() -> Path:
    return Path(os.path.expanduser("~"))


def user_config() -> Path:
    return dirs.config_dir() / "mcp-servers.json"


def user_policy() -> Path:
    return dirs.config_dir() / "policy"


def ironcurtain_exe() -> str:
    """This ironcurtain: the absolute path of the entry point installed beside the running
    interpreter. Never looked up on PATH, where a relative entry (``bin``, ``.``) would find
    a project's own ``ironcurtain``, or an older copy could come first."""
    return os.path.abspath(os.path.join(os.path.dirname(sys.executable), "ironcurtain"))


def workspace_of(f: ClientFile, e: Entry) -> str | None:
    """The ``--workspace`` wrap gives the entry: none for a user-level entry (one entry
    serves every project; "where the client was started" could be the home); for a
    project's, the project (or the client's own variable for it, which it expands)."""
    if f.scope == "user" or f.project is None or f.client.cwd != "project":
        return None
    variable = PROJECT_VARIABLES.get(f.client.name)
    if variable and any(variable in a for a in e.args):
        return variable
    return str(f.project)


def run_args(name: str, workspace: str | None) -> list[str]:
    """The arguments of an entry wrap writes."""
    run = ["run", "--config", str(user_config()), "--policy-dir", str(user_policy()),
           "--server", name]  # fmt: skip
    if workspace is not None:
        run[1:1] = ["--workspace", workspace]
    return run


def per_client(name: str, client: str) -> str:
    """The name wrap gives a client's entry's definition when ``name`` is defined otherwise."""
    return f"{name}.{client}"


def server_of(e: Entry) -> str:
    """The server of ironcurtain's config an entry wrap wrote starts: the one after
    ``--server`` (the entry's own name, or its client's definition of it)."""
    if "--server" in e.args[:-1]:
        return e.args[e.args.index("--server") + 1]
    return e.name


def _servers_allowed(e: Entry, owner: str) -> list[str]:
    """The servers an entry wrap wrote may start: its own name's, or its client's
    (``owner``: the first client that reads its file) definition of that name
    (NAME.CLIENT, NAME.CLIENT.N)."""
    own = per_client(e.name, owner)
    server = server_of(e)
    tail = server[len(own) + 1 :] if server.startswith(own + ".") else ""
    if server == own or (tail.isdigit() and tail.isascii() and not tail.startswith("0")):
        return [e.name, server]
    return [e.name]


def not_protected(f: ClientFile, e: Entry) -> str | None:
    """Why an entry that starts a program named ironcurtain is not exactly what wrap writes,
    as any client that reads its file takes it (None: it is, for each)."""
    for each in f.as_read_by():
        why = _not_protected(each, e, f.client.name)
        if why is not None:
            return why if each is f else f"as {each.client.label} reads it: {why}"
    return None


def _not_protected(f: ClientFile, e: Entry, owner: str) -> str | None:
    """Why an entry that starts a program named ironcurtain is not exactly what wrap writes
    (this ironcurtain, its user config and policy, this server, nothing that weakens the
    sandbox, no key beside them that could change what the client starts, every value as
    written): None when it is."""
    odd = odd_key(e.raw, f.client.shape) or shape_problem(e.raw, f.client.shape)
    if odd is not None:
        return odd
    exe = ironcurtain_exe()
    if e.command != exe:
        return f"starts {e.command}, not this ironcurtain ({exe})"
    weakening = [a for a in e.args if a.startswith(("--allow", "--accept", "--http"))]
    if weakening:
        return f"{' '.join(weakening)} weakens its sandbox"
    variable = PROJECT_VARIABLES.get(f.client.name)
    allowed = {workspace_of(f, e)}
    if allowed != {None} and variable:
        allowed |= {variable, str(f.project)}
    if e.args not in [run_args(n, w) for n in _servers_allowed(e, owner) for w in allowed]:
        if "--workspace" in e.args[:-1]:
            given = e.args[e.args.index("--workspace") + 1]
            if given not in allowed:
                wants = "none" if allowed == {None} else " or ".join(sorted(map(str, allowed)))
                return f"--workspace {given}: wrap gives this entry {wants}"
        return f"its arguments are not what wrap writes ({' '.join(run_args(e.name, None))})"
    names = sorted(k for k in e.env if not secret_name(k) or k.upper().startswith(LOADER_PREFIXES))
    if names:
        return f"its environment sets {', '.join(names)} (wrap keeps only secrets there)"
    # What the client itself makes of it before it starts ironcurtain: every argument as
    # written, and no value it fills by running a command.
    for value in (e.command or "", *e.args):
        if value == variable:  # the client's own name for the project, which wrap gives
            continue
        problem = unread(f.client, value)
        if problem is not None:
            return problem
    for value in e.env.values():
        try:
            translate(f.client, value, env=True)
        except LeftAlone as exc:
            return str(exc)
    return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _texts(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _mapping(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v) for k, v in value.items()}
