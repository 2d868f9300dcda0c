"""The ``ironcurtain`` command: a thin skin over the launcher, policy and profile modules."""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable
from typing import Annotated, Any

# Pydantic looks for plugins in every installed distribution's entry points when it builds
# the first model: a scan at every start that ironcurtain's own models never need.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

import typer

from launcher.cli import audit_commands, auth_commands, clients
from launcher.cli.exits import finish
from launcher.cli.run_flags import BY_FIELD, RUN_FLAGS, default, field_type, flag_names, kind


def _option(field: str) -> Any:
    """The typer option of ``run``'s option for the RunOptions field ``field``."""
    return typer.Option(BY_FIELD[field].flag, help=BY_FIELD[field].help)


# The options other commands share with `run`.
ConfigOpt = Annotated[str | None, _option("config")]
PolicyOpt = Annotated[str | None, _option("policy_dir")]
WorkspaceOpt = Annotated[str | None, _option("workspace")]
ModelOpt = Annotated[
    str | None,
    typer.Option("--model", help="LLM model (default $IRONCURTAIN_MODEL, else a Claude model)."),
]
ApiKeyOpt = Annotated[
    str | None,
    typer.Option("--api-key", help="Anthropic API key (default $ANTHROPIC_API_KEY, preferred)."),
]
BaseUrlOpt = Annotated[
    str | None, typer.Option("--base-url", help="API base URL (default $ANTHROPIC_BASE_URL).")
]
ForceOpt = Annotated[
    bool, typer.Option("--force", help="Ask the LLM again even where its answer is cached.")
]


def _run_parameters() -> list[inspect.Parameter]:
    """The parameters of the ``run`` command, one for each of its options: named by the
    RunOptions field, of the field's type and default (a repeatable option's as a list)."""
    parameters = []
    for option in RUN_FLAGS:
        hint, value = field_type(option.field), default(option.field)
        if kind(option.flag) == "many":
            hint, value = list[str] | None, None
        parameters.append(
            inspect.Parameter(
                option.field,
                inspect.Parameter.KEYWORD_ONLY,
                default=value,
                annotation=Annotated[hint, _option(option.field)],
            )
        )
    return parameters


def run(**given: Any) -> None:
    """Start every enabled server in its sandbox and serve one MCP endpoint on stdio."""
    from launcher.cli.run import start
    from launcher.cli.run_flags import run_options

    raise typer.Exit(start(run_options(given)))


# What typer reads for run's options (its parameters are the table's).
setattr(run, "__signature__", inspect.Signature(_run_parameters()))  # noqa: B010


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
    from launcher.cli.explain_sandbox import show_profile
    from launcher.plan.run_options import RunOptions

    opts = RunOptions(config=config, policy_dir=policy_dir, workspace=workspace)
    print(show_profile(name, fmt, opts))


def approvals(
    session: Annotated[
        str | None,
        typer.Option(
            "--session", help="Only this session (default: every running session of yours)."
        ),
    ] = None,
    web: Annotated[
        bool,
        typer.Option(
            "--web",
            help="Answer on a local web page (127.0.0.1, a new token in the address printed).",
        ),
    ] = False,
    webhook: Annotated[
        str | None,
        typer.Option("--webhook", help="With --web: announce each question to this URL."),
    ] = None,
    webhook_secret_file: Annotated[
        str | None,
        typer.Option(
            "--webhook-secret-file",
            help="The shared secret the webhook's POSTs are signed with (HMAC-SHA256).",
        ),
    ] = None,
    listing: Annotated[
        bool,
        typer.Option("--list", help="List the pattern approvals in force, with their ids."),
    ] = False,
    revoke: Annotated[
        str | None,
        typer.Option("--revoke", help="Take back the pattern approval with this id."),
    ] = None,
) -> None:
    """Answer the escalations of your running sessions (or one) one by one; list or revoke
    the pattern approvals given."""
    if listing or revoke is not None:
        from launcher.cli.approvals_patterns import list_patterns, revoke_pattern

        webbed = web or webhook is not None or webhook_secret_file is not None
        if webbed or (listing and revoke is not None):
            from launcher.shared.user_errors import UsageError

            raise UsageError("--list, --revoke and --web are each a command of their own")
        raise typer.Exit(
            list_patterns(session) if listing else revoke_pattern(revoke or "", session)
        )
    if web:
        from launcher.cli.approvals_web import serve_web

        raise typer.Exit(serve_web(session, webhook, webhook_secret_file))
    if webhook is not None or webhook_secret_file is not None:
        from launcher.shared.user_errors import UsageError

        raise UsageError("--webhook announces questions of the page: use it with --web")
    from launcher.cli.approvals import attach

    raise typer.Exit(attach(session))


def annotate_tools(
    server: Annotated[
        list[str] | None, typer.Option("--server", help="Annotate this server (repeatable).")
    ] = None,
    all_servers: Annotated[bool, typer.Option("--all", help="Every enabled server.")] = False,
    heuristic: Annotated[
        bool,
        typer.Option("--heuristic", help="No LLM: a draft from MCP hints and argument names."),
    ] = False,
    output: Annotated[
        str, typer.Option("--output", help="Where to write the annotations.")
    ] = "tool-annotations.draft.json",
    config: ConfigOpt = None,
    model: ModelOpt = None,
    api_key: ApiKeyOpt = None,
    base_url: BaseUrlOpt = None,
    force: ForceOpt = False,
) -> None:
    """Start servers in their sandboxes, list their tools and annotate them (with the LLM,
    or --heuristic without one)."""
    from launcher.authoring.annotate import annotate_tools as run_annotate
    from launcher.authoring.compile import LLMOptions

    llm = LLMOptions(model, api_key, base_url, force)
    code = run_annotate(tuple(server or ()), all_servers, heuristic, output, config, llm)
    raise typer.Exit(code)


