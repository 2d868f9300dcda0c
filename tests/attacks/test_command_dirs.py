"""Where a command lives never exposes the home: a server installed in ``~`` or in
``~/.local/bin`` is shown as its file (or its own directory), never the home, ``~/.local``,
an ancestor of the home, or a directory holding a ``.ssh`` entry."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox_profiles.discover import NeedsHiddenDirectory, program_dirs
from sandbox_profiles.model import Mount
from sandbox_profiles.profile import ProfileRequest, build_profile
from tests.support.cli import ironcurtain
from tests.support.home import Home, make_home
from tests.support.marks import needs_bwrap
from tests.support.paths import IRONCURTAIN, PROBE
from tests.support.probe import run_probe
from tests.support.sdk import connect

# Where the server is installed, relative to the home.
PLACES = {"home": "probe-server", "local-bin": ".local/bin/probe-server"}


def install_probe(user: Home, where: str) -> Path:
    """The hostile probe server as an executable script at ``~/<where>``."""
    path = user.home / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!{sys.executable}\n" + PROBE.read_text())
    path.chmod(0o755)
    (user.home / ".local" / "lib").mkdir(parents=True, exist_ok=True)  # a typical ~/.local
    return path


def _never_shown(user: Home, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    from launcher.plan.server_plan import never_shown

    for key in ("HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME"):
        monkeypatch.setenv(key, user.env[key])
    return never_shown()


def assert_home_hidden(user: Home, mounts: list[Mount]) -> None:
    home = str(user.home)
    for mount in mounts:
        if mount.kind not in ("ro-bind", "ro-bind-try", "bind"):
            continue
        for path in {mount.dest, mount.source or mount.dest}:
            assert path not in (home, f"{home}/.local", f"{home}/.config"), mount
            assert not home.startswith(path.rstrip("/") + "/"), mount  # no ancestor
            assert not os.path.lexists(os.path.join(path, ".ssh")), mount


def _profile(user: Home, command: Path, never_shown: dict[str, str]) -> list[Mount]:
    ws = user.ws()
    request = ProfileRequest(
        name="probe",
        command_path=str(command),
        args=[],
        env={},
        workspace=str(ws),
        runtime_dir=str(user.root / "rt"),
        search_path=["/usr/bin", "/bin"],
        never_shown=never_shown,
    )
    return list(build_profile(request).mounts)


@pytest.mark.parametrize("where", PLACES.values(), ids=PLACES.keys())
def test_the_profile_never_shows_the_home(
    user: Home, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    command = install_probe(user, where)
    mounts = _profile(user, command, _never_shown(user, monkeypatch))
    assert_home_hidden(user, mounts)
    shown = {m.dest for m in mounts}
    assert str(command) in shown or str(command.parent) in shown  # it can still run


def test_a_command_directly_in_the_home_is_shown_alone(
    user: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    command = install_probe(user, "probe-server")
    (mount,) = [
        m
        for m in _profile(user, command, _never_shown(user, monkeypatch))
        if m.dest == str(command)
    ]
    assert mount.kind == "ro-bind" and "its directory is never shown (your home)" in mount.reason


def test_a_link_in_the_home_is_recreated_and_its_target_shown(
    user: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = install_probe(user, ".local/share/probe/bin/probe-server")
    link = user.home / "probe-server"
    link.symlink_to(real)
    mounts = _profile(user, link, _never_shown(user, monkeypatch))
    assert_home_hidden(user, mounts)
    assert Mount("symlink", str(link), str(real)) in [
        Mount(m.kind, m.dest, m.source) for m in mounts
    ]
    assert str(real.parent) in {m.dest for m in mounts if m.kind == "ro-bind"}


def test_a_home_with_ssh_is_hidden_even_when_the_launcher_names_nothing(user: Home) -> None:
    command = install_probe(user, "probe-server")
    dirs = [d for d, _ in program_dirs(str(command), [])]
    assert str(command) in dirs and str(user.home) not in dirs


def test_a_directory_holding_ssh_is_never_shown(tmp_path: Path) -> None:
    tool = tmp_path / "opt" / "bin" / "tool"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    (tool.parent / ".ssh").mkdir()
    assert program_dirs(str(tool), []) == [
        (
            str(tool),
            f"the command, alone: its directory is never shown (it holds {tool.parent}/.ssh)",
        )
    ]


def test_a_program_guess_in_local_is_left_out_but_an_interpreter_is_refused(
    user: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    hidden = _never_shown(user, monkeypatch)
    local_bin = user.home / ".local" / "bin"
    local_bin.mkdir(parents=True)
    (user.home / ".local" / "lib").mkdir()
    binary = local_bin / "some-server"
    shutil.copy("/usr/bin/true", binary)  # no shebang: its "installation prefix" is a guess
    assert program_dirs(str(binary), [], 0, hidden) == [
        (str(local_bin), f"holds the command {binary}")
    ]
    python = local_bin / "python3"
    shutil.copy("/usr/bin/true", python)  # an interpreter needs its prefix: ~/.local
    with pytest.raises(NeedsHiddenDirectory, match=r"\.local \(installation prefix of python3\)"):
        program_dirs(str(python), [], 0, hidden)


def _config(user: Home, name: str, server: dict[str, object]) -> Path:
    path = user.root / f"{name}.json"
    path.write_text(json.dumps({"mcpServers": {name: server}}))
    return path


@pytest.mark.parametrize("where", PLACES.values(), ids=PLACES.keys())
def test_ironcurtain_profile_never_shows_the_home(user: Home, where: str) -> None:
    command = install_probe(user, where)
    config = _config(user, "probe", {"command": str(command)})
    done = ironcurtain(
        user,
        "profile",
        "probe",
        "--format",
        "json",
        "--config",
        str(config),
        "--workspace",
        str(user.ws()),
    )
    assert done.returncode == 0, done.stderr
    mounts = [
        Mount(m["kind"], m["dest"], m.get("source", m["dest"]), m["reason"])
        for m in json.loads(done.stdout)["mounts"]
    ]
    assert_home_hidden(user, mounts)


@needs_bwrap  # refused while planning the sandbox
def test_a_command_that_needs_the_home_is_a_config_error(user: Home) -> None:
    # Its interpreter is installed with the home as its prefix (~/bin/python3, ~/lib).
    python = user.home / "bin" / "python3"
    python.parent.mkdir()
    (user.home / "lib").mkdir()
    shutil.copy("/usr/bin/true", python)
    server = user.root / "tools" / "server"
    server.parent.mkdir()
    server.write_text(f"#!{python}\n")
    server.chmod(0o755)
    config = _config(user, "x", {"command": str(server)})
    for args in (["run"], ["profile", "x"]):
        done = ironcurtain(user, *args, "--config", str(config))
        assert done.returncode == 2, done.stderr
        message = done.stderr.strip()
        assert len(message.splitlines()) == 1 and "Traceback" not in message
        assert f"{config}: $.mcpServers.x.command: " in message
        assert f"{server}: its interpreter {python} cannot run without {user.home} (" in message
        assert "never shown to a server (your home)" in message
        assert "virtualenv" in message and "pipx" in message
    assert not user.left_behind()  # nothing started


def _read_key(user: Home, command: Path, sandbox: dict[str, object]) -> list[str]:
    server = {
        "command": str(command),
        "env": {"PROBE_LOG": "/tmp/probe-calls.jsonl"},  # the sandbox's private /tmp
        "sandbox": sandbox,
    }
    calls = [
        ("read_path", {"path": str(user.home / ".ssh" / "id_rsa")}),
        ("list_dir", {"path": str(user.home)}),
    ]
    return [text for _, text in run_probe(user, user.ws(), server, lambda: calls)]


@needs_bwrap
@pytest.mark.parametrize("where", PLACES.values(), ids=PLACES.keys())
def test_a_server_installed_in_the_home_cannot_read_the_ssh_key(tmp_path: Path, where: str) -> None:
    user = make_home(tmp_path)
    command = install_probe(user, where)
    key, listing = _read_key(user, command, {})
    assert user.secret not in key and key.startswith("READ FAILED"), key
    assert ".ssh" not in listing
    # The same server with the home shown (what binding the command's directory did): the
    # probe really tries, and it is the hidden home that stops it.
    key, listing = _read_key(user, command, {"filesystem": {"allowRead": [str(user.home)]}})
    assert user.secret in key and ".ssh" in listing


@needs_bwrap
def test_a_server_installed_in_the_home_runs(user: Home) -> None:
    import asyncio

    command = install_probe(user, "probe-server")
    config = _config(user, "probe", {"command": str(command)})

    async def scenario() -> None:
        async with connect(user, "--config", str(config), "--workspace", str(user.ws())) as s:
            names = {t.name for t in (await s.list_tools()).tools}
            assert "probe__read_path" in names

    asyncio.run(scenario())


def test_a_command_where_sessions_keep_their_sockets_is_shown_alone(user: Home) -> None:
    # A command living directly in the directory that holds every session's runtime
    # directory ($XDG_RUNTIME_DIR, /tmp): showing its directory would show the sessions'
    # approvals and egress sockets, which connect on a read-only mount.
    runtime = user.root / "run-user"
    runtime.mkdir(mode=0o700)
    command = runtime / "probe-server"
    command.write_text(f"#!{sys.executable}\n" + PROBE.read_text())
    command.chmod(0o755)
    config = _config(user, "probe", {"command": str(command)})
    env = {**user.env, "XDG_RUNTIME_DIR": str(runtime)}
    done = subprocess.run(
        [IRONCURTAIN, "profile", "probe", "--format", "json", "--config", str(config)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    mounts = json.loads(done.stdout)["mounts"]
    shown = {m.get("source", m["dest"]) for m in mounts if "bind" in m["kind"]}
    assert str(command) in shown
    holding = [p for p in shown if p == str(runtime) or str(runtime).startswith(p + "/")]
    assert holding == [], holding
