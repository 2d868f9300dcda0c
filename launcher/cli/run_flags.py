"""The options of ``ironcurtain run``, declared once: each one's flag, the
:class:`RunOptions` field it sets and its help. Its type and default are the field's.

From this table come the ``run`` command's typer parameters (:mod:`launcher.cli.app`),
the reading of ``run`` lines without typer (:mod:`launcher.cli.run`), the options the
other commands share with ``run``, and how an error names a setting (``--audit-args``,
not ``audit_args``). Nothing here loads typer.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING
from functools import cache
from typing import Literal

from launcher.plan.run_options import RunOptions
from sandbox_profiles.records import frozen

# What an option takes: a word, a number, a word and it is repeatable, or nothing.
Kind = Literal["str", "int", "float", "many", "flag"]


@frozen
class Flag:
    """One option of ``run``."""

    flag: str
    field: str  # of RunOptions
    help: str


RUN_FLAGS: tuple[Flag, ...] = (
    Flag("--config", "config", "mcp-servers.json to use."),
    Flag("--policy-dir", "policy_dir", "Directory with the compiled policy."),
    Flag("--workspace", "workspace", "Workspace directory (default: a new one per session)."),
    Flag("--server", "servers", "Start only this server (repeatable)."),
    Flag("--audit-log", "audit_log", "Audit log path."),
    Flag(
        "--allow-unsandboxed",
        "allow_unsandboxed",
        "If this machine cannot sandbox, run servers without it.",
    ),
    Flag(
        "--allow-no-seccomp",
        "allow_no_seccomp",
        "If no seccomp filter can be built here, sandbox servers without it.",
    ),
    Flag(
        "--audit-args",
        "audit_args",
        "hashed (default) or clear: arguments in the audit log in clear text "
        "(fields annotated as PII stay hashed).",
    ),
    Flag(
        "--approval",
        "approval",
        "Who answers escalations: auto (the client by MCP elicitation when it can, "
        "else an attached `ironcurtain approvals` terminal, else deny), elicit, socket, "
        "web (the approvals page: its address, with its token, printed at start), or deny.",
    ),
    Flag("--approval-timeout", "approval_timeout", "Seconds to wait for an answer, then deny."),
    Flag(
        "--max-identical-calls",
        "max_identical_calls",
        "Refuse the same call (server, tool, arguments) past this many times a "
        "minute; 0 turns the circuit breaker off.",
    ),
    Flag(
        "--accept-tool-changes",
        "accept_tool_changes",
        "Trust the servers' tools as they are now (re-pin their descriptions and "
        "schemas); otherwise changed tools are escalated.",
    ),
    Flag(
        "--http",
        "http_port",
        "Serve streamable HTTP on 127.0.0.1:PORT (0: any free port) instead of "
        "stdio; every request needs the bearer token (see `ironcurtain http-token`).",
    ),
    Flag(
        "--http-bind",
        "http_bind",
        "With --http: listen on this IP address (0.0.0.0 or :: for every interface); "
        "any but a loopback one needs --public-url.",
    ),
    Flag(
        "--public-url",
        "public_url",
        "With --http: the URL clients reach the endpoint at behind a load balancer "
        "(https://HOST[:PORT]/mcp): the only Host answered besides loopback, and the "
        "resource its OAuth metadata names.",
    ),
    Flag(
        "--http-token-file",
        "http_token_file",
        "Read the --http bearer token from this owner-only file (else "
        "$IRONCURTAIN_HTTP_TOKEN, else the one kept in the state directory).",
    ),
    Flag(
        "--caller",
        "caller_file",
        'The caller of every request on stdio: a JSON file {"name": "billing-agent", '
        '"permissions": ["crm:read"]}.',
    ),
    Flag(
        "--oidc-issuer",
        "oidc_issuer",
        "With --http: take no bearer token but each caller's JWT from this identity "
        "provider (https, or http on a loopback address); needs --oidc-audience.",
    ),
    Flag("--oidc-audience", "oidc_audience", "The audience (aud) the JWTs must be issued for."),
    Flag(
        "--oidc-jwks-url",
        "oidc_jwks_url",
        "The provider's key set (default: jwks_uri of its discovery document; file:// accepted).",
    ),
    Flag(
        "--permissions-claim",
        "permissions_claim",
        "The claim that holds a caller's permissions: a space-separated string or a "
        "list of strings.",
    ),
    Flag(
        "--oidc-require",
        "oidc_require",
        "With --oidc-issuer: CLAIM=GLOB a token's claims must match to make a caller "
        "(repeatable, all must match; a list claim matches if any element does; * globs). "
        "Without it, every subject the issuer signs for the audience is a caller.",
    ),
    Flag(
        "--max-clients",
        "max_clients",
        "With --http: how many sessions, and in gateway mode callers, are served at "
        "once (each with servers of its own); the one idle longest makes room.",
    ),
    Flag(
        "--state",
        "state",
        "With --http: share approvals for the session, the breaker's and the callers' "
        "counts and the key that seals question rounds with the other instances, in "
        "Redis (redis://HOST:PORT/DB, rediss://..., unix:///PATH); default: this "
        "instance's own.",
    ),
)
BY_FLAG = {option.flag: option for option in RUN_FLAGS}
BY_FIELD = {option.field: option for option in RUN_FLAGS}

# The fields of RunOptions no command line sets: other commands plan with them.
NOT_FLAGS = frozenset({"display_only", "every_caller", "read_only"})

# How the command line names each setting the library's errors name by its field: run's
# options, then the other commands' own.
FLAGS = {option.field: option.flag for option in RUN_FLAGS} | {
    "all_servers": "--all",
    "api_key": "--api-key",
    "base_url": "--base-url",
    "clients": "--client",
    "everything": "--all",
    "model": "--model",
    "output": "--output",
    "project": "--project",
}
# The commands that take a server as an argument, not with --server: an error names the
# server after the command (``check nope: no such server``).
SERVER_ARGUMENT = ("check", "profile")

_KINDS: dict[object, Kind] = {
    str: "str",
    int: "int",
    float: "float",
    bool: "flag",
    tuple[str, ...]: "many",
}


@cache
def field_type(field: str) -> object:
    """The type of the RunOptions field ``field``, as written there."""
    hint: object = typing.get_type_hints(RunOptions)[field]
    return hint


@cache
def kind(flag: str) -> Kind:
    """What the option ``flag`` takes, by its field's type (``None`` allowed aside)."""
    hint = field_type(BY_FLAG[flag].field)
    if isinstance(hint, types.UnionType):
        hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
    return _KINDS[hint]


def default(field: str) -> object:
    """The value of the RunOptions field ``field`` when its option is not given."""
    value: object = RunOptions.__dataclass_fields__[field].default
    assert value is not MISSING, field
    return value


def run_options(given: Mapping[str, object]) -> RunOptions:
    """The RunOptions of the values ``given`` by field (a repeatable option's as a
    sequence, or None); a field not given keeps its default."""
    fields = {
        field: tuple(typing.cast("Sequence[str] | None", value) or ())
        if kind(BY_FIELD[field].flag) == "many"
        else value
        for field, value in given.items()
    }
    return RunOptions(**fields)  # type: ignore[arg-type]


def flag_names(argv: Sequence[str]) -> Callable[[str], str]:
    """How an error of the command line ``argv`` (``ironcurtain COMMAND ...``) names a
    setting: as the command line does (``--audit-args``, not ``audit_args``); a server
    selection, in a command that takes the server as an argument, by the command."""
    command = argv[1] if len(argv) > 1 else ""
    servers = command if command in SERVER_ARGUMENT else FLAGS["servers"]
    return lambda setting: servers if setting == "servers" else FLAGS.get(setting, setting)
