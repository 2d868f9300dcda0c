"""``ironcurtain clients``, ``wrap`` and ``unwrap``: the servers a user already has, in the
clients they use, run through ironcurtain under the same names.

``wrap`` moves each selected stdio entry's definition into ironcurtain's user config and
points the client's entry at ``ironcurtain run --config USER_CONFIG --policy-dir
USER_POLICY --server NAME`` (one server: its tool names stay as the client knows them).
Only the entry's value changes in the client's file; comments and layout stay. The moved
definition is made by :mod:`launcher.clients.wrap.definition` (which paths become mounts, which
variables it may refer to); an entry with a key that could change what the client starts,
or a name ironcurtain's config refuses, is left alone and said so, and the new config is
checked with the loader ``run`` uses before anything is written. Every file changed is
backed up first and written atomically; what was written is recorded, so ``unwrap`` can
put it back (:mod:`launcher.clients.wrap.apply`).
"""

from __future__ import annotations

import difflib
import json
import re
import tempfile
from collections.abc import Sequence
from dataclasses import field
from pathlib import Path
from typing import Any

from launcher.clients.catalogue.entry_shape import odd_key, shape_problem, wrapped
from launcher.clients.catalogue.known import (
    BY_NAME,
    CLIENTS,
    ClientFile,
    Entry,
    Found,
    found,
    ironcurtain_exe,
    not_protected,
    per_client,
    run_args,
    server_of,
    user_config,
    workspace_of,
)
from launcher.clients.files.file_io import Refused, Source, read_user
from launcher.clients.files.formats import NotEditable, plain, replace
from launcher.clients.files.jsonc import JsoncError, parse, unwritable
from launcher.clients.wrap.definition import LeftAlone, moved_definition, references_environment
from launcher.clients.wrap.remote_entries import (
    borrowed,
    login_note,
    may_share,
    remote_definition,
    remote_entry,
    remote_problem,
    shown_url,
)
from launcher.clients.wrap.runnable import unrunnable
from launcher.clients.wrap.tracked import tracked
from launcher.shared.shown import visible
from launcher.shared.user_errors import UsageError
from sandbox_profiles.discover import PackageNotInstalled
from sandbox_profiles.records import mutable


@mutable
class Change:
    path: Path
    before: str
    after: str
    notes: list[str] = field(default_factory=list)
    servers: list[str] = field(default_factory=list)
    # Each entry wrapped: where (``at``, ``name``), and its value before and after.
    entries: list[dict[str, Any]] = field(default_factory=list)
    # Servers not to annotate now, and what to say (a project's server that takes variables
    # from the environment would take them from the user's shell).
    held: dict[str, str] = field(default_factory=dict)
    # Each wrapped server's moved definition, and the values its client's entry holds as
    # text (what the client passes it): what its annotation run is started with.
    definitions: dict[str, dict[str, Any]] = field(default_factory=dict)
    given: dict[str, dict[str, str]] = field(default_factory=dict)
    source: Source | None = None  # the file as it was read (None: ironcurtain's own config)
    # Files read that wrap may not write, and why (on ironcurtain's config's change).
    refused: list[str] = field(default_factory=list)


def select(home: Path, project: Path | None, clients: Sequence[str], everything: bool) -> Found:
    unknown = [c for c in clients if c not in BY_NAME]
    if unknown:
        known = ", ".join(c.name for c in CLIENTS)
        raise UsageError(f"no such client (known: {known})", "clients", unknown[0])
    if not clients and not everything:
        raise UsageError(
            "name the clients: {clients} NAME (repeatable; see `ironcurtain clients`) or "
            "{everything}",
            mentions=("clients", "everything"),
        )
    return found(home, project).of(None if everything else clients)


