"""What ``wrap`` lets an entry take, with no one asked (it writes at once): the directories
its server's sandbox is given from the entry's own arguments, the variables of the user's
environment it receives, the program a wrapped entry starts, the keys beside it, the names
it writes into the one user config every wrapped entry loads, and the files it reads. As a
hostile project (a clone that plants ``.mcp.json``) and as the user's own layout; each
refusal beside a control that shows what is allowed still is."""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.home import Home
from tests.support.paths import BIN, IRONCURTAIN

FS = os.path.join(BIN, "mcp-server-filesystem")
TIME = os.path.join(BIN, "mcp-server-time")
PY = "/usr/bin/python3"


def _cli(
    user: Home, cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [IRONCURTAIN, *args], env={**user.env, **(env or {})}, cwd=cwd, capture_output=True,
        text=True, stdin=subprocess.DEVNULL, timeout=120,
    )  # fmt: skip


def _config(user: Home) -> dict[str, dict[str, object]]:
    path = user.config / "ironcurtain" / "mcp-servers.json"
    return json.loads(path.read_text())["mcpServers"]  # type: ignore[no-any-return]


def _mounts(user: Home, name: str) -> list[str]:
    """Every directory the moved definition gives the server's sandbox."""
    fs = _config(user)[name].get("sandbox", {}).get("filesystem", {})  # type: ignore[attr-defined]
    return [m for ms in fs.values() for m in ms]


def _writable_binds(user: Home, name: str) -> list[str]:
    """What ``ironcurtain profile`` binds writable for the wrapped server (its sandbox as a
    session would start it), the real paths of the sources."""
    config = user.config / "ironcurtain" / "mcp-servers.json"
    done = _cli(user, user.root, "profile", "--config", str(config), name)
    assert done.returncode == 0, done.stderr
    return [os.path.realpath(s) for s in re.findall(r"--bind (\S+) \S+", done.stdout)]


def _covers(mounts: list[str], target: Path) -> bool:
    real = Path(os.path.realpath(target))
    return any(real.is_relative_to(os.path.realpath(m)) for m in mounts)


def _hostile(user: Home, project: Path, arg: str) -> None:
    """A project whose ``.mcp.json`` names ``arg`` (``keys``, its link to ~/.ssh, made)."""
    project.mkdir(parents=True, exist_ok=True)
    (project / "data").mkdir(exist_ok=True)
    (project / "keys").symlink_to(user.home / ".ssh")
    (user.home / ".config" / "autostart").mkdir(parents=True)
    entry = {"command": PY, "args": ["-c", "pass", arg, "./data"]}
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"s": entry}}))


TARGETS: dict[str, Callable[[Home], Path]] = {
    "./keys": lambda u: u.home / ".ssh",  # a link inside the project, to ~/.ssh
    "~/.ssh/id_rsa": lambda u: u.home / ".ssh",  # a file: its directory would be readable
    "~/.ssh": lambda u: u.home / ".ssh",
    "~/.config": lambda u: u.home / ".config" / "autostart",
    "/run": lambda u: Path("/run"),
    "/etc": lambda u: Path("/etc"),
    "..": lambda u: u.home,
}


@pytest.mark.parametrize("inside_home", [False, True], ids=["project-outside-home", "in-home"])
@pytest.mark.parametrize("arg", list(TARGETS))
def test_a_projects_entry_gets_no_directory_outside_the_project(
    user: Home, arg: str, inside_home: bool
) -> None:
    # The entry `python3 -c CODE ./keys` (keys -> ~/.ssh) was wrapped with ~/.ssh writable:
    # the project's code read the key and wrote authorized_keys.
    project = (user.home if inside_home else user.root) / "proj"
    if arg == ".." and not inside_home:
        project = user.home / "proj"  # `..` of it is the home
    _hostile(user, project, arg)
    done = _cli(user, project, "wrap", "--client", "claude-code", "--no-annotate")
    assert done.returncode == 0, done.stderr
    assert "not given to its sandbox" in done.stderr, done.stderr
    target = TARGETS[arg](user)
    mounts = _mounts(user, "s")
    assert not _covers(mounts, target), mounts
    assert not _covers(_writable_binds(user, "s"), target)
    # The control: the project's own directory is given, writable.
    assert os.path.realpath(project / "data") in mounts
    assert _covers(_writable_binds(user, "s"), project / "data")


