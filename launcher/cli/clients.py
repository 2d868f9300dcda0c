"""The commands about the clients' side: ``ironcurtain clients``, ``wrap`` and ``unwrap``
(the work is in :mod:`launcher.clients.catalogue.known`, :mod:`launcher.clients.wrap.changes`
and :mod:`launcher.clients.wrap.apply`), and ``http-token``
(:mod:`launcher.transports.http.bearer_token`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from launcher.clients.wrap.changes import Change

ClientsOpt = Annotated[
    list[str] | None,
    typer.Option("--client", help="A client by name (repeatable): see `ironcurtain clients`."),
]
AllOpt = Annotated[bool, typer.Option("--all", help="Every client found.")]
ServerSel = Annotated[
    list[str] | None, typer.Option("--server", help="Only this server (repeatable).")
]
ProjectOpt = Annotated[
    str | None,
    typer.Option("--project", help="The project whose files to read too (default: here)."),
]


def _where(command: str, project: str | None) -> tuple[Path, Path | None]:
    """The home directory and the project whose files to read (never the home, nor a
    directory holding it: said when the directory it runs in is one)."""
    from launcher.clients.catalogue.known import home, project_root

    user = home()
    root, note = project_root(user, project, os.getcwd())
    if note:
        _say(command, note)
    return user, root


def _say(command: str, line: str) -> None:
    from launcher.shared.shown import visible

    print(f"ironcurtain {command}: {visible(line, one_line=True)}", file=sys.stderr)


def clients(
    project: ProjectOpt = None,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Exit 1 when any server a client names is not protected (remote ones "
            "included): for scripts and CI.",
        ),
    ] = False,
) -> None:
    """List the MCP clients configured on this machine (user files, and this project's),
    each with its servers and whether they run through ironcurtain, and why not."""
    from launcher.clients.catalogue.known import found
    from launcher.clients.wrap.changes import describe

    user, root = _where("clients", project)
    text, unprotected, _ = describe(found(user, root))
    print(text)
    if check and unprotected:
        raise typer.Exit(1)


def wrap(
    client: ClientsOpt = None,
    everything: AllOpt = False,
    server: ServerSel = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show the changes as a diff; write nothing.")
    ] = False,
    project: ProjectOpt = None,
    annotate: Annotated[
        bool,
        typer.Option(
            "--annotate/--no-annotate",
            help="Annotate the new servers' tools with the heuristic (starts each once).",
        ),
    ] = True,
) -> None:
    """Run the clients' servers through ironcurtain (stdio ones sandboxed, remote ones behind
    the gate): each definition moves into ironcurtain's user config and the client's entry
    starts `ironcurtain run --server NAME` under the same name (backups first; `ironcurtain
    unwrap` restores)."""
    from launcher.clients.wrap.annotation_runs import later_command
    from launcher.clients.wrap.apply import apply_wrap, ensure_user_policy
    from launcher.clients.wrap.changes import diff, plan_wrap, select
    from launcher.clients.wrap.remote_entries import hide_headers, keep_owner_only

    user, root = _where("wrap", project)
    files = select(user, root, client or [], everything)
    changes, config = plan_wrap(files, server or [])
    for change in [*changes, config]:
        for note in change.notes:
            _say("wrap", note)
    if not any(c.after != c.before for c in changes):
        unread = [why for _, why in [*files.refused, *files.unsupported]] + config.refused
        if client and unread:  # named, and nothing of it can be wrapped
            from launcher.shared.user_errors import UsageError

            raise UsageError(f"{unread[0]}; nothing written")
        _say("wrap", "nothing to wrap")
        return
    if dry_run:
        moved = [d for c in changes for d in c.definitions.values()]
        for change in [*changes, config]:
            print(hide_headers(diff(change), moved), end="")
        return
    made = [ensure_user_policy()]
    # A token a remote entry's headers move there is kept owner-only before it is written.
    made.append(keep_owner_only(config.path, [d for c in changes for d in c.definitions.values()]))
    for line in [m for m in made if m] + apply_wrap(changes, config):
        _say("wrap", line)
    held = {name: why for change in changes for name, why in change.held.items()}
    for name, why in held.items():
        _say("wrap", f"{why}; annotate it from an environment holding only what its "
             f"client gives: {later_command(name)}")  # fmt: skip
    if annotate:
        for line in annotate_new(changes, held):
            _say("wrap", line)
    else:
        _say("wrap", "tools without annotations are never called; annotate them: "
             f"{later_command('NAME')}")  # fmt: skip


def unwrap(
    client: ClientsOpt = None,
    everything: AllOpt = False,
    project: ProjectOpt = None,
) -> None:
    """Restore the clients' files as they were before `ironcurtain wrap`: exactly, or, in
    a file changed elsewhere since, the wrapped entries only; what cannot be restored is
    said (its backup named) and the rest is done."""
    from launcher.clients.wrap import backups
    from launcher.clients.wrap.apply import unwrap as restore
    from launcher.clients.wrap.changes import select
    from launcher.shared.user_errors import UsageError

    user, root = _where("unwrap", project)
    files = select(user, root, client or [], everything)
    said, problems = restore(files)
    others = backups.unmatched(backups.load(), [f.source for f in files.files])
    nothing = "nothing to unwrap"
    if others:
        nothing += (
            f" in the files read here; wrap's records name other files: {', '.join(others)} "
            "(unwrap where they are read: in their project, or with their --client)"
        )
    for line in said or ([] if problems else [nothing]):
        _say("unwrap", line)
    if problems:
        raise UsageError("; ".join(problems))


def http_token_command(
    rotate: Annotated[
        bool,
        typer.Option("--rotate", help="Replace the kept token; clients must be given the new one."),
    ] = False,
) -> None:
    """Print the bearer token `ironcurtain run --http` expects (made on first use, kept
    owner-only in the state directory), or replace it with --rotate."""
    from launcher.transports.http import bearer_token

    path = bearer_token.default_path()
    if rotate:
        value = bearer_token.make(path)
        print(
            f"ironcurtain: a new token is in {path}; running sessions keep the old one until "
            "they stop",
            file=sys.stderr,
        )
    else:
        value = bearer_token.resolve(None, env={}).value
    print(value)


def annotate_new(changes: Sequence[Change], held: Mapping[str, str]) -> list[str]:
    """Heuristic drafts for the wrapped servers the user policy has no annotations of, so
    the constitution's role-based rules apply to them at once: each is started in its
    sandbox once, on its own, to list its tools. What fails is said with the command to
    run later; the others are annotated."""
    from launcher.clients.catalogue.known import user_policy
    from launcher.clients.wrap.annotation_runs import annotate_each
    from policy.loader import load_policy_dir

    known = load_policy_dir(user_policy()).annotations.servers
    definitions = {
        name: d for c in changes for name, d in c.definitions.items()
        if name not in held and name not in known
    }  # fmt: skip
    if not definitions:
        return []
    given = {name: g for c in changes for name, g in c.given.items()}
    new, said = annotate_each(definitions, given)
    if new:
        said.insert(0,
            f"annotated {', '.join(new)} with the heuristic (drafts: review them with "
            f"`ironcurtain compile-policy --server NAME`, or edit "
            f"{user_policy() / 'tool-annotations.json'})"
        )  # fmt: skip
    servers_now = load_policy_dir(user_policy()).annotations.servers
    for name in new:
        entry = servers_now.get(name)
        unclassified = (
            sorted(t.tool_name for t in entry.tools if t.effect == "other") if entry else []
        )
        if unclassified:
            said.append(
                f"{name}: the heuristic could not classify {', '.join(unclassified)}; no rule "
                f"lets their calls through until reviewed: ironcurtain compile-policy --server "
                f"{name}"
            )
    return said