def describe(files: Found) -> tuple[str, int, int]:
    """The clients' servers, one line each, for ``ironcurtain clients`` (what the files
    name shown as escapes where it could act on a terminal), closed by how many are not
    protected; and that count and the number of servers."""
    from launcher.clients.wrap.annotation_runs import annotated_servers

    lines: list[str] = []
    total = unprotected = bare = 0
    annotated = annotated_servers()
    for f in files.files:
        scope = f"local: {f.at[1]}" if f.scope == "local" else f.scope
        lines.append(shown(f"{f.label} ({scope}): {f.path}"))
        if f.filled:
            lines.append(shown(f"  ({f.filled})"))
        if not f.entries:
            lines.append("  (no servers)")
        names = {e.name: shown(e.name) for e in f.entries}
        width = max((len(n) for n in names.values()), default=0)
        for e in f.entries:
            protected, how = status(f, e, annotated)
            total += 1
            unprotected += not protected
            bare += protected and annotated is not None and server_of(e) not in annotated
            lines.append(f"  {names[e.name]:<{width}}  {shown(how)}")
    for client, why in [*files.refused, *files.unsupported]:
        lines.append(shown(f"{client.label}: {why}"))
    if not lines:
        return "no MCP client configuration found", 0, 0
    if files.refused:  # their servers are not known to be protected
        lines.append(f"{len(files.refused)} client files not read: their servers are not counted")
    if files.unsupported:
        lines.append(
            f"{len(files.unsupported)} client files in a form wrap cannot edit: their servers "
            "are not counted"
        )
    filled = sum(1 for f in files.files if f.filled)
    if filled:
        lines.append(
            f"{filled} client file(s) their client fills values into before it reads them: "
            "what else it reads there is not known, so they count as not protected"
        )
    if bare:
        lines.append(
            f"{bare} wrapped server{' has' if bare == 1 else 's have'} tools not annotated: "
            "every call to them is refused until they are"
        )
    if unprotected:
        lines.append(f"{unprotected} of {total} servers are NOT protected by ironcurtain")
    elif total:
        lines.append(f"all {total} servers run through ironcurtain")
    unread = len(files.refused) + len(files.unsupported) + filled
    return "\n".join(lines), unprotected + unread, total


def status(f: ClientFile, e: Entry, annotated: set[str] | None = None) -> tuple[bool, str]:
    """Whether an entry runs through ironcurtain, and what it starts, said for a person
    (``annotated``: the servers the user policy has annotations of, None: unknown)."""
    from launcher.clients.wrap.annotation_runs import later_command

    reason = not_protected(f, e) if e.calls_ironcurtain else None
    if e.calls_ironcurtain and reason is None:
        reason = borrowed(f, server_of(e), user_servers())
    if e.calls_ironcurtain and reason is None:
        if annotated is None or server_of(e) in annotated:
            return True, "runs through ironcurtain"
        return True, (
            "runs through ironcurtain; wrapped, tools not annotated (every call refused): "
            f"run `{later_command(server_of(e))}`"
        )
    if reason is not None:
        return False, f"NOT protected: {' '.join([e.command or '', *e.args])} ({reason})"
    if e.command:
        how = "stdio: " + " ".join([e.command, *e.args])
        if filled_in(f, e) or unrunnable(f, e):
            why = filled_in(f, e) or f"{unrunnable(f, e)}: it could never start in a sandbox"
            return False, f"{how} (not protected: {why}; left alone)"
        return False, f"{how} (not protected: `ironcurtain wrap` puts it behind ironcurtain)"
    if e.url:
        why = filled_in(f, e) or remote_problem(f, e) or ""
        if why:
            return False, f"remote: {shown_url(e.url)} (not protected: {why}; left alone)"
        return False, (
            f"remote: {shown_url(e.url)} (not protected: `ironcurtain wrap` puts it behind "
            "ironcurtain)"
        )
    kind = e.raw.get("type")
    if isinstance(kind, str) and kind:
        return False, f"type {kind}, run by the client itself (not protected: left alone)"
    return False, "no command (not protected: left alone)"


def user_servers() -> dict[str, Any]:
    """The servers ironcurtain's user config defines (none when it cannot be read)."""
    path = user_config()
    try:
        own = read_user(path.parent, path.name, None)
        servers = parse(own.text).value.get("mcpServers") if own is not None else None
    except (Refused, JsoncError, AttributeError):
        return {}
    return servers if isinstance(servers, dict) else {}