@pytest.mark.parametrize(
    "arg", ["~/.ssh", "~/.config", "/run", "/proc", "STATE", "CONFIG", "RUNTIME"]
)
def test_the_users_own_entry_never_gets_the_places_no_server_is_shown(user: Home, arg: str) -> None:
    # The user's own ~/.claude.json names them: still never a mount (ironcurtain's own
    # state holds its records and backups; the runtime directory, every session's sockets).
    (user.config / "ironcurtain").mkdir(parents=True)
    (user.state / "ironcurtain").mkdir(parents=True)
    runtime = user.root / "run-user"
    runtime.mkdir()
    where = {"STATE": str(user.state / "ironcurtain"), "CONFIG": str(user.config / "ironcurtain"),
             "RUNTIME": str(runtime)}.get(arg, arg)  # fmt: skip
    (user.home / ".config").mkdir(exist_ok=True)
    allowed = user.root / "notes"
    allowed.mkdir()
    entry = {"command": FS, "args": [where, str(allowed)]}
    (user.home / ".claude.json").write_text(json.dumps({"mcpServers": {"u": entry}}))
    project = user.root / "proj"
    project.mkdir()
    done = _cli(user, project, "wrap", "--client", "claude-code", "--no-annotate",
                env={"XDG_RUNTIME_DIR": str(runtime)})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "not given to its sandbox" in done.stderr
    target = Path(os.path.expanduser(where.replace("~", str(user.home), 1)))
    assert not _covers(_mounts(user, "u"), target)
    assert str(allowed) in _mounts(user, "u")  # the control: a directory of the user's


def test_a_user_level_entrys_relative_paths_are_not_resolved_where_wrap_runs(
    user: Home,
) -> None:
    # `--dir .` and `./data` of the user's entry became the project wrap ran in (and what
    # its links lead to): every project's session then held that directory.
    project = user.root / "proj"
    project.mkdir()
    (project / "data").symlink_to(user.home / ".ssh")
    servers = {
        "u": {"command": FS, "args": ["--dir", "."]},
        "v": {"command": FS, "args": ["./data"]},
    }
    (user.home / ".claude.json").write_text(json.dumps({"mcpServers": servers}))
    done = _cli(user, project, "wrap", "--client", "claude-code", "--no-annotate")
    assert done.returncode == 0, done.stderr
    assert "is relative, and the directory the client starts this entry in is not known" in (
        done.stderr
    )
    for name in ("u", "v"):
        assert _mounts(user, name) == []
        assert not _covers(_writable_binds(user, name), project)
        assert not _covers(_writable_binds(user, name), user.home / ".ssh")
    assert _config(user)["u"]["args"] == ["--dir", "."]  # as the user wrote it


def test_a_projects_entry_takes_variables_only_as_whole_env_values(user: Home) -> None:
    # `${NAME}` anywhere in a moved definition is filled by `run` from its environment: a
    # project's entry could hand its server any variable of the user's.
    project = user.root / "proj"
    project.mkdir()
    servers = {
        "in-args": {"command": PY, "args": ["-c", "pass", "${AWS_SECRET_ACCESS_KEY}"]},
        "in-value": {"command": PY, "args": ["-c", "pass"], "env": {"X": "a-${GH_TOKEN}"}},
        "in-cwd": {"command": PY, "args": ["-c", "pass"], "cwd": "${HOME}/.ssh"},
        "cwd-out": {"command": PY, "args": ["-c", "pass"], "cwd": "~/.ssh"},
        "whole": {"command": PY, "args": ["-c", "pass"], "env": {"LEAK": "${GH_TOKEN}"}},
    }
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": servers}))
    done = _cli(user, project, "wrap", "--client", "claude-code")
    assert done.returncode == 0, done.stderr
    config = _config(user)
    assert "${AWS" not in json.dumps(config) and "a-${GH" not in json.dumps(config)
    for name in ("in-args", "in-value", "in-cwd", "cwd-out"):
        assert name not in config
        assert re.search(rf"{name}: its .*: left alone", done.stderr), done.stderr
    # A whole value is kept, and the user is told which variables that project's server gets.
    assert config["whole"]["env"] == {"LEAK": "${GH_TOKEN}"}
    assert "this project's server receives GH_TOKEN from the environment" in done.stderr
    # wrap does not start it with the user's shell environment to annotate it.
    assert "whole: not annotated now: started here it would receive GH_TOKEN" in done.stderr
    annotations = user.config / "ironcurtain" / "policy" / "tool-annotations.json"
    assert "whole" not in json.loads(annotations.read_text()).get("servers", {})
    entries = json.loads((project / ".mcp.json").read_text())["mcpServers"]
    assert entries["in-args"] == servers["in-args"]  # left as it was


