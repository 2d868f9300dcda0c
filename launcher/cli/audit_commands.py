"""``ironcurtain audit verify|tail``: the commands; what they do is
:mod:`launcher.cli.audit`'s, loaded only when one runs."""

from __future__ import annotations

from typing import Annotated

import typer

AuditPath = Annotated[
    str | None, typer.Argument(help="The audit log (default: the newest in the state dir).")
]


def verify(path: AuditPath = None) -> None:
    """Check the hash chain; name the first line that was edited, removed, added or moved."""
    from launcher.cli.audit import verify_log

    raise typer.Exit(verify_log(path))


def tail(
    path: AuditPath = None,
    lines: Annotated[int, typer.Option("-n", "--lines", help="How many lines first.")] = 20,
    follow: Annotated[bool, typer.Option("-f", "--follow", help="Keep following.")] = False,
    caller: Annotated[
        str | None, typer.Option("--caller", help="Only the entries of the caller NAME.")
    ] = None,
) -> None:
    """Show the last entries readably; with -f, keep printing new ones."""
    from launcher.cli.audit import tail_log

    tail_log(path, lines, follow, caller)
