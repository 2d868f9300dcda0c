"""The ``ironcurtain`` command: a thin skin over the launcher, policy and profile modules."""

from __future__ import annotations

import os
import sys
from typing import Annotated

# Pydantic looks for plugins in every installed distribution's entry points when it builds
# the first model: a scan at every start that ironcurtain's own models never need.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

import typer

from launcher.cli import audit_commands, clients
from launcher.cli.exits import finish
from launcher.cli.run import flag_names

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
WorkspaceOpt = Annotated[
    str | None,
    typer.Option("--workspace", help="Workspace directory (default: a new one per session)."),
]


# The options of `run`.
ServerOpt = Annotated[
    list[str] | None, typer.Option("--server", help="Start only this server (repeatable).")
]
AuditLogOpt = Annotated[str | None, typer.Option("--audit-log", help="Audit log path.")]
AllowUnsandboxedOpt = Annotated[
    bool,
    typer.Option(
        "--allow-unsandboxed", help="If this machine cannot sandbox, run servers without it."
    ),
]
AllowNoSeccompOpt = Annotated[
    bool,
    typer.Option(
        "--allow-no-seccomp",
        help="If no seccomp filter can be built here, sandbox servers without it.",
    ),
]
AuditArgsOpt = Annotated[
    str,
    typer.Option(
        "--audit-args",
        help="hashed (default) or clear: arguments in the audit log in clear text "
        "(fields annotated as PII stay hashed).",
    ),
]
ApprovalOpt = Annotated[
    str,
    typer.Option(
        "--approval",
        help="Who answers escalations: auto (the client by MCP elicitation when it can, "
        "else an attached `ironcurtain approvals` terminal, else deny), elicit, socket, "
        "or deny.",
    ),
]
ApprovalTimeoutOpt = Annotated[
    float,
    typer.Option("--approval-timeout", help="Seconds to wait for an answer, then deny."),
]
MaxIdenticalCallsOpt = Annotated[
    int,
    typer.Option(
        "--max-identical-calls",
        help="Refuse the same call (server, tool, arguments) past this many times a "
        "minute; 0 turns the circuit breaker off.",
    ),
]
AcceptToolChangesOpt = Annotated[
    bool,
    typer.Option(
        "--accept-tool-changes",
        help="Trust the servers' tools as they are now (re-pin their descriptions and "
        "schemas); otherwise changed tools are escalated.",
    ),
]
HttpOpt = Annotated[
    int | None,
    typer.Option(
        "--http",
        help="Serve streamable HTTP on 127.0.0.1:PORT (0: any free port) instead of "
        "stdio; every request needs the bearer token (see `ironcurtain http-token`).",
    ),
]
HttpTokenFileOpt = Annotated[
    str | None,
    typer.Option(
        "--http-token-file",
        help="Read the --http bearer token from this owner-only file (else "
        "$IRONCURTAIN_HTTP_TOKEN, else the one kept in the state directory).",
    ),
]
CallerOpt = Annotated[
    str | None,
    typer.Option(
        "--caller",
        help='The caller of every request on stdio: a JSON file {"name": "billing-agent", '
        '"permissions": ["crm:read"]}.',
    ),
]
OidcIssuerOpt = Annotated[
    str | None,
    typer.Option(
        "--oidc-issuer",
        help="With --http: take no bearer token but each caller's JWT from this identity "
        "provider (https, or http on a loopback address); needs --oidc-audience.",
    ),
]
OidcAudienceOpt = Annotated[
    str | None,
    typer.Option("--oidc-audience", help="The audience (aud) the JWTs must be issued for."),
]
OidcJwksUrlOpt = Annotated[
    str | None,
    typer.Option(
        "--oidc-jwks-url",
        help="The provider's key set (default: jwks_uri of its discovery document; "
        "file:// accepted).",
    ),
]
PermissionsClaimOpt = Annotated[
    str,
    typer.Option(
        "--permissions-claim",
        help="The claim that holds a caller's permissions: a space-separated string or a "
        "list of strings.",
    ),
]
OidcRequireOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--oidc-require",
        help="With --oidc-issuer: CLAIM=GLOB a token's claims must match to make a caller "
        "(repeatable, all must match; a list claim matches if any element does; * globs). "
        "Without it, every subject the issuer signs for the audience is a caller.",
    ),
]
MaxClientsOpt = Annotated[
    int,
    typer.Option(
        "--max-clients",
        help="With --http: how many sessions, and in gateway mode callers, are served at "
        "once (each with servers of its own); the one idle longest makes room.",
    ),
]


