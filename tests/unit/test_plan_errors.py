"""The library names options by their RunOptions field; the command line by its flags."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from launcher.cli.run import cli_words
from launcher.plan.session_plan import OptionError, RunOptions, SandboxRefused, plan_session
from launcher.shared.errors import ConfigError, SandboxUnavailable, UsageError
from tests.support.marks import needs_bwrap


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


@needs_bwrap
def test_a_probe_ended_early_leaves_nothing_behind_and_never_hangs(tmp_path: Path) -> None:
    # The real bwrap, ended at every moment of its start: killed before its child in the new
    # namespaces is mapped, that child would wait for ever holding the probe's stderr, and
    # ending the probe (reading it to its end) would hang the session's start.
    code = (
        "import os, time\n"
        "from launcher.host.machine import SandboxProbe\n"
        "for i in range(1000):\n"
        "    with SandboxProbe(os.geteuid() == 0):\n"
        "        time.sleep((0, 0.0005, 0.002)[i % 3])\n"
    )
    ended = subprocess.run(
        [sys.executable, "-c", code], timeout=60, capture_output=True, text=True, check=False
    )
    assert ended.returncode == 0, ended.stderr
    left = subprocess.run(
        ["pgrep", "-f", "--", "--ro-bind / / -- true"], capture_output=True, text=True
    ).stdout.split()
    assert left == [], f"probes left running: {left}"