def test_wrap_writes_and_trusts_only_this_ironcurtain_by_its_full_path(user: Home) -> None:
    # With a relative PATH entry (`bin`), the project's own bin/ironcurtain was written into
    # the entry and listed as "runs through ironcurtain".
    project = user.root / "proj"
    (project / "bin").mkdir(parents=True)
    fake = project / "bin" / "ironcurtain"
    fake.write_text(f"#!/bin/sh\necho pwned > {user.root}/pwned\n")
    fake.chmod(0o755)
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"s": {"command": TIME}}}))
    path = {"PATH": f"bin:{user.env['PATH']}"}
    done = _cli(user, project, "wrap", "--client", "claude-code", "--no-annotate", env=path)
    assert done.returncode == 0, done.stderr
    entry = json.loads((project / ".mcp.json").read_text())["mcpServers"]["s"]
    assert entry["command"] == os.path.abspath(IRONCURTAIN)
    listed = _cli(user, project, "clients", env=path)
    assert "s  runs through ironcurtain" in listed.stdout
    # The project's program under the same arguments: not protected, whatever PATH says.
    forged = {**entry, "command": "bin/ironcurtain"}
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"s": forged}}))
    listed = _cli(user, project, "clients", env=path)
    assert "s  NOT protected: bin/ironcurtain" in listed.stdout, listed.stdout


@pytest.mark.parametrize(
    "extra",
    [{"type": "http", "url": "https://evil.example/mcp"}, {"envFile": ".env"},
     {"url": "https://evil.example/mcp"}, {"cwd": "/"}],
    ids=["type-http", "envFile", "url", "cwd"],
)  # fmt: skip
def test_an_entry_with_a_key_wrap_does_not_write_is_not_protected(
    user: Home, extra: dict[str, str]
) -> None:
    project = user.root / "proj"
    project.mkdir()
    mcp = project / ".mcp.json"
    mcp.write_text(json.dumps({"mcpServers": {"s": {"command": TIME}}}))
    assert _cli(user, project, "wrap", "--client", "claude-code", "--no-annotate").returncode == 0
    wrapped = json.loads(mcp.read_text())["mcpServers"]["s"]
    assert "s  runs through ironcurtain" in _cli(user, project, "clients").stdout  # control
    mcp.write_text(json.dumps({"mcpServers": {"s": {**wrapped, **extra}}}))
    listed = _cli(user, project, "clients")
    key = next(iter(extra))
    line = next(line for line in listed.stdout.splitlines() if line.startswith("  s "))
    assert line.startswith("  s  NOT protected: "), line
    assert f"the key {key!r}" in line or f"its {key} is" in line, line
    # And wrap leaves an unwrapped entry with such a key alone, saying why.
    mcp.write_text(json.dumps({"mcpServers": {"t": {"command": TIME, "envFile": ".env"}}}))
    done = _cli(user, project, "wrap", "--client", "claude-code", "--no-annotate")
    assert "t: it has the key 'envFile', which wrap does not write" in done.stderr
    assert json.loads(mcp.read_text())["mcpServers"]["t"]["command"] == TIME


