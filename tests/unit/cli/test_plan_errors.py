"""The library names options by their RunOptions field; the command line by its flags."""

from __future__ import annotations

import json
import os
from pathlib import Path

import psutil
import pytest

from launcher.cli.run_flags import flag_names
from launcher.plan.session_plan import RunOptions, plan_session
from launcher.shared.user_errors import (
    ConfigError,
    OptionError,
    SandboxRefused,
    SandboxUnavailable,
    StartupError,
    UsageError,
)
from launcher.transports.http.listener import listen_http
from tests.support.cli import ironcurtain
from tests.support.home import Home


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
        (
            RunOptions(http_token_file="t"),
            "http_token_file",
            "http_token_file t: is only used with http_port",
            "--http-token-file t: is only used with --http",
        ),
        (
            RunOptions(public_url="https://mcp.example.com/mcp"),
            "public_url",
            "public_url https://mcp.example.com/mcp: is only used with http_port",
            "--public-url https://mcp.example.com/mcp: is only used with --http",
        ),
        (
            RunOptions(http_port=0, http_bind="0.0.0.0"),
            "http_bind",
            "http_bind 0.0.0.0: listening beyond this machine needs public_url",
            "--http-bind 0.0.0.0: listening beyond this machine needs --public-url",
        ),
        (
            RunOptions(http_port=0, http_bind="gw.example.com"),
            "http_bind",
            "http_bind gw.example.com: not an IP address",
            "--http-bind gw.example.com: not an IP address",
        ),
        (
            RunOptions(http_port=0, public_url="http://mcp.example.com/mcp"),
            "public_url",
            "public_url http://mcp.example.com/mcp: plain http is accepted only on a loopback",
            "--public-url http://mcp.example.com/mcp: plain http",
        ),
        (
            RunOptions(http_port=0, public_url="https://mcp.example.com/other"),
            "public_url",
            "public_url https://mcp.example.com/other: the path must be /mcp",
            "--public-url https://mcp.example.com/other: the path must be /mcp",
        ),
        (
            RunOptions(http_port=0, oidc_issuer="https://id.example"),
            "oidc_issuer",
            "oidc_issuer https://id.example: needs oidc_audience (or public_url, then",
            "--oidc-issuer https://id.example: needs --oidc-audience (or --public-url, then",
        ),
    ],
    ids=[
        "audit-args",
        "approval",
        "http-port",
        "approval-timeout",
        "http-token-file",
        "public-url-alone",
        "bind-without-public-url",
        "bind-a-name",
        "public-url-plain-http",
        "public-url-other-path",
        "issuer-without-audience",
    ],
)
def test_bad_options_are_named_by_field_then_by_flag(
    opts: RunOptions, option: str, library: str, cli: str
) -> None:
    with pytest.raises(OptionError) as caught:
        plan_session(opts)
    assert caught.value.option == option
    assert str(caught.value).startswith(library)
    assert isinstance(caught.value, UsageError)  # exit code 2, like any usage error
    # The error is the library's; the command line's words are the command layer's.
    assert caught.value.said(flag_names(["ironcurtain", "run"])).startswith(cli)
    assert str(caught.value).startswith(library)


def test_a_server_selection_is_named_as_the_command_takes_it() -> None:
    error = OptionError("servers", "nope", "no such server in x.json")
    for command, shown in (("run", "--server nope"), ("check", "check nope")):
        assert error.said(flag_names(["ironcurtain", command])) == (
            f"{shown}: no such server in x.json"
        )
    assert str(error) == "servers nope: no such server in x.json"


def test_a_refused_sandbox_names_the_override() -> None:
    error = SandboxRefused("bwrap is missing", "install it", "allow_unsandboxed", "run bare")
    assert isinstance(error, SandboxUnavailable)
    assert str(error) == (
        "cannot sandbox servers: bwrap is missing.\n"
        "To fix: install it; or pass allow_unsandboxed to run bare."
    )
    said = error.said(flag_names(["ironcurtain", "run"]))
    assert said.endswith("or pass --allow-unsandboxed to run bare.")


def test_a_port_that_cannot_be_had_is_named_by_its_setting() -> None:
    taken = listen_http(0)
    try:
        port = taken.getsockname()[1]
        with pytest.raises(StartupError) as caught:
            listen_http(port)
    finally:
        taken.close()
    assert (caught.value.option, caught.value.value) == ("http_port", port)
    assert caught.value.said(flag_names(["ironcurtain", "run"])).startswith(
        f"--http {port}: cannot listen on 127.0.0.1: "
    )


def _fake_bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    """A ``bwrap`` first on PATH that runs ``script`` (the real tools after it)."""
    fake = tmp_path / "bin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\n{script}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


def _config(tmp_path: Path, sandbox: bool) -> str:
    config = tmp_path / "mcp-servers.json"
    server = {"command": "mcp-server-time", **({} if sandbox else {"sandbox": False})}
    config.write_text(json.dumps({"mcpServers": {"time": server}}))
    return str(config)


def test_a_bwrap_that_cannot_sandbox_refuses_the_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_bwrap(tmp_path, monkeypatch, 'echo "no user namespaces here" >&2; exit 1')
    opts = RunOptions(config=_config(tmp_path, sandbox=True), workspace=str(tmp_path / "ws"))
    with pytest.raises(SandboxRefused) as caught:
        plan_session(opts)
    assert "bwrap cannot create a sandbox here: no user namespaces here" in str(caught.value)


def test_a_probe_that_is_not_needed_is_not_left_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The probe starts before the config is read; with no server sandboxed (or a config
    # that fails), it is ended, not waited for and not left behind.
    marker = tmp_path / "probe-ran"
    _fake_bwrap(tmp_path, monkeypatch, f"touch {marker}; exec sleep 60")
    children = psutil.Process().children
    plan = plan_session(
        RunOptions(config=_config(tmp_path, sandbox=False), workspace=str(tmp_path / "ws"))
    )
    assert plan.sandbox_problem is None and not children()
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(ConfigError):
        plan_session(RunOptions(config=str(broken), workspace=str(tmp_path / "ws")))
    assert not children()


def test_a_bind_beyond_loopback_without_a_public_url_is_one_clear_error(user: Home) -> None:
    """At the command line: exit 2, one line naming both options and why, no traceback,
    nothing listening."""
    done = ironcurtain(user, "run", "--http", "0", "--http-bind", "0.0.0.0")
    assert done.returncode == 2, done.stderr
    assert "--http-bind 0.0.0.0: listening beyond this machine needs --public-url" in done.stderr
    assert "DNS rebinding" in done.stderr and "Traceback" not in done.stderr
