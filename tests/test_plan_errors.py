"""The library names options by their RunOptions field; the command line by its flags."""

from __future__ import annotations

import pytest

from launcher.cli import cli_words
from launcher.errors import SandboxUnavailable, UsageError
from launcher.plan import OptionError, RunOptions, SandboxRefused, plan_session


@pytest.mark.parametrize(
    ("opts", "option", "library", "cli"),
    [
        (RunOptions(audit_args="plain"), "audit_args", "audit_args plain", "--audit-args plain"),
        (RunOptions(approval="maybe"), "approval", "approval maybe", "--approval maybe"),
        (RunOptions(http_port=70000), "http_port", "http_port 70000", "--http 70000"),
        (
            RunOptions(approval_timeout=0),
            "approval_timeout",
            "approval_timeout 0",
            "--approval-timeout 0",
        ),
    ],
)
def test_bad_options_are_named_by_field_then_by_flag(
    opts: RunOptions, option: str, library: str, cli: str
) -> None:
    with pytest.raises(OptionError) as caught:
        plan_session(opts)
    assert caught.value.option == option
    assert str(caught.value).startswith(library + ": ")
    assert isinstance(caught.value, UsageError)  # exit code 2, like any usage error
    with pytest.raises(OptionError) as caught, cli_words():
        plan_session(opts)
    assert str(caught.value).startswith(cli + ": ")


def test_a_server_selection_is_named_as_the_command_takes_it() -> None:
    error = OptionError("servers", "nope", "no such server in x.json")
    for servers, shown in (("--server", "--server nope"), ("check", "check nope")):
        with pytest.raises(OptionError) as caught, cli_words(servers=servers):
            raise error
        assert str(caught.value) == f"{shown}: no such server in x.json"


def test_a_refused_sandbox_names_the_override() -> None:
    error = SandboxRefused("bwrap is missing", "install it", "allow_unsandboxed", "run bare")
    assert isinstance(error, SandboxUnavailable)
    assert str(error) == (
        "cannot sandbox servers: bwrap is missing.\n"
        "To fix: install it; or pass allow_unsandboxed=True to run bare."
    )
    with pytest.raises(SandboxRefused) as caught, cli_words():
        raise error
    assert str(caught.value).endswith("or pass --allow-unsandboxed to run bare.")
