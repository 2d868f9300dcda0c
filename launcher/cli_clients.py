"""The commands about the clients' side: ``ironcurtain clients``, ``wrap`` and ``unwrap``
(the work is in :mod:`launcher.clients`, :mod:`launcher.wrap_cmd` and
:mod:`launcher.wrap_files`), and ``http-token`` (:mod:`launcher.http_token`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

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


def register(app: typer.Typer) -> None:
    """Add the commands to ``app``."""

    @app.command()
    def clients(project: ProjectOpt = None) -> None:
        """List the MCP clients configured on this machine (user files, and this project's),
        each with its servers and whether they already run through ironcurtain."""
        from launcher.clients import found, home
        from launcher.wrap_cmd import describe

        print(describe(found(home(), Path(project or os.getcwd()).resolve())))

    @app.command()
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
        """Run the clients' stdio servers through ironcurtain: each definition moves into
        ironcurtain's user config and the client's entry starts `ironcurtain run --server NAME`
        under the same name (backups first; `ironcurtain unwrap` restores)."""
        from launcher.clients import home
        from launcher.wrap_cmd import diff, plan_wrap, select
        from launcher.wrap_files import annotate_new, apply_wrap, ensure_user_policy

        files = select(home(), Path(project or os.getcwd()).resolve(), client or [], everything)
        changes, config = plan_wrap(files, server or [])
        for change in [*changes, config]:
            for note in change.notes:
                print(f"ironcurtain wrap: {note}", file=sys.stderr)
        if not any(c.after != c.before for c in changes):
            print("ironcurtain wrap: nothing to wrap", file=sys.stderr)
            return
        if dry_run:
            for change in [*changes, config]:
                print(diff(change), end="")
            return
        made = ensure_user_policy()
        for line in ([made] if made else []) + apply_wrap(changes, config):
            print(f"ironcurtain wrap: {line}", file=sys.stderr)
        wrapped = [name for change in changes for name in change.servers]
        if annotate:
            for line in annotate_new(wrapped):
                print(f"ironcurtain wrap: {line}", file=sys.stderr)
        else:
            print(
                "ironcurtain wrap: tools without annotations are never called; annotate them: "
                "`ironcurtain annotate-tools --server NAME --heuristic --output "
                f"{config.path.parent / 'policy' / 'tool-annotations.json'}`",
                file=sys.stderr,
            )

    @app.command()
    def unwrap(
        client: ClientsOpt = None,
        everything: AllOpt = False,
        project: ProjectOpt = None,
    ) -> None:
        """Restore the clients' files exactly as they were before `ironcurtain wrap`; a file
        that changed since is refused (its backup is named)."""
        from launcher.clients import home
        from launcher.wrap_cmd import select
        from launcher.wrap_files import unwrap as restore

        files = select(home(), Path(project or os.getcwd()).resolve(), client or [], everything)
        said = restore([f.path for f in files])
        for line in said or ["nothing to unwrap"]:
            print(f"ironcurtain unwrap: {line}", file=sys.stderr)

    @app.command("http-token")
    def http_token_command(
        rotate: Annotated[
            bool,
            typer.Option(
                "--rotate", help="Replace the kept token; clients must be given the new one."
            ),
        ] = False,
    ) -> None:
        """Print the bearer token `ironcurtain run --http` expects (made on first use, kept
        owner-only in the state directory), or replace it with --rotate."""
        from launcher import http_token

        path = http_token.default_path()
        if rotate:
            value = http_token.make(path)
            print(
                f"ironcurtain: a new token is in {path}; running sessions keep the old one until "
                "they stop",
                file=sys.stderr,
            )
        else:
            value = http_token.resolve(None, env={}).value
        print(value)