def filled_in(f: ClientFile, e: Entry) -> str:
    """Why the entry holds a value its client fills into the file's text (empty: none)."""
    if f.filled and "${{" in json.dumps(e.raw, ensure_ascii=False):
        return (
            f"{f.client.label} fills its ${{{{ ... }}}} from its secrets or .env files into the "
            "file's text before it reads it, which ironcurtain's config cannot say"
        )
    return ""


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
    from launcher.plan.programs import npx_program, search_path
    from sandbox_profiles.discover import which

    # Where npx looks for the package, found without running anything: the entry may be a
    # project's, and a version manager's shim would be asked (run on this host) which
    # program it stands for.
    npx = which(e.command or "npx", search_path()) or "/usr/bin/npx"
    try:
        found = npx_program(npx, list(e.args))
    except PackageNotInstalled as exc:
        return f"{e.name}: {exc}; wrap again after that: left alone"
    if found is None:
        return (
            f"{e.name}: only `npx [-y] PACKAGE [ARGS]` can be sandboxed; give the installed "
            "program as the command: left alone"
        )
    return None


# Clients that split a command given as one string into words, as a shell would.
SPLITS_COMMAND = frozenset({"mistral-vibe"})


def client_entry(
    f: ClientFile, e: Entry, kept_env: dict[str, str], server: str | None = None
) -> dict[str, Any]:
    """The client's new entry: the same entry (its inert keys kept), starting ironcurtain
    for this one server (``server``: its definition's name, if not the entry's); its working
    directory moved with the definition."""
    run = run_args(server or e.name, workspace_of(f, e))
    return wrapped(f.client.shape, plain(e.raw), ironcurtain_exe(), run, kept_env)


def config_problem(text: str) -> str | None:
    """Why ``ironcurtain run`` would refuse ironcurtain's user config holding ``text``
    (None: it would load it): checked with the loader ``run`` uses, every variable the
    text refers to taken as set (the client sets them when it starts an entry)."""
    from launcher.plan.config import load_config
    from launcher.shared.user_errors import ConfigError
    from policy.variables import PLACEHOLDER

    names = {body.partition(":-")[0] for body in PLACEHOLDER.findall(text)}
    with tempfile.TemporaryDirectory(prefix="ironcurtain-wrap-") as scratch:
        path = Path(scratch) / "mcp-servers.json"
        path.write_text(text, encoding="utf-8")
        try:
            load_config(path, "wrap", scratch, env=dict.fromkeys(names, "set"))
        except ConfigError as exc:
            return str(exc).replace(str(path), str(user_config()))
    return None


def plan_wrap(found: Found, servers: Sequence[str]) -> tuple[list[Change], Change]:
    """What wrapping changes: each client file, and ironcurtain's user config."""
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
    if own is not None and (problem := config_problem(config_text)):
        raise UsageError(f"{problem}; ironcurtain run refuses it as it is: nothing written")
    named = {e.name for f in files for e in f.entries}
    missing = [s for s in servers if s not in named]
    if missing:
        have = ", ".join(sorted(named)) or "none"
        raise UsageError(
            f"no such server in the clients chosen (they have: {have})", "servers", missing[0]
        )
    # A file that cannot be read or edited is said, and stops nothing else.
    config.notes += [f"{c.label}: {why}: not wrapped" for c, why in found.unsupported]
    config.notes += [f"{c.label}: {why} (not wrapped)" for c, why in found.refused]
    changes: dict[Path, Change] = {}
    for f in files:
        chosen = [e for e in f.entries if not servers or e.name in servers]
        if f.source.unwritable and chosen:  # said, and it stops nothing else
            names = ", ".join(shown(e.name) for e in chosen)
            config.notes.append(f"{f.label}: {f.source.unwritable} (not wrapped: {names})")
            config.refused.append(f.source.unwritable)
            continue
        change = changes.get(f.path)  # one file may hold several projects' servers
        if change is None:
            change = Change(f.path, f.source.text, f.source.text, source=f.source)
        for e in chosen:
            _plan_entry(f, e, change, config, existing)
        if change.servers or change.notes:
            changes[f.path] = change
    for change in changes.values():
        if change.after != change.before and change.source and change.source.unwritable:
            raise UsageError(f"{change.source.unwritable}; nothing written")
        if change.after != change.before and tracked(change.path):
            change.notes.append(
                f"{change.path} is tracked by git: the rewrite puts this machine's paths in "
                "it (a commit would share them; `ironcurtain unwrap` puts it back)"
            )
    if config.after != config.before and (problem := config_problem(config.after)):
        raise UsageError(f"{problem}; nothing written")  # fail closed: never a config run refuses
    return list(changes.values()), config


