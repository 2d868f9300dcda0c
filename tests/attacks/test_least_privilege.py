"""Least privilege by default: the workspace only as far as a server's tools need it (from
the policy's tool annotations), and resource limits on unless lifted."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from launcher.plan.config_schema import DEFAULT_LIMITS
from launcher.plan.server_plan import workspace_access
from launcher.plan.session_plan import RunOptions, SessionPlan, plan_session
from policy import schema
from policy.models import ToolAnnotationsFile
from sandbox_profiles.model import Limits
from tests.support.cli import ironcurtain
from tests.support.home import Home, git_repo, make_home
from tests.support.marks import needs_bwrap
from tests.support.paths import IRONCURTAIN, PROBE
from tests.support.probe import write_raw_policy
from tests.support.sdk import call, connect

DEFAULTS = Limits(
    memory=DEFAULT_LIMITS["memory"],
    open_files=DEFAULT_LIMITS["open_files"],
    processes=DEFAULT_LIMITS["processes"],
    file_size=DEFAULT_LIMITS["file_size"],
)


def _plan(
    user: Home, monkeypatch: pytest.MonkeyPatch, config: Path | None, **opts: Any
) -> SessionPlan:
    for key in ("HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME"):
        monkeypatch.setenv(key, user.env[key])
    monkeypatch.chdir(user.root)
    return plan_session(
        RunOptions(
            config=str(config) if config else None,
            workspace=str(user.ws()),
            display_only=True,
            **opts,
        )
    )


def _config(user: Home, servers: dict[str, Any]) -> Path:
    path = user.root / "servers.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


# -- the workspace ---------------------------------------------------------------------------


def test_the_bundled_servers_see_only_the_workspace_they_need(
    user: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = _plan(user, monkeypatch, None)  # the bundled config and policy
    ws = plan.workspace
    seen = {}
    for name, sp in plan.servers.items():
        assert sp.profile is not None
        mounts = [m for m in sp.profile.mounts if m.dest == ws]
        seen[name] = (sp.workspace_access, [m.kind for m in mounts], sp.profile.writable)
    assert seen == {
        "filesystem": ("write", ["bind"], (ws,)),
        "git": ("write", ["bind"], (ws,)),
        "time": ("none", [], ()),
        "fetch": ("none", [], ()),
    }
    time = plan.servers["time"].profile
    assert time is not None and time.cwd == "/tmp/home"  # it runs where it exists inside
    assert plan.servers["time"].workspace_reason == "no tool of this server takes a path"


def _annotations(tools: dict[str, dict[str, list[str]]]) -> ToolAnnotationsFile:
    return schema.validate(
        ToolAnnotationsFile,
        {
            "servers": {
                "s": {
                    "tools": [
                        {
                            "toolName": tool,
                            "serverName": "s",
                            "effect": "other",
                            "sideEffects": True,
                            "args": args,
                        }
                        for tool, args in tools.items()
                    ]
                }
            }
        },
    )


def test_workspace_access_follows_the_argument_roles() -> None:
    assert workspace_access(_annotations({"rm": {"p": ["delete-path"]}}), "s")[0] == "write"
    assert workspace_access(_annotations({"w": {"p": ["read-path", "write-path"]}}), "s") == (
        "write",
        "w has a write role",
    )
    assert workspace_access(_annotations({"cat": {"p": ["read-path"]}, "x": {}}), "s") == (
        "read",
        "no tool of this server has a write role",
    )
    assert workspace_access(_annotations({"now": {"tz": ["none"]}}), "s")[0] == "none"
    # No annotations: none of its tools can be called; read-only, so it still starts.
    access, reason = workspace_access(_annotations({}), "other")
    assert access == "read" and "no tool annotations" in reason


def test_allow_write_still_makes_the_workspace_writable(
    user: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _config(
        user,
        {
            "time": {
                "command": "mcp-server-time",
                "sandbox": {"filesystem": {"allowWrite": ["${workspace}"]}},
            }
        },
    )
    plan = _plan(user, monkeypatch, config)
    profile = plan.servers["time"].profile
    assert profile is not None and profile.writable == (plan.workspace,)
    (mount,) = [m for m in profile.mounts if m.dest == plan.workspace]
    assert mount.kind == "bind" and mount.reason.endswith("allowWrite names it")


def test_ironcurtain_profile_gives_the_reason(user: Home) -> None:
    config = _config(
        user, {"clock": {"command": "mcp-server-time"}, "time": {"command": "mcp-server-time"}}
    )
    base = ["--config", str(config), "--workspace", str(user.ws())]

    def profile(name: str) -> str:
        done = subprocess.run(
            [IRONCURTAIN, "profile", name, *base],
            capture_output=True,
            text=True,
            env=user.env,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    # "clock" has no annotations in the bundled policy, "time" has tools without paths.
    assert "# the session workspace, read-only: the policy has no tool annotations" in profile(
        "clock"
    )
    assert "# the session workspace: not shown (no tool of this server takes a path)" in profile(
        "time"
    )


def _probe_session(user: Home, write_roles: list[str]) -> list[str]:
    """A read and a write in the workspace by the probe, whose read_path ``path`` has the
    role read-path and write_path ``path`` has ``write_roles``; the policy allows all."""
    ws = user.ws()
    (ws / "existing.txt").write_text("was here")
    policy = write_raw_policy(user.root / "policy")
    data = json.loads((policy / "tool-annotations.json").read_text())
    for tool in data["servers"]["probe"]["tools"]:
        if tool["toolName"] in ("read_path", "write_path"):
            tool["args"]["path"] = ["read-path"] if tool["toolName"] == "read_path" else write_roles
    (policy / "tool-annotations.json").write_text(json.dumps(data))
    server = {
        "command": sys.executable,
        "args": [str(PROBE)],
        "env": {"PROBE_LOG": "/tmp/probe-calls.jsonl"},  # not in the workspace
        "sandbox": {"filesystem": {"allowRead": [str(PROBE.parent)]}},
    }
    config = _config(user, {"probe": server})
    out: list[str] = []

    async def scenario() -> None:
        args = ["--config", str(config), "--policy-dir", str(policy), "--workspace", str(ws)]
        async with connect(user, *args) as s:
            for tool, arguments in (
                ("read_path", {"path": str(ws / "existing.txt")}),
                ("write_path", {"path": str(ws / "new.txt"), "content": "x"}),
            ):
                out.append((await call(s, f"probe__{tool}", arguments))[1])

    asyncio.run(scenario())
    return out


@needs_bwrap
def test_a_server_without_a_write_role_cannot_write_the_workspace(tmp_path: Path) -> None:
    user = make_home(tmp_path / "ro")
    read, write = _probe_session(user, ["read-path"])
    assert read == "READ OK: was here"  # it sees the workspace...
    assert write == "WRITE FAILED: Read-only file system", write  # ...read-only
    assert not (user.ws() / "new.txt").exists()
    # The same server whose write_path has a write role writes there.
    user = make_home(tmp_path / "rw")
    read, write = _probe_session(user, ["write-path"])
    assert (read, write) == ("READ OK: was here", "WRITE OK")
    assert (user.ws() / "new.txt").read_text() == "x"


@needs_bwrap
def test_the_bundled_servers_work_with_their_least_privilege(user: Home) -> None:
    ws = user.ws()
    git_repo(ws)

    async def scenario() -> None:
        async with connect(user, "--workspace", str(ws)) as s:
            error, text = await call(s, "time__get_current_time", {"timezone": "UTC"})
            assert not error and "UTC" in text, text
            error, text = await call(
                s, "filesystem__write_file", {"path": f"{ws}/notes.txt", "content": "hi"}
            )
            assert not error, text
            error, text = await call(s, "git__git_status", {"repo_path": str(ws)})
            assert not error and "notes.txt" in text, text

    asyncio.run(scenario())


# -- resource limits -------------------------------------------------------------------------


def _limits(user: Home, monkeypatch: pytest.MonkeyPatch, limits: object) -> Limits:
    server: dict[str, Any] = {"command": "mcp-server-time"}
    if limits is not None:
        server["sandbox"] = {"limits": limits}
    plan = _plan(user, monkeypatch, _config(user, {"t": server}))
    profile = plan.servers["t"].profile
    assert profile is not None
    return profile.limits


def test_limits_are_on_by_default(user: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    limits = _limits(user, monkeypatch, None)
    assert limits == DEFAULTS
    assert limits.memory == 4 << 30 and limits.processes == 256
    assert limits.open_files == 4096 and limits.file_size == 1 << 30
    assert limits.cpu_seconds is None


def test_one_field_is_overridden_and_the_others_kept(
    user: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataclasses import replace

    limits = _limits(user, monkeypatch, {"memory": "8G", "cpuSeconds": 600})
    assert limits == replace(DEFAULTS, memory=8 << 30, cpu_seconds=600)
    limits = _limits(user, monkeypatch, {"processes": False, "fileSize": None})
    assert limits == replace(DEFAULTS, processes=None, file_size=None)


def test_limits_false_lifts_them_all(user: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _limits(user, monkeypatch, False) == Limits()
    assert not Limits().any() and Limits().describe() == "no limits"


@pytest.mark.parametrize(
    ("limits", "where", "what"),
    [
        ({"memory": True}, "limits.memory", "true is not a limit"),
        ({"memory": "lots"}, "limits.memory", "is not a size"),
        ({"fileSize": 4096.0}, "limits.fileSize", "too small: at least 1M"),
        ({"memory": 1.5}, "limits.memory", "valid integer"),
        ({"openFiles": 4}, "limits.openFiles", "greater than or equal to 16"),
        (True, "sandbox.limits", "Input should be an object (found true)"),
    ],
)
def test_bad_limits_are_one_clear_error(user: Home, limits: object, where: str, what: str) -> None:
    config = _config(user, {"t": {"command": "mcp-server-time", "sandbox": {"limits": limits}}})
    done = ironcurtain(user, "run", "--config", str(config))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"$.mcpServers.t.sandbox.{where.removeprefix('sandbox.')}" in done.stderr
    assert what in done.stderr and len(done.stderr.strip().splitlines()) == 1


@needs_bwrap
def test_the_start_up_report_names_the_limits_and_the_workspace_of_each_server(
    user: Home,
) -> None:
    config = _config(
        user,
        {
            "a": {"command": "mcp-server-time"},
            "b": {"command": "mcp-server-time", "sandbox": {"limits": False}},
            "c": {"command": "mcp-server-time", "sandbox": {"limits": {"memory": "8G"}}},
        },
    )
    ws = user.ws()
    done = subprocess.run(
        [IRONCURTAIN, "run", "--config", str(config), "--workspace", str(ws)],
        capture_output=True,
        text=True,
        env=user.env,
        stdin=subprocess.DEVNULL,  # end of input: it stops once ready
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert f"  workspace:  {ws} (read-only: a, b, c)" in lines  # no annotations
    assert (
        "  limits:     a: memory 4 GiB, 256 processes, 4096 open files, files up to 1 GiB" in lines
    )
    assert "  limits:     b: no limits" in lines
    assert (
        "  limits:     c: memory 8 GiB, 256 processes, 4096 open files, files up to 1 GiB" in lines
    )