@app.command()
def run(
    config: ConfigOpt = None,
    policy_dir: PolicyOpt = None,
    workspace: WorkspaceOpt = None,
    server: ServerOpt = None,
    audit_log: AuditLogOpt = None,
    allow_unsandboxed: AllowUnsandboxedOpt = False,
    allow_no_seccomp: AllowNoSeccompOpt = False,
    audit_args: AuditArgsOpt = "hashed",
    approval: ApprovalOpt = "auto",
    approval_timeout: ApprovalTimeoutOpt = 120.0,
    max_identical_calls: MaxIdenticalCallsOpt = 30,
    accept_tool_changes: AcceptToolChangesOpt = False,
    http: HttpOpt = None,
    http_token_file: HttpTokenFileOpt = None,
    caller: CallerOpt = None,
    oidc_issuer: OidcIssuerOpt = None,
    oidc_audience: OidcAudienceOpt = None,
    oidc_jwks_url: OidcJwksUrlOpt = None,
    permissions_claim: PermissionsClaimOpt = "scope",
    oidc_require: OidcRequireOpt = None,
    max_clients: MaxClientsOpt = 16,
) -> None:
    """Start every enabled server in its sandbox and serve one MCP endpoint on stdio."""
    from launcher.cli.run import start
    from launcher.plan.session_plan import RunOptions

    opts = RunOptions(
        config=config,
        policy_dir=policy_dir,
        workspace=workspace,
        servers=tuple(server or ()),
        audit_log=audit_log,
        allow_unsandboxed=allow_unsandboxed,
        allow_no_seccomp=allow_no_seccomp,
        audit_args=audit_args,
        approval=approval,
        approval_timeout=approval_timeout,
        max_identical_calls=max_identical_calls,
        accept_tool_changes=accept_tool_changes,
        http_port=http,
        http_token_file=http_token_file,
        caller_file=caller,
        oidc_issuer=oidc_issuer,
        oidc_audience=oidc_audience,
        oidc_jwks_url=oidc_jwks_url,
        permissions_claim=permissions_claim,
        oidc_require=tuple(oidc_require or ()),
        max_clients=max_clients,
    )
    raise typer.Exit(start(opts))


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
    from launcher.cli.explain_sandbox import show_profile
    from launcher.plan.session_plan import RunOptions

    opts = RunOptions(config=config, policy_dir=policy_dir, workspace=workspace)
    print(show_profile(name, fmt, opts))


@app.command()
def approvals(
    session: Annotated[
        str | None,
        typer.Option(
            "--session", help="Only this session (default: every running session of yours)."
        ),
    ] = None,
) -> None:
    """Answer the escalations of your running sessions (or one) one by one."""
    from launcher.cli.approvals import attach

    raise typer.Exit(attach(session))


@app.command("annotate-tools")
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
    from launcher.pipeline.annotate import annotate_tools as run_annotate
    from launcher.pipeline.compile import LLMOptions

    llm = LLMOptions(model, api_key, base_url, force)
    code = run_annotate(tuple(server or ()), all_servers, heuristic, output, config, llm)
    raise typer.Exit(code)


@app.command("compile-policy")
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
    from launcher.pipeline.compile import CompileOptions, LLMOptions
    from launcher.pipeline.compile import compile_policy as run_compile

    llm = LLMOptions(model, api_key, base_url, force)
    opts = CompileOptions(config=config, servers=tuple(server or ()), output=output, llm=llm)
    code = run_compile(opts)
    raise typer.Exit(code)


@app.command()
def doctor() -> None:
    """Can this machine sandbox? One line per check; non-zero exit when it cannot."""
    from launcher.cli.doctor import run_checks

    raise typer.Exit(run_checks())


@app.command()
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


@app.command()
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


clients.register(app)
audit_commands.register(app)


def _group() -> None:
    """Run MCP servers in OS sandboxes behind a policy proxy."""


def command_app(argv: list[str]) -> typer.Typer:
    """The app to dispatch ``argv`` with. Typer reads the signature and type hints of every
    command to build the whole tree (some 30 ms, paid before a server can start); for a
    top-level command named in full only that command is built, with the same options,
    help and errors. Anything else (no command, ``--help``, a typo, ``audit ...``) gets
    the whole app."""
    if len(argv) < 2:
        return app
    for info in app.registered_commands:
        assert info.callback is not None
        if (info.name or info.callback.__name__.lower().replace("_", "-")) == argv[1]:
            one = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
            one.callback()(_group)  # a group, so the command is still named on the line
            one.registered_commands = [info]
            return one
    return app


def dispatch(argv: list[str]) -> None:
    """Run the command ``argv`` names, through typer."""
    command_app(argv)(args=argv[1:])


def main() -> None:
    finish(lambda: dispatch(sys.argv), flag_names(sys.argv))


if __name__ == "__main__":
    main()

__all__ = ["app", "main"]
