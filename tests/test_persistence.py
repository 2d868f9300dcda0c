"""Nothing a sandbox writes runs on the host later.

Each attack plants something a host tool loads or runs (git configs that run a program,
shell and editor files, AI-client configs...) in the workspace, the way a hostile server or
an agent with only allowed calls could. After the session the test does what the user
would: ``git status`` in every planted repository, with the user's own git, and looks for
the files host tools would load. Sandboxed, nothing runs and nothing is left; with the
sandbox off (``sandbox: false``: no guard), the same attacks do run, so no test passes
because an attack was broken.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import launcher
from sandbox_profiles import autorun
from tests.support.cli import run_args
from tests.support.home import Home, make_home
from tests.support.marks import needs_bwrap
from tests.support.paths import IRONCURTAIN
from tests.support.probe import probe_server_config, run_probe, write_raw_policy
from tests.support.sdk import call, connect

pytestmark = needs_bwrap

DEEP = "/".join(["d" * 60] * 40)  # a quarantine name built from this is far over 255 bytes
Op = list[str]


@dataclass(frozen=True)
class GitAttack:
    """A repository planted so that host git runs ``touch <marker>``; ``where`` is the
    directory the user would run git in."""

    id: str
    where: str
    ops: Callable[[str, str], list[Op]]  # marker, workspace -> filesystem operations


def _fsmonitor(marker: str, extra: str = "") -> str:
    head = "[core]\n\trepositoryformatversion = 0\n"
    return f'{head}{extra}\tfsmonitor = "touch {marker}; true"\n'


def _git_dir(rel: str, config: str) -> list[Op]:
    """A git directory made by hand, its config written before it looks like one."""
    return [
        ["write", f"{rel}/config", config],
        ["mkdir", f"{rel}/objects"],
        ["mkdir", f"{rel}/refs"],
        ["write", f"{rel}/HEAD", "ref: refs/heads/main\n"],
    ]


GIT_ATTACKS = [
    GitAttack("deep-git-config", DEEP, lambda m, w: _git_dir(f"{DEEP}/.git", _fsmonitor(m))),
    GitAttack(
        "gitdir-file",
        "proj",
        lambda m, w: [
            ["write", "proj/.git", "gitdir: ../store\n"],
            *_git_dir("store", _fsmonitor(m)),
        ],
    ),
    GitAttack(
        "bare-repository",
        "bare",
        lambda m, w: _git_dir("bare", _fsmonitor(m, f"\tbare = false\n\tworktree = {w}\n")),
    ),
    GitAttack(
        "commondir",
        "mine",  # the user's own repository, made before the session
        lambda m, w: [
            ["write", "common/config", _fsmonitor(m)],
            ["mkdir", "common/objects"],
            ["mkdir", "common/refs"],
            ["write", "mine/.git/commondir", "../../common\n"],
        ],
    ),
    GitAttack(
        "read-only-git-dir",
        "ro",
        lambda m, w: [
            *_git_dir("staging/.git", _fsmonitor(m)),
            ["rename", "staging/.git", "ro/.git"],
            ["chmod", "ro/.git", "555"],
        ],
    ),
    GitAttack(
        "global-include",
        "work",  # the user's ~/.gitconfig includes a file of the workspace
        lambda m, w: [["write", "shared.gitconfig", _fsmonitor(m)]],
    ),
]

# Every name of the catalogue, planted new at some depth.
NAMES = [*autorun.PROTECTED_NAMES, *(s.replace("*", "x") for s in autorun.PROTECTED_SUFFIXES)]


def _name_ops() -> list[Op]:
    return [["write", f"cat/{i}/{name}", "evil\n"] for i, name in enumerate(NAMES)]


def _host_git(ws: Path, where: str, home: Path) -> None:
    """What the user does afterwards: git in the directory, as themselves. safe.directory
    stands for a user who owns the files (as root the sandbox's files belong to nobody)."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    for args in (["status"], ["log", "-1"], ["diff"]):
        subprocess.run(
            ["git", *args], cwd=ws / where, env=env, capture_output=True, timeout=30, check=False
        )


def _world(base: Path) -> tuple[Home, Path, Path]:
    user = make_home(base)
    ws = user.ws("ws")
    for repo in ("mine", "work"):  # the user's own repositories
        subprocess.run(["git", "init", "-q", str(ws / repo)], check=True)
    (ws / "ro").mkdir()
    # The user's own git configuration includes a file the workspace may hold one day.
    (user.home / ".gitconfig").write_text(
        f"[safe]\n\tdirectory = *\n[include]\n\tpath = {ws}/shared.gitconfig\n"
    )
    # The user's own virtualenv; a repository whose hooks live in the tree (relative
    # core.hooksPath); one whose hook is a link to a script of the tree.
    (ws / "venv" / "pyvenv.cfg").parent.mkdir()
    (ws / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    subprocess.run(["git", "init", "-q", str(ws / "work2")], check=True)
    subprocess.run(["git", "-C", str(ws / "work2"), "config", "core.hooksPath", ".githooks"])
    subprocess.run(["git", "init", "-q", str(ws / "sl")], check=True)
    (ws / "sl" / ".git" / "hooks" / "pre-commit").symlink_to("../../scripts/pre-commit")
    for rel in CONTENT.values():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text("# the user's\n")
    if os.geteuid() == 0:  # servers then run as the workspace's owner: make it nobody
        subprocess.run(["chown", "-R", "65534:65534", str(ws)], check=True)
    markers = base / "markers"
    markers.mkdir()
    markers.chmod(0o777)
    return user, ws, markers


# Files of the user's that host tools run, which a server tries to rewrite: id -> path.
CONTENT = {
    "venv-activate": "venv/bin/activate",
    "venv-site-packages": "venv/lib/python3/site-packages/_distutils_hack/__init__.py",
    "relative-hooks-path": "work2/.githooks/post-checkout",
    "linked-hook": "sl/scripts/pre-commit",
}


def _ran(ws: Path, user: Home, markers: Path) -> dict[str, bool]:
    for attack in GIT_ATTACKS:
        if (ws / attack.where).is_dir():
            _host_git(ws, attack.where, user.home)
    return {a.id: (markers / a.id).exists() for a in GIT_ATTACKS}


def _left(ws: Path) -> list[str]:
    return [name for i, name in enumerate(NAMES) if os.path.lexists(ws / "cat" / str(i) / name)]


def _hostile(base: Path, sandboxed: bool) -> tuple[dict[str, bool], list[str], list[str]]:
    user, ws, markers = _world(base)
    calls = [
        ("fs_ops", {"base": str(ws), "ops": attack.ops(str(markers / attack.id), str(ws))})
        for attack in GIT_ATTACKS
    ]
    calls.append(("fs_ops", {"base": str(ws), "ops": _name_ops()}))
    calls += [
        ("fs_ops", {"base": str(ws), "ops": [["write", rel, "evil"]]}) for rel in CONTENT.values()
    ]
    answers = run_probe(user, ws, probe_server_config(sandboxed), lambda: calls)
    ran = _ran(ws, user, markers)
    ran.update({key: (ws / rel).read_text() == "evil" for key, rel in CONTENT.items()})
    return ran, _left(ws), [text for _, text in answers]


def _planted_at_start(base: Path, sandboxed: bool) -> tuple[dict[str, bool], list[str]]:
    """A server that plants every attack and catalogue name the moment it starts: before
    it is spoken to, while the session is still loading (servers start before it has)."""
    user, ws, markers = _world(base)
    ops = [attack.ops(str(markers / attack.id), str(ws)) for attack in GIT_ATTACKS]
    server = probe_server_config(sandboxed)
    server["env"]["PROBE_START_OPS"] = json.dumps({"base": str(ws), "ops": [*ops, _name_ops()]})
    run_probe(user, ws, server, lambda: [])
    return _ran(ws, user, markers), _left(ws)


def test_what_a_server_plants_as_it_starts_host_git_does_not_run(tmp_path: Path) -> None:
    ran, left = _planted_at_start(tmp_path, sandboxed=True)
    assert not any(ran.values()), ran
    assert left == []


def test_what_a_server_plants_as_it_starts_runs_without_the_sandbox(tmp_path: Path) -> None:
    ran, left = _planted_at_start(tmp_path, sandboxed=False)
    assert all(ran.values()), ran
    assert left == NAMES


@pytest.fixture(scope="module")
def hostile_sandboxed(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    return _hostile(tmp_path_factory.mktemp("boxed"), sandboxed=True)


@pytest.fixture(scope="module")
def hostile_bare(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    return _hostile(tmp_path_factory.mktemp("bare"), sandboxed=False)


HOSTILE = [*(a.id for a in GIT_ATTACKS), *CONTENT]


@pytest.mark.parametrize("attack", HOSTILE)
def test_a_hostile_server_plants_nothing_host_git_runs(
    attack: str, hostile_sandboxed: tuple
) -> None:
    ran, _, answers = hostile_sandboxed
    assert not ran[attack], answers


@pytest.mark.parametrize("attack", HOSTILE)
def test_without_the_sandbox_host_git_runs_it(attack: str, hostile_bare: tuple) -> None:
    ran, _, answers = hostile_bare
    assert ran[attack], answers


def test_no_catalogue_name_survives_the_session(hostile_sandboxed: tuple) -> None:
    _, left, answers = hostile_sandboxed
    assert left == [], answers


def test_without_the_sandbox_every_catalogue_name_is_left(hostile_bare: tuple) -> None:
    _, left, _ = hostile_bare
    assert left == NAMES


def test_holding_every_proxy_connection_does_not_switch_the_guard_off(tmp_path: Path) -> None:
    """A networked server floods its egress proxy so the trusted process has no descriptor
    left for the guard, then plants a repository: it is still neutralised."""
    user, ws, markers = _world(tmp_path)
    server = probe_server_config(True)
    server["sandbox"]["network"] = {"allowedDomains": ["example.invalid"]}
    attack = GIT_ATTACKS[0]
    calls = [
        ("hold_connections", {"path": "/run/ironcurtain/egress.sock", "count": 1500}),
        ("fs_ops", {"base": str(ws), "ops": attack.ops(str(markers / attack.id), str(ws))}),
    ]
    # The launcher gets few descriptors, as on a machine with a low limit.
    out = run_probe(user, ws, server, lambda: calls, prefix=["prlimit", "--nofile=256:256"])
    assert out[0][1].startswith("OK"), out
    assert not _ran(ws, user, markers)[attack.id], out


# -- the agent, through allowed calls of the bundled servers -------------------------------


def _agent_calls(ws: Path, markers: Path) -> list[tuple[str, dict[str, Any]]]:
    """The git attacks as filesystem and git tool calls the bundled policy allows."""
    calls: list[tuple[str, dict[str, Any]]] = []
    for attack in GIT_ATTACKS:
        if attack.id == "read-only-git-dir":
            continue  # the filesystem server has no chmod
        for op in attack.ops(str(markers / attack.id), str(ws)):
            path = str(ws / op[1])
            if op[0] == "mkdir":
                calls.append(("filesystem__create_directory", {"path": path}))
            else:
                parent = os.path.dirname(path)
                calls.append(("filesystem__create_directory", {"path": parent}))
                calls.append(("filesystem__write_file", {"path": path, "content": op[2]}))
    # Legitimate work goes on in the user's repository: a commit, a branch, a checkout.
    calls += [
        ("filesystem__write_file", {"path": str(ws / "work" / "notes.md"), "content": "hi\n"}),
        ("git__git_add", {"repo_path": str(ws / "work"), "files": [str(ws / "work" / "notes.md")]}),
        ("git__git_commit", {"repo_path": str(ws / "work"), "message": "notes"}),
        ("git__git_create_branch", {"repo_path": str(ws / "work"), "branch_name": "topic"}),
        ("git__git_checkout", {"repo_path": str(ws / "work"), "branch_name": "topic"}),
        ("git__git_log", {"repo_path": str(ws / "work")}),
    ]
    return calls


def _agent(base: Path, sandboxed: bool) -> tuple[dict[str, bool], list[tuple[bool, str]]]:
    user, ws, markers = _world(base)
    bundled = json.loads(
        (Path(launcher.__file__).parent / "defaults" / "mcp-servers.json").read_text()
    )
    servers = {n: bundled["mcpServers"][n] for n in ("filesystem", "git")}
    if not sandboxed:
        for server in servers.values():
            server["sandbox"] = False
    config = user.root / "agent.json"
    config.write_text(json.dumps({"mcpServers": servers}))
    out: list[tuple[bool, str]] = []

    async def scenario() -> None:
        async with connect(user, "--config", str(config), "--workspace", str(ws)) as session:
            for tool, args in _agent_calls(ws, markers):
                out.append(await call(session, tool, args))

    asyncio.run(scenario())
    ran = {k: v for k, v in _ran(ws, user, markers).items() if k != "read-only-git-dir"}
    return ran, out


def test_the_agent_plants_nothing_host_git_runs_and_git_work_goes_on(tmp_path: Path) -> None:
    ran, out = _agent(tmp_path, sandboxed=True)
    assert not any(ran.values()), (ran, out)
    assert all(not error for error, _ in out), out  # every call allowed, the work done
    assert "notes" in out[-1][1]


def test_the_agents_attacks_run_without_the_sandbox(tmp_path: Path) -> None:
    ran, out = _agent(tmp_path, sandboxed=False)
    assert all(ran.values()), (ran, out)


def test_scan_finds_and_fixes_what_was_planted(tmp_path: Path) -> None:
    user, ws, markers = _world(tmp_path)
    (ws / "bare").mkdir()
    for kind, rel, *rest in _git_dir("bare", _fsmonitor(str(markers / "scan"))):
        if kind == "mkdir":
            (ws / rel).mkdir()
        else:
            (ws / rel).write_text(rest[0])
    (ws / "deep" / "x").mkdir(parents=True)
    (ws / "deep" / "x" / ".envrc").write_text("evil")
    env = {**user.env}
    found = subprocess.run(
        [IRONCURTAIN, "scan", str(ws)], capture_output=True, text=True, env=env, check=False
    )
    assert found.returncode == 1
    assert f"{ws}/bare/config" in found.stdout and "core.fsmonitor" in found.stdout
    assert f"{ws}/deep/x/.envrc" in found.stdout
    fixed = subprocess.run(
        [IRONCURTAIN, "scan", "--fix", str(ws)], capture_output=True, text=True, env=env
    )
    assert fixed.returncode == 0, fixed.stdout
    assert not (ws / "bare" / "config").exists() and not (ws / "deep" / "x" / ".envrc").exists()
    again = subprocess.run([IRONCURTAIN, "scan", str(ws)], capture_output=True, text=True, env=env)
    assert again.returncode == 0 and "0 files" in again.stdout


def test_every_catalogue_entry_is_documented_and_tested() -> None:
    top = Path(launcher.__file__).parent.parent
    docs = (top / "docs" / "containment.md").read_text()
    table = subprocess.run(
        [sys.executable, str(top / "scripts" / "catalogue_table.py")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert table in docs, "docs/containment.md: run scripts/catalogue_table.py for the table"
    for entry in autorun.CATALOGUE:
        for test in entry.test.split(", "):
            assert test == "name" or test in HOSTILE, (entry.match, test)


def test_what_the_guard_cannot_follow_stops_the_server_that_can_write_there(
    tmp_path: Path,
) -> None:
    """A tree deeper than the guard follows: the server that can write there is stopped and
    its call answered with an error, the event audited; a server that cannot write there
    goes on; the end-of-session sweep still leaves nothing host git would run."""
    user, ws, markers = _world(tmp_path)
    bundled = json.loads(
        (Path(launcher.__file__).parent / "defaults" / "mcp-servers.json").read_text()
    )
    config = user.root / "probe.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "probe": probe_server_config(True),
                    "time": bundled["mcpServers"]["time"],
                }
            }
        )
    )
    policy = write_raw_policy(user.root / "policy")
    # The raw policy knows only the probe; the bundled annotations and rule for time.
    bundled_policy = Path(launcher.__file__).parent.parent / "policy" / "defaults"
    annotations = json.loads((policy / "tool-annotations.json").read_text())
    time_annotations = json.loads((bundled_policy / "tool-annotations.json").read_text())
    annotations["servers"]["time"] = time_annotations["servers"]["time"]
    (policy / "tool-annotations.json").write_text(json.dumps(annotations))
    deep = "/".join(["x"] * 405)
    ops = _git_dir(f"{deep}/.git", _fsmonitor(str(markers / "deep")))
    audit = user.root / "audit.jsonl"
    out: list[tuple[bool, str]] = []

    async def scenario() -> None:
        async with connect(user, *run_args(config, policy, ws, audit)) as session:
            out.append(await call(session, "probe__fs_ops", {"base": str(ws), "ops": ops}))
            out.append(await call(session, "probe__identity", {}))
            out.append(await call(session, "time__get_current_time", {"timezone": "UTC"}))

    asyncio.run(scenario())
    (error, text), (error2, text2), (error3, text3) = out
    assert error and "was stopped: the guard could not neutralise" in text, text
    assert "deeper than 400 levels" in text
    assert error2 and "was stopped" in text2
    assert not error3 and "UTC" in text3, text3  # the server that cannot write goes on
    events = [json.loads(line) for line in audit.read_text().splitlines()]
    failures = [e for e in events if e.get("event") == "guard-failure"]
    assert failures and failures[0]["stopped"] == ["probe"]
    _host_git(ws, deep, user.home)
    assert not (markers / "deep").exists()