def _plan_entry(
    f: ClientFile, e: Entry, change: Change, config: Change, existing: dict[str, Any]
) -> None:
    """Wrap one entry into ``change`` and ``config``, or say why it is left alone."""
    if _wrapped_already(f, e, change, existing):
        return
    alone = left_alone(f, e)
    if alone is not None:
        change.notes.append(alone)
        return
    remote = not e.command and e.url is not None
    try:
        definition, kept, notes = (remote_definition if remote else _stdio_definition)(f, e)
    except LeftAlone as exc:
        change.notes.append(f"{e.name}: {exc}: left alone")
        return
    server = config_name(e.name, f.client.name, definition, existing)
    entry = remote_entry(f, e, server) if remote else client_entry(f, e, kept, server)
    notes += login_note(f, e, server, definition) if remote else []
    # What wrap writes must be JSON again (and UTF-8), or it stops with nothing written.
    problem = unwritable({server: definition}) or unwritable(entry)
    if problem is not None:
        change.notes.append(
            f"{e.name}: its entry holds {problem}, which wrap cannot write back: left alone"
        )
        return
    try:
        edited = replace(f.syntax, f.listed, change.after, f.key_path, e.name, entry)
    except NotEditable as exc:
        change.notes.append(f"{e.name}: {exc}, which wrap does not rewrite: left alone")
        return
    if server not in existing:
        after = parse(config.after).insert(("mcpServers",), server, definition)
        problem = config_problem(after)
        if problem is not None:
            change.notes.append(
                f"{e.name}: ironcurtain run would refuse it ({problem}): left alone"
            )
            return
        config.after = after
        existing[server] = definition
    if server != e.name:
        notes.append(
            f"{e.name}: another entry of that name is defined differently in {config.path}; "
            f"this one ({f.client.label}'s) is defined there as {server}"
        )
    change.after = edited
    change.notes += notes
    change.servers.append(e.name)
    change.definitions[server] = definition
    change.given[server] = _as_text(f, kept)
    was, now = plain(e.raw), entry
    change.entries.append({"at": list(f.key_path), "name": e.name, "before": was, "after": now})
    variables = references_environment(f, definition)
    if variables:
        change.held[server] = (
            f"{server}: not annotated now: started here it would receive "
            f"{', '.join(variables)} from your shell, not what its client gives it"
        )


def _wrapped_already(f: ClientFile, e: Entry, change: Change, existing: dict[str, Any]) -> bool:
    """Whether the entry already starts ironcurtain as wrap writes it (a project's entry
    starting a remote server of the user's: said, and left alone)."""
    if not e.calls_ironcurtain or not_protected(f, e) is not None:
        return False
    if why := borrowed(f, server_of(e), existing):
        change.notes.append(f"{e.name}: NOT protected: {why}; left alone")
    return True


def _stdio_definition(f: ClientFile, e: Entry) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """A stdio entry's moved definition, as every client that reads its file takes it."""
    definition, kept, notes = moved_definition(f, e)
    read_alike(f, e, definition, kept)
    return definition, kept, notes


def config_name(
    name: str, client: str, definition: dict[str, Any], existing: dict[str, Any]
) -> str:
    """The name of an entry's definition in ironcurtain's config: its own name, or, when a
    server of that name is defined differently (another client's entry of that name),
    NAME.CLIENT, then NAME.CLIENT.2 and on: one name per definition, each client's entry
    starting its own. A project's remote server never shares a name with another file's
    (a login is kept by name)."""
    candidates: list[str] = [name, per_client(name, client)]
    candidates += [f"{per_client(name, client)}.{n}" for n in range(2, 100)]
    for candidate in candidates:
        if candidate not in existing or (
            _same(existing[candidate], definition) and may_share(existing[candidate], definition)
        ):
            return candidate
    return candidates[-1]  # 99 of them: the config check refuses the last, said


