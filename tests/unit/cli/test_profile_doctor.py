"""``ironcurtain profile`` and ``ironcurtain doctor`` as a user sees them, where no sandbox has
to start. (Doctor on this machine, and sessions where a part of the sandbox is missing:
``tests/sandbox/test_doctor_live.py``.)"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest

from tests.support.cli import ironcurtain
from tests.support.fakes import FAILING_BWRAP, fake_bin
from tests.support.home import Home
from tests.support.seatbelt import check_structure, parse


def _config(user: Home, sandbox: object) -> Path:
    path = user.root / "servers.json"
    server = {
        "command": "mcp-server-time",
        "env": {"API_TOKEN": "tok-SECRET-123"},
        "sandbox": sandbox,
    }
    path.write_text(json.dumps({"mcpServers": {"clock": server}}))
    return path


def test_profile_bwrap_shows_every_part_with_its_reason(user: Home) -> None:
    ws = user.ws()
    (ws / "sub" / ".git" / "hooks").mkdir(parents=True)
    # "clock" has no tool annotations (workspace read-only): allowWrite makes it writable.
    fs = {"denyRead": ["${workspace}/.env"], "allowWrite": ["${workspace}"]}
    config = _config(user, {"filesystem": fs, "limits": {"memory": "512M"}})
    done = ironcurtain(user, "profile", "clock", "--config", str(config), "--workspace", str(ws))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "--unshare-net" in out and "# own network stack" in out
    assert f"--ro-bind {ws}/sub/.git/hooks {ws}/sub/.git/hooks" in out
    assert "# always protected: sub/.git/hooks" in out
    assert "--seccomp FD" in out and "ptrace: EPERM" in out
    assert "prlimit --data=536870912:536870912" in out
    # Declared values are never printed (they may be secrets); their names are.
    assert "API_TOKEN=(declared)" in out and "tok-SECRET-123" not in out
    # The listed parts are the argv: every mount line parses as shell words.
    for line in out.splitlines():
        if line.startswith("  --"):
            shlex.split(line.split("  #")[0])
    assert not (ws / ".env").exists()  # showing a profile creates nothing


def test_profile_json_and_seatbelt(user: Home) -> None:
    ws = user.ws()
    config = _config(user, {})
    base = ("--config", str(config), "--workspace", str(ws))
    done = ironcurtain(user, "profile", "clock", "--format", "json", *base)
    data = json.loads(done.stdout)
    assert data["sandboxed"] is True and "net" in data["namespaces"]
    # No tool annotations for "clock": it sees the workspace read-only.
    assert any(m["dest"] == str(ws) and m["kind"] == "ro-bind" for m in data["mounts"])
    assert data["workspace"]["access"] == "read" and data["writable"] == []
    assert all(m["reason"] for m in data["mounts"])
    assert data["env"]["API_TOKEN"] == "(declared)"
    done = ironcurtain(user, "profile", "clock", "--format", "seatbelt", *base)
    forms = parse(done.stdout)
    assert forms[1].items == ["deny", "default"]
    assert f'(subpath "{ws}")' in done.stdout


def test_profile_of_an_unsandboxed_server_says_so_plainly(user: Home) -> None:
    config = _config(user, False)
    done = ironcurtain(user, "profile", "clock", "--config", str(config))
    assert done.returncode == 0
    assert "UNSANDBOXED" in done.stdout and "full access" in done.stdout


def test_profile_errors(user: Home) -> None:
    config = _config(user, {})
    done = ironcurtain(user, "profile", "nope", "--config", str(config))
    assert done.returncode == 2 and "profile nope: no such server" in done.stderr
    done = ironcurtain(user, "profile", "clock", "--config", str(config), "--format", "xml")
    assert done.returncode == 2 and "--format xml" in done.stderr
    assert "Traceback" not in done.stderr


def test_doctor_and_run_without_bwrap_fail_with_the_fix(user: Home) -> None:
    # A PATH with ironcurtain and the servers (the venv's bin) but no bwrap.
    user.env["PATH"] = user.env["PATH"].split(":")[0]
    done = ironcurtain(user, "doctor")
    assert done.returncode == 3
    assert "FAIL  bubblewrap       bwrap is not installed" in done.stdout
    assert "fix: sudo apt-get install bubblewrap" in done.stdout
    done = ironcurtain(user, "run", "--server", "time")
    assert done.returncode == 3 and "apt-get install bubblewrap" in done.stderr
    assert "--allow-unsandboxed" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="the failing fake bwrap is exercised as root")
def test_doctor_names_a_bwrap_that_cannot_start(user: Home) -> None:
    bin_dir = fake_bin(
        user,
        "bwrap",
        'case "$1" in --version) echo "bubblewrap 0.8.0";; *) '
        'echo "bwrap: No permissions to create new namespace" >&2; exit 1;; esac\n',
    )
    user.env["PATH"] = f"{bin_dir}:{user.env['PATH']}"
    done = ironcurtain(user, "doctor")
    assert done.returncode == 3
    assert "FAIL  sandbox start" in done.stdout and "No permissions" in done.stdout
    assert done.stdout.splitlines()[-1] == "this machine cannot sandbox MCP servers"


def test_seatbelt_of_a_real_server_is_well_formed(
    user: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    from launcher.plan.session_plan import RunOptions, plan_session

    ws = user.ws()
    monkeypatch.setenv("XDG_STATE_HOME", str(user.state))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(user.config))
    plan = plan_session(
        RunOptions(
            config=str(_config(user, {})),
            workspace=str(ws),
            servers=("clock",),
            display_only=True,
        )
    )
    profile = plan.servers["clock"].profile
    assert profile is not None
    from sandbox_profiles import seatbelt

    check_structure(seatbelt.render(profile), profile)


def test_run_refuses_when_bwrap_cannot_start_and_says_how_to_fix_it(user: Home) -> None:
    user.env["PATH"] = f"{fake_bin(user, 'bwrap', FAILING_BWRAP)}:{user.env['PATH']}"
    done = ironcurtain(user, "run", "--server", "time")
    assert done.returncode == 3 and "Traceback" not in done.stderr
    assert "uid map: Permission denied" in done.stderr
    assert "unprivileged_userns_clone" in done.stderr and "--allow-unsandboxed" in done.stderr
    assert not (user.state / "ironcurtain" / "audit").exists()  # nothing half-started
