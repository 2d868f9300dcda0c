"""``ironcurtain auth login|status|logout``: the commands; what they do is
:mod:`launcher.cli.logins`'s, loaded only when one runs."""

from __future__ import annotations

from typing import Annotated

import typer

ServerArg = Annotated[str, typer.Argument(help="A remote server's name, as in the config.")]
ConfigOpt = Annotated[
    str | None, typer.Option("--config", help="mcp-servers.json (default: the usual lookup).")
]
CallerOpt = Annotated[
    str | None,
    typer.Option(
        "--caller",
        help="Gateway mode: the caller (its token's sub) this login is for (with --issuer).",
    ),
]
IssuerOpt = Annotated[
    str | None,
    typer.Option("--issuer", help="Gateway mode: the identity provider that vouches for --caller."),
]


def login(
    server: ServerArg,
    config: ConfigOpt = None,
    wait: Annotated[
        float,
        typer.Option("--wait", min=1, help="Seconds to wait for the browser's answer."),
    ] = 300.0,
    caller: CallerOpt = None,
    issuer: IssuerOpt = None,
) -> None:
    """Log in to a remote server through your browser; the login is kept encrypted. With
    --caller and --issuer, the login is that caller's (gateway mode), used for no other."""
    from launcher.cli.logins import caller_of, log_in

    raise typer.Exit(log_in(server, config, wait, caller_of(caller, issuer)))


def status(
    server: Annotated[
        str | None, typer.Argument(help="Only this server (default: every login kept).")
    ] = None,
) -> None:
    """Who is logged in where: expiry and scopes, never a token."""
    from launcher.cli.logins import show_status

    raise typer.Exit(show_status(server))


def logout(
    server: ServerArg, config: ConfigOpt = None, caller: CallerOpt = None, issuer: IssuerOpt = None
) -> None:
    """Revoke the login at its authorization server (where it offers that) and forget it."""
    from launcher.cli.logins import caller_of, log_out

    raise typer.Exit(log_out(server, config, caller_of(caller, issuer)))
