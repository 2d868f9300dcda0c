"""``${caller}`` in the workspace and in the config's paths: the caller's name made safe
for a path where there is one caller; a plan for every caller keeps the placeholder (each
caller's is planned again for it); without a caller, naming it is an error that says where
and what would give one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from launcher.cli.run_flags import flag_names
from launcher.plan.caller_plan import plan_for_caller
from launcher.plan.config import CALLER, load_config
from launcher.plan.session_plan import RunOptions, SessionPlan, plan_from, plan_session
from launcher.plan.workspace import workspace_for
from launcher.shared.caller_identity import Caller, path_name
from launcher.shared.user_errors import CallerNeeded, ConfigError, OptionError
from tests.support.home import Home, in_process, make_home
from tests.support.marks import needs_bwrap

RUN = flag_names(["ironcurtain", "run"])


def _config(path: Path, server: dict[str, Any]) -> Path:
    path.write_text(json.dumps({"mcpServers": {"filesystem": server}}))
    return path


def _fs(shared: Path) -> dict[str, Any]:
    return {
        "command": "mcp-server-filesystem",
        "args": ["${workspace}"],
        "cwd": "${workspace}",
        "sandbox": {"filesystem": {"allowWrite": [f"{shared}/${{caller}}"]}},
    }


@pytest.fixture
def user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Home:
    user = in_process(make_home(tmp_path), monkeypatch)
    monkeypatch.setenv("HOME", user.env["HOME"])
    return user


# -- the workspace -----------------------------------------------------------------------------


def test_a_workspace_naming_the_caller_is_the_callers_own(tmp_path: Path) -> None:
    given = f"{tmp_path}/work/${{caller}}"
    for name in ("billing-agent", "auth0|507f", "../x", "Bob", "a/b"):
        ws = workspace_for(given, "s", path_name(name))
        assert Path(ws).parent == tmp_path / "work"
        assert Path(ws).name == path_name(name)
    assert workspace_for(given, "s", CALLER) == given  # a plan for every caller shows it


def test_a_workspace_naming_the_caller_needs_one() -> None:
    with pytest.raises(OptionError) as refused:
        workspace_for("/srv/work/${caller}", "s", None)
    assert refused.value.said(RUN) == (
        "--workspace /srv/work/${caller}: names ${caller}, the caller's name, and this session "
        "has no caller: give --caller, or --oidc-issuer and --oidc-audience with --http"
    )


def test_a_link_in_the_place_of_a_callers_workspace_is_refused(tmp_path: Path) -> None:
    """A link where the caller's directory goes (to another caller's, or out of the
    directory that holds them) is no workspace of its; the same link is followed when the
    workspace is given without ${caller} (the control: the check is what stops it)."""
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    (work / "bob").mkdir(parents=True)
    elsewhere.mkdir()
    (work / "mallory").symlink_to(work / "bob")
    (work / "eve").symlink_to(elsewhere)
    for name in ("mallory", "eve"):
        with pytest.raises(OptionError, match="leads elsewhere through a symbolic link"):
            workspace_for(f"{work}/${{caller}}", "s", name)
    assert workspace_for(f"{work}/mallory", "s", None) == str(work / "bob")


# -- the config --------------------------------------------------------------------------------


def test_config_paths_name_the_caller(tmp_path: Path) -> None:
    path = _config(tmp_path / "c.json", _fs(tmp_path / "shared"))
    env = {"caller": "from-the-environment"}  # never what ${caller} stands for
    loaded = load_config(path, "t", "/ws/bob", env=env, caller="bob")
    fs = loaded.servers["filesystem"]
    assert fs.sandbox is not False
    assert fs.sandbox.filesystem.allow_write == [f"{tmp_path}/shared/bob"]
    assert loaded.per_caller == {
        "filesystem": "$.mcpServers.filesystem.sandbox.filesystem.allowWrite[0]"
    }
    every = load_config(path, "t", "/ws", env=env, caller=CALLER)
    assert every.servers["filesystem"].sandbox.filesystem.allow_write == [  # type: ignore[union-attr]
        f"{tmp_path}/shared/${{caller}}"
    ]


def test_a_config_naming_the_caller_without_one_names_the_file_and_the_place(
    tmp_path: Path,
) -> None:
    path = _config(tmp_path / "c.json", {"command": "x", "cwd": "/srv/${caller}"})
    loaded = load_config(path, "t", "/ws", env={"caller": "set-anyway"})
    error = loaded.broken["filesystem"]
    assert isinstance(error, CallerNeeded) and error.exit_code == 2
    assert error.said(RUN) == (
        f"{path}: $.mcpServers.filesystem.cwd: names ${{caller}}, the caller's name, and this "
        "session has no caller: give --caller, or --oidc-issuer and --oidc-audience with --http "
        "(or write ${caller:-name} for a session without one)"
    )
    shared = _config(tmp_path / "d.json", {"command": "x", "cwd": "/srv/${caller:-shared}"})
    assert load_config(shared, "t", "/ws").servers["filesystem"].cwd == "/srv/shared"


@needs_bwrap  # planned as to run: the sandbox is probed
def test_without_a_caller_the_session_does_not_start(user: Home) -> None:
    config = _config(user.root / "c.json", _fs(user.root / "shared"))
    with pytest.raises(CallerNeeded):
        plan_session(RunOptions(config=str(config), workspace=str(user.ws())))
    with pytest.raises(OptionError, match="names"):
        plan_session(RunOptions(config=str(config), workspace=f"{user.root}/w/${{caller}}"))
    assert not (user.root / "w").exists()
    assert not user.left_behind()


# -- plans -------------------------------------------------------------------------------------


def _one_caller(user: Home, caller: Caller, **opts: Any) -> SessionPlan:
    config = _config(user.root / "c.json", _fs(user.root / "shared"))
    options = RunOptions(config=str(config), workspace=f"{user.root}/w/${{caller}}", **opts)
    ws = workspace_for(options.workspace, "s", caller.path_name)
    return plan_from(options, "s", ws, None, None, (caller, None))


def test_one_callers_plan_is_its_own_everywhere(user: Home) -> None:
    """The workspace, the server's working directory and writable roots, and what the
    policy takes for the workspace: all the caller's own."""
    caller = Caller("auth0|Bob", frozenset())
    (user.root / "shared" / "auth0%7C%42ob").mkdir(parents=True)
    plan = _one_caller(user, caller)
    own = str(user.root / "w" / "auth0%7C%42ob")
    assert plan.workspace == own and not plan.per_caller
    fs = plan.servers["filesystem"]
    assert fs.cwd == own
    assert fs.profile is not None
    assert set(fs.profile.writable) == {own, str(user.root / "shared" / "auth0%7C%42ob")}
    write = {"content": "x"}
    decided, _ = plan.engine.decide("filesystem", "write_file", {**write, "path": f"{own}/a"})
    assert decided.decision == "allow"
    other = str(user.root / "w" / "alice" / "a")  # another caller's workspace
    decided, _ = plan.engine.decide("filesystem", "write_file", {**write, "path": other})
    assert decided.decision != "allow"


