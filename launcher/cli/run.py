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
request) goes to typer, which answers it as it always does. The options are
:mod:`launcher.cli.run_flags`'s, the same table typer's ``run`` command is built from;
``tests/unit/cli/test_run_cmd.py`` checks that typer reads every command line accepted here
into the same options.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from launcher.cli.run_flags import BY_FLAG, flag_names, kind, run_options

if TYPE_CHECKING:
    from launcher.plan.run_options import RunOptions
    from launcher.plan.session_plan import SessionPlan
    from launcher.shared_state.redis_store import RedisState

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
        if name not in BY_FLAG:
            return None
        field, takes = BY_FLAG[name].field, kind(name)
        if takes == "flag":
            if eq or field in fields:
                return None
            fields[field] = True
            continue
        value = attached if eq else next(words, None)
        if value is None or value.startswith("-"):
            return None
        if takes == "many":
            many.setdefault(field, []).append(value)
        elif field in fields:
            return None
        elif takes in _NUMBER:
            if not _NUMBER[takes].fullmatch(value):
                return None
            fields[field] = int(value) if takes == "int" else float(value)
        else:
            fields[field] = value
    return run_options(many | fields)


def _completion(name: str) -> bool:
    """Whether ``name`` is the variable a shell sets to ask for completions
    (``_IRONCURTAIN_COMPLETE``): typer answers that."""
    return name.startswith("_") and name.endswith("_COMPLETE")


def _shared_state(url: str | None, plan: SessionPlan) -> RedisState | None:
    """The shared state ``--state`` names, reached before anything starts (None: this
    instance's own); one that cannot be reached stops the session. What this deployment
    keeps there is its own: named by who may call it (the identity provider and audience,
    or the bearer token), apart from another deployment's in the same Redis."""
    if url is None:
        return None
    from launcher.session.report import say
    from launcher.shared.user_errors import OptionError
    from launcher.shared_state.redis_store import connect, shown
    from launcher.shared_state.store import StateLost, deployment_of, secret_name

    if plan.gateway is not None:
        deployment = deployment_of("oidc", plan.gateway.issuer, plan.gateway.audience)
    else:
        token = plan.http_token.value if plan.http_token else ""
        deployment = deployment_of("token", secret_name(token))
    try:
        state = connect(url, say, deployment)
    except StateLost as lost:
        raise OptionError("state", shown(url), f"cannot be reached: {lost}") from None
    say(
        f"shared state: {state.where} (approvals for the session, pattern approvals, the "
        "circuit breaker's and the callers' counts, the key that seals question rounds)"
    )
    return state


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
    state = _shared_state(opts.state, plan)
    # The servers start now, and the event loop and the relay load while they do.
    started = prestart(plan)
    try:
        import asyncio

        from launcher.session.wiring import Session

        session = Session(plan, started, flag_names(["ironcurtain", "run"]), state=state)
    except BaseException:
        started.abandon()
        raise
    return asyncio.run(session.run())