def compile_policy(
    server: Annotated[
        list[str] | None,
        typer.Option("--server", help="Only these servers (repeatable; default: all enabled)."),
    ] = None,
    output: Annotated[
        str | None,
        typer.Option(
            "--output", help="Directory for the artifacts (default ~/.config/ironcurtain/policy)."
        ),
    ] = None,
    config: ConfigOpt = None,
    model: ModelOpt = None,
    api_key: ApiKeyOpt = None,
    base_url: BaseUrlOpt = None,
    force: ForceOpt = False,
) -> None:
    """Compile the constitution into a verified policy (annotations, rules, scenarios)."""
    from launcher.authoring.compile import CompileOptions, LLMOptions
    from launcher.authoring.compile import compile_policy as run_compile

    llm = LLMOptions(model, api_key, base_url, force)
    opts = CompileOptions(config=config, servers=tuple(server or ()), output=output, llm=llm)
    code = run_compile(opts)
    raise typer.Exit(code)


def doctor() -> None:
    """Can this machine sandbox? One line per check; non-zero exit when it cannot."""
    from launcher.cli.doctor import run_checks

    raise typer.Exit(run_checks())


def scan(
    directories: Annotated[list[str], typer.Argument(help="Directories to sweep.")],
    fix: Annotated[
        bool, typer.Option("--fix", help="Move what is found into the quarantine directory.")
    ] = False,
) -> None:
    """List files host tools would load or run (git config and hooks, shell rc files, editor
    and AI-client configs...); exit 1 when any is found. --fix moves them out."""
    from launcher.cli.scan import scan as run_scan

    raise typer.Exit(run_scan(directories, fix))


def check(
    server: Annotated[str, typer.Argument(help="Server name as in the config.")],
    tool: Annotated[str, typer.Argument(help="Tool name (unprefixed).")],
    args: Annotated[str, typer.Option("--args", help="Arguments as a JSON object.")] = "{}",
    config: ConfigOpt = None,
    policy_dir: PolicyOpt = None,
    workspace: WorkspaceOpt = None,
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            help="A sample of what the tool returns (JSON: its result, or the value of its "
            "structured content): shown as the agent would get it, through the tool's "
            "output policy and the credential detectors.",
        ),
    ] = None,
    caller: Annotated[
        str | None,
        typer.Option(
            "--caller",
            help="A caller file (JSON: name and permissions): the call is checked as that "
            "caller's (permissions.json, then rules that name callers).",
        ),
    ] = None,
) -> None:
    """Dry-run one call through the policy: decision, rule, reason, canonical arguments;
    with --output, what a result of the tool would look like to the agent."""
    from launcher.cli.check import check_call

    print(check_call(server, tool, args, config, policy_dir, workspace, output, caller))


# Every command, by name, in the order `--help` lists them.
COMMANDS: dict[str, Callable[..., None]] = {
    "run": run,
    "profile": profile,
    "approvals": approvals,
    "annotate-tools": annotate_tools,
    "compile-policy": compile_policy,
    "doctor": doctor,
    "scan": scan,
    "check": check,
    "clients": clients.clients,
    "wrap": clients.wrap,
    "unwrap": clients.unwrap,
    "http-token": clients.http_token_command,
}
# The groups of commands (``ironcurtain audit verify``), by name: their help and commands.
GROUPS: dict[str, tuple[str, dict[str, Callable[..., None]]]] = {
    "audit": (
        "Check or follow an audit log (default: the newest one).",
        {"verify": audit_commands.verify, "tail": audit_commands.tail},
    ),
    "auth": (
        "Log in to remote servers, see the logins kept, forget one.",
        {
            "login": auth_commands.login,
            "status": auth_commands.status,
            "logout": auth_commands.logout,
        },
    ),
}


def _typer(commands: dict[str, Callable[..., None]], **settings: Any) -> typer.Typer:
    """A typer app of ``commands``."""
    made = typer.Typer(pretty_exceptions_enable=False, **settings)
    for name, callback in commands.items():
        made.command(name)(callback)
    return made


def _group() -> None:
    """Run MCP servers in OS sandboxes behind a policy proxy."""


app = _typer(COMMANDS, add_completion=False, no_args_is_help=True, help=_group.__doc__)
for _name, (_help, _commands) in GROUPS.items():
    app.add_typer(_typer(_commands, no_args_is_help=True, help=_help), name=_name)


def command_app(argv: list[str]) -> typer.Typer:
    """The app to dispatch ``argv`` with. Typer reads the signature and type hints of every
    command to build the whole tree (some 30 ms, paid before a server can start); for a
    top-level command named in full only that command is built, with the same options,
    help and errors. Anything else (no command, ``--help``, a typo, ``audit ...``) gets
    the whole app."""
    if len(argv) < 2 or argv[1] not in COMMANDS:
        return app
    one = _typer({argv[1]: COMMANDS[argv[1]]}, add_completion=False)
    one.callback()(_group)  # a group, so the command is still named on the line
    return one


def dispatch(argv: list[str]) -> None:
    """Run the command ``argv`` names, through typer."""
    command_app(argv)(args=argv[1:])


def main() -> None:
    finish(lambda: dispatch(sys.argv), flag_names(sys.argv))


if __name__ == "__main__":
    main()

__all__ = ["app", "main"]