def left_alone(f: ClientFile, e: Entry) -> str | None:
    """What to say of an entry wrap leaves alone before moving its definition (None: go
    on): one naming ironcurtain but not as wrap writes it, one holding a value its client
    fills into the file's text, one with no command or an odd key, one that could never
    start in a sandbox."""
    if e.calls_ironcurtain:
        return (
            f"{e.name}: NOT protected: it starts {e.command} but is not what wrap "
            f"writes ({not_protected(f, e)}); left alone: unwrap it, or give the entry its "
            "own server back, and wrap again"
        )
    if filled_in(f, e):
        return f"{e.name}: {filled_in(f, e)}: left alone"
    if not e.command and e.url:
        return None  # a remote entry: its definition says whether it can be wrapped
    if not e.command:
        return f"{e.name}: an entry without a command, not sandboxable: left alone"
    shape = f.client.shape
    odd = odd_key(e.raw, shape, frozenset({"cwd"})) or shape_problem(e.raw, shape)
    if odd is not None:
        return f"{e.name}: {odd} (it could change what the client starts): left alone"
    cannot = unrunnable(f, e)
    if cannot is not None:
        return f"{e.name}: {cannot}: it could never start in a sandbox; left alone"
    problem = launch_problem(e)
    if problem is not None:
        return problem
    if f.client.name in SPLITS_COMMAND and any(c.isspace() for c in e.command or ""):
        return (
            f"{e.name}: {f.client.label} splits its command {e.command!r} into words; give "
            "the program as the command and the rest as its args: left alone"
        )
    return None


def read_alike(f: ClientFile, e: Entry, definition: dict[str, Any], kept: dict[str, str]) -> None:
    """:class:`LeftAlone` when another client that reads the same file takes the entry
    otherwise than its first client (its shape, or a value one fills and the other passes
    as text)."""
    for other in f.as_read_by()[1:]:
        shape, label = other.client.shape, other.client.label
        odd = odd_key(e.raw, shape, frozenset({"cwd"})) or shape_problem(e.raw, shape)
        if odd is not None:
            raise LeftAlone(f"as {label} reads it: {odd}")
        try:
            theirs, their_kept, _ = moved_definition(other, e)
        except LeftAlone as exc:
            raise LeftAlone(f"as {label} reads it: {exc}") from None
        if not _same(theirs, definition) or their_kept != kept:
            raise LeftAlone(
                f"{f.client.label} and {label} both read {f.path} and would start it "
                "differently (a value one fills in, the other passes as text)"
            )


def _as_text(f: ClientFile, kept: dict[str, str]) -> dict[str, str]:
    """The values of ``kept`` the client passes as they are written (no variable in them)."""
    from launcher.clients.catalogue.var_syntax import translate

    out: dict[str, str] = {}
    for name, value in kept.items():
        try:
            said, names = translate(f.client, value, env=True)
        except LeftAlone:
            continue
        if not names and said == value:
            out[name] = value
    return out


def _same(a: Any, b: dict[str, Any]) -> bool:
    strip = ("description",)
    if not isinstance(a, dict):
        return False
    return {k: v for k, v in a.items() if k not in strip} == {
        k: v for k, v in b.items() if k not in strip
    }


# A file's lines as diff and patch take them: ended by a newline only, the last maybe not.
_LINES = re.compile(r"[^\n]*\n|[^\n]+\Z")


def diff(change: Change) -> str:
    """The unified diff of a change, what the files hold shown as escapes where it could act
    on a terminal (lines stay lines). A last line without its newline is marked as
    ``diff -u`` marks it, so each diff stays one valid diff.

    >>> from pathlib import Path
    >>> print(diff(Change(Path("f"), "a\\nb", "a\\nc")), end="")
    --- f (now)
    +++ f (wrapped)
    @@ -1,2 +1,2 @@
     a
    -b
    \\ No newline at end of file
    +c
    \\ No newline at end of file
    """
    lines = difflib.unified_diff(
        _LINES.findall(change.before),
        _LINES.findall(change.after),
        f"{shown(str(change.path))} (now)",
        f"{shown(str(change.path))} (wrapped)",
    )
    marked = (
        line if line.endswith("\n") else f"{line}\n\\ No newline at end of file\n" for line in lines
    )
    return visible("".join(marked))