def test_a_plan_for_every_caller_is_planned_again_for_each(user: Home) -> None:
    every = plan_session(
        RunOptions(
            config=str(_config(user.root / "c.json", _fs(user.root / "shared"))),
            workspace=f"{user.root}/w/${{caller}}",
            display_only=True,
        )
    )
    assert every.workspace == f"{user.root}/w/${{caller}}"
    base = SessionPlan(**{**vars(every), "per_caller": True})
    bob = plan_for_caller(base, Caller("bob", frozenset()))
    alice = plan_for_caller(base, Caller("Alice", frozenset()))
    assert (bob.workspace, alice.workspace) == (f"{user.root}/w/bob", f"{user.root}/w/%41lice")
    assert bob.session_id == alice.session_id == every.session_id
    assert bob.policy is every.policy
    assert bob.servers["filesystem"].cwd == bob.workspace


def test_a_link_in_the_place_of_a_callers_directory_is_refused(user: Home) -> None:
    """A link where mallory's allowWrite directory goes, to bob's: mallory's plan is
    refused, naming the config value; bob's is not."""
    shared = user.root / "shared"
    (shared / "bob").mkdir(parents=True)
    (shared / "mallory").symlink_to(shared / "bob")
    config = _config(user.root / "c.json", _fs(shared))
    every = plan_session(
        RunOptions(config=str(config), workspace=f"{user.root}/w/${{caller}}", display_only=True)
    )
    base = SessionPlan(**{**vars(every), "per_caller": True})
    with pytest.raises(ConfigError) as refused:
        plan_for_caller(base, Caller("mallory", frozenset()))
    assert refused.value.location == "$.mcpServers.filesystem.sandbox.filesystem.allowWrite[0]"
    assert "leads elsewhere through a symbolic link" in str(refused.value)
    bob = plan_for_caller(base, Caller("bob", frozenset()))
    assert bob.servers["filesystem"].profile is not None
    assert str(shared / "bob") in bob.servers["filesystem"].profile.writable


@needs_bwrap  # planned as to run: the sandbox is probed
def test_listing_the_tools_plans_as_for_every_caller(user: Home) -> None:
    """``annotate-tools`` and ``compile-policy`` have no caller: they plan with ``${caller}``
    as it is (nothing per caller), rather than refuse the config."""
    config = _config(user.root / "c.json", _fs(user.root / "shared"))
    plan = plan_session(RunOptions(config=str(config), workspace=str(user.ws()), every_caller=True))
    assert not plan.per_caller
    fs = plan.servers["filesystem"].config
    assert fs.sandbox is not False
    assert fs.sandbox.filesystem.allow_write == [f"{user.root}/shared/${{caller}}"]
