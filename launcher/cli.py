"""The ``ironcurtain`` command: a thin skin over the launcher, policy and profile modules."""

from __future__ import annotations

import asyncio
import sys
from typing import Annotated

import typer

from launcher.errors import USER_ERRORS

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Run MCP servers in OS sandboxes behind a policy proxy.",
)

ConfigOpt = Annotated[str | None, typer.Option("--config", help="mcp-servers.json to use.")]
PolicyOpt = Annotated[
    str | None, typer.Option("--policy-dir", help="Directory with the compiled policy.")
]
WorkspaceOpt = Annotated[
    str | None,
    typer.Option("--workspace", help="Workspace directory (default: a new one per session)."),
]


@app.command()
def run(
    config: ConfigOpt = None,
    policy_dir: PolicyOpt = None,
    workspace: WorkspaceOpt = None,
    server: Annotated[
        list[str] | None, typer.Option("--server", help="Start only this server (repeatable).")
    ] = None,
    audit_log: Annotated[str | None, typer.Option("--audit-log", help="Audit log path.")] = None,
    allow_unsandboxed: Annotated[
        bool,
        typer.Option(
            "--allow-unsandboxed", help="If this machine cannot sandbox, run servers without it."
        ),
    ] = False,
    allow_no_seccomp: Annotated[
        bool,
        typer.Option(
            "--allow-no-seccomp",
            help="If no seccomp filter can be built here, sandbox servers without it.",
        ),
    ] = False,
) -> None:
    """Start every enabled server in its sandbox and serve one MCP endpoint on stdio."""
    from launcher.plan import RunOptions, plan_session
    from launcher.session import Session

    plan = plan_session(
        RunOptions(
            config,
            policy_dir,
            workspace,
            tuple(server or ()),
            audit_log,
            allow_unsandboxed,
            allow_no_seccomp,
        )
    )
    if allow_unsandboxed and plan.sandbox_problem:
        print(
            f"ironcurtain: WARNING: running servers UNSANDBOXED: {plan.sandbox_problem}",
            file=sys.stderr,
        )
    if allow_no_seccomp and plan.seccomp_problem:
        print(
            f"ironcurtain: WARNING: sandboxes have NO SYSTEM-CALL FILTER: {plan.seccomp_problem}",
            file=sys.stderr,
        )
    raise typer.Exit(asyncio.run(Session(plan).run()))


@app.command()
def profile(
    name: Annotated[str, typer.Argument(help="Server name as in the config.")],
    fmt: Annotated[
        str, typer.Option("--format", help="bwrap (argv with reasons), seatbelt (SBPL) or json.")
    ] = "bwrap",
    config: ConfigOpt = None,
    policy_dir: PolicyOpt = None,
    workspace: WorkspaceOpt = None,
) -> None:
    """Print the exact sandbox profile a server would get, with the reason for each part."""
    from launcher.plan import RunOptions
    from launcher.show_profile import show_profile

    print(show_profile(name, fmt, RunOptions(config, policy_dir, workspace)))


@app.command()
def doctor() -> None:
    """Can this machine sandbox? One line per check; non-zero exit when it cannot."""
    from launcher.doctor import run_checks

    raise typer.Exit(run_checks())


@app.command()
def check(
    server: Annotated[str, typer.Argument(help="Server name as in the config.")],
    tool: Annotated[str, typer.Argument(help="Tool name (unprefixed).")],
    args: Annotated[str, typer.Option("--args", help="Arguments as a JSON object.")] = "{}",
    config: ConfigOpt = None,
    policy_dir: PolicyOpt = None,
    workspace: WorkspaceOpt = None,
) -> None:
    """Dry-run one call through the policy: decision, rule, reason, canonical arguments."""
    from launcher.check import check_call

    print(check_call(server, tool, args, config, policy_dir, workspace))


def main() -> None:
    try:
        app()
    except USER_ERRORS as exc:
        print(f"ironcurtain: error: {exc}", file=sys.stderr)
        sys.exit(getattr(exc, "exit_code", 2))
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()

__all__ = ["app", "main"]