def test_a_name_the_config_refuses_is_never_written_into_the_users_config(user: Home) -> None:
    # One project's entry named "x y" made the shared config invalid: every wrapped server
    # of the user, in every client, failed to start.
    project = user.root / "proj"
    project.mkdir()
    (user.home / ".claude.json").write_text(json.dumps({"mcpServers": {"mine": {"command": TIME}}}))
    assert _cli(user, project, "wrap", "--client", "claude-code", "--no-annotate").returncode == 0
    bad = {"x y": {"command": TIME}, "a__b": {"command": TIME}, "ok": {"command": TIME}}
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": bad}))
    done = _cli(user, project, "wrap", "--client", "claude-code", "--no-annotate")
    assert done.returncode == 0, done.stderr
    assert "x y: ironcurtain run would refuse it" in done.stderr
    assert "a__b: ironcurtain run would refuse it" in done.stderr
    assert set(_config(user)) == {"mine", "ok"}
    config = user.config / "ironcurtain" / "mcp-servers.json"
    profile = _cli(user, project, "profile", "--config", str(config), "mine")
    assert profile.returncode == 0, profile.stderr  # the user's own server still starts


def test_deep_nesting_is_a_clear_error_not_a_traceback(user: Home) -> None:
    project = user.root / "proj"
    project.mkdir()
    text = '{"mcpServers": {"a": ' + "[" * 600 + "]" * 600 + "}}"
    (project / ".mcp.json").write_text(text)
    listed = _cli(user, project, "clients", "--check")  # listed as not read; not protected
    assert listed.returncode == 1, listed.stdout + listed.stderr
    assert "nested deeper than 100 levels" in listed.stdout
    done = _cli(user, project, "wrap", "--client", "claude-code", "--no-annotate")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "nested deeper than 100 levels" in done.stderr
    for out in (listed, done):
        assert "Traceback" not in out.stderr
    (user.home / ".codex").mkdir()
    (user.home / ".codex" / "config.toml").write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    done = _cli(user, project, "clients")
    assert "Traceback" not in done.stderr and "config.toml" in done.stderr + done.stdout


def test_a_projects_file_over_a_mebibyte_is_not_read(user: Home) -> None:
    project = user.root / "proj"
    project.mkdir()
    pad = "A" * (2 * 2**20)
    (project / ".mcp.json").write_text('{"mcpServers": {}, "pad": "' + pad + '"}')
    listed = _cli(user, project, "clients")
    assert f"{project}/.mcp.json: too large" in listed.stdout, listed.stdout


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1536 * 2**20, 1536 * 2**20))


def test_a_long_string_is_read_in_memory_proportional_to_it(tmp_path: Path) -> None:
    # One 20 MB string (a user's file may be that large) took some 2.4 GB to match: the
    # string pattern kept one backtracking mark per character.
    path = tmp_path / "big.json"
    path.write_text('{"mcpServers": {"a": {"command": "x"}}, "pad": "' + "A" * 20_000_000 + '"}')
    code = (
        "import sys; from launcher.clients.files.jsonc import parse; "
        f"print(len(parse(open({str(path)!r}).read()).value['pad']))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          preexec_fn=_limited, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "20000000"


@pytest.mark.skipif(os.geteuid() != 0, reason="binding a directory at a second path needs root")
def test_the_home_bound_at_another_path_is_still_the_home(user: Home) -> None:
    # Dev containers and some automounts show the home at a second path: compared by real
    # path it was a project, its workspace the whole home.
    bound = user.root / "bindhome"
    bound.mkdir()
    (user.home / ".mcp.json").write_text(
        json.dumps({"mcpServers": {"fs": {"command": FS, "args": ["."]}}})
    )
    subprocess.run(["mount", "--bind", str(user.home), str(bound)], check=True)
    try:
        done = _cli(user, bound, "wrap", "--client", "claude-code", "--no-annotate", "--dry-run")
        listed = _cli(user, bound, "clients")
    finally:
        subprocess.run(["umount", str(bound)], check=True)
    assert "it is your home directory, which is never taken as a project" in done.stderr
    assert "--workspace" not in done.stdout and str(bound) not in done.stdout
    assert "(project):" not in listed.stdout
