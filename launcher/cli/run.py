"""``ironcurtain run``: its usual command lines read without typer, and the session started.

Typer is the command layer: it defines ``run``'s options, their help and every error
message. Importing it and building the command takes some 15 ms, paid before a server can
start, at every start (a client with wrapped entries pays it once per server). So a ``run``
command line of the usual shape is read here, into the :class:`RunOptions` typer would
give:

- every option named in full, as ``--name value``, ``--name=value`` or a flag;
- no option given twice (``--server`` and ``--oidc-require`` aside, which are repeatable);
- each value a word that does not start with ``-``, and a number's in plain digits (at
  most 18 before and after the point).

Anything else (``--help``, a typo, a missing value, ``--http -1``, a shell-completion
request) goes to typer, which answers it as it always does. ``tests/unit/test_run_cmd.py``
checks that the table below is the ``run`` command's own options, and that typer reads
every command line accepted here into the same options.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launcher.plan.session_plan import RunOptions

# Each option of `run`: its RunOptions field, and what it takes.
#   str: a word; int, float: a number; many: a word, the option repeatable; flag: nothing.
RUN_OPTIONS: dict[str, tuple[str, str]] = {
    "--config": ("config", "str"),
    "--policy-dir": ("policy_dir", "str"),
    "--workspace": ("workspace", "str"),
    "--server": ("servers", "many"),
    "--audit-log": ("audit_log", "str"),
    "--allow-unsandboxed": ("allow_unsandboxed", "flag"),
    "--allow-no-seccomp": ("allow_no_seccomp", "flag"),
    "--audit-args": ("audit_args", "str"),
    "--approval": ("approval", "str"),
    "--approval-timeout": ("approval_timeout", "float"),
    "--max-identical-calls": ("max_identical_calls", "int"),
    "--accept-tool-changes": ("accept_tool_changes", "flag"),
    "--http": ("http_port", "int"),
    "--http-token-file": ("http_token_file", "str"),
    "--caller": ("caller_file", "str"),
    "--oidc-issuer": ("oidc_issuer", "str"),
    "--oidc-audience": ("oidc_audience", "str"),
    "--oidc-jwks-url": ("oidc_jwks_url", "str"),
    "--permissions-claim": ("permissions_claim", "str"),
    "--oidc-require": ("oidc_require", "many"),
    "--max-clients": ("max_clients", "int"),
}

# How the command line names each setting the library's errors name by its field: run's
# options (the fields of RunOptions), then the other commands' own.
FLAGS = {field: flag for flag, (field, _) in RUN_OPTIONS.items()} | {
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

_NUMBER = {"int": re.compile(r"[0-9]{1,18}"), "float": re.compile(r"[0-9]{1,18}(?:\.[0-9]{1,18})?")}


def read_run(args: Sequence[str], environ: Mapping[str, str]) -> RunOptions | None:
    """The options of ``ironcurtain ARGS`` when it is a ``run`` line read here; None when
    typer is to read it."""
    if not args or args[0] != "run" or any(_completion(name) for name in environ):
        return None
    fields: dict[str, object] = {}
    many: dict[str, list[str]] = {}  # the repeatable options' values, in order
    words = iter(args[1:])
    for word in words:
        name, eq, attached = word.partition("=")
        known = RUN_OPTIONS.get(name)
        if known is None:
            return None
        field, kind = known
        if kind == "flag":
            if eq or field in fields:
                return None
            fields[field] = True
            continue
        value = attached if eq else next(words, None)
        if value is None or value.startswith("-"):
            return None
        if kind == "many":
            many.setdefault(field, []).append(value)
        elif field in fields:
            return None
        elif kind in _NUMBER:
            if not _NUMBER[kind].fullmatch(value):
                return None
            fields[field] = int(value) if kind == "int" else float(value)
        else:
            fields[field] = value
    from launcher.plan.session_plan import RunOptions

    repeated = {field: tuple(values) for field, values in many.items()}
    return RunOptions(**repeated, **fields)  # type: ignore[arg-type]


def _completion(name: str) -> bool:
    """Whether ``name`` is the variable a shell sets to ask for completions
    (``_IRONCURTAIN_COMPLETE``): typer answers that."""
    return name.startswith("_") and name.endswith("_COMPLETE")


def flag_names(argv: Sequence[str]) -> Callable[[str], str]:
    """How an error of the command line ``argv`` (``ironcurtain COMMAND ...``) names a
    setting: as the command line does (``--audit-args``, not ``audit_args``); a server
    selection, in a command that takes the server as an argument, by the command."""
    command = argv[1] if len(argv) > 1 else ""
    servers = command if command in SERVER_ARGUMENT else FLAGS["servers"]
    return lambda setting: servers if setting == "servers" else FLAGS.get(setting, setting)


def start(opts: RunOptions) -> int:
    """Plan the session, start its servers, serve until it ends; its exit status."""
    from launcher.plan.session_plan import plan_session
    from launcher.session.prestart import prestart

    plan = plan_session(opts)
    if plan.audit_args_clear:
        print(
            f"ironcurtain: WARNING: --audit-args clear: tool arguments are written in clear "
            f"text to {plan.audit_path} (fields annotated as PII stay hashed)",
            file=sys.stderr,
        )
    if plan.gateway is not None and not plan.gateway.required:
        print(
            "ironcurtain: WARNING: no --oidc-require: every subject the issuer "
            f"{plan.gateway.issuer} signs a token for (audience {plan.gateway.audience}) "
            "is a caller",
            file=sys.stderr,
        )
    if plan.approval == "elicit" and (plan.caller is not None or plan.gateway is not None):
        print(
            "ironcurtain: WARNING: --approval elicit: callers' own clients answer their "
            "escalations (only those that widen no sandbox and name only the caller's own "
            "places)",
            file=sys.stderr,
        )
    if opts.allow_unsandboxed and plan.sandbox_problem:
        print(
            f"ironcurtain: WARNING: running servers UNSANDBOXED: {plan.sandbox_problem}",
            file=sys.stderr,
        )
    if opts.allow_no_seccomp and plan.seccomp_problem:
        print(
            f"ironcurtain: WARNING: sandboxes have NO SYSTEM-CALL FILTER: {plan.seccomp_problem}",
            file=sys.stderr,
        )
    # The servers start now, and the event loop and the relay load while they do.
    started = prestart(plan)
    try:
        import asyncio

        from launcher.session.wiring import Session

        session = Session(plan, started, flag_names(["ironcurtain", "run"]))
    except BaseException:
        started.abandon()
        raise
    return asyncio.run(session.run())
