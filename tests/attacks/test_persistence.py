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
from tests.support.autorun_attacks import (
    DIRENV_HOME_ATTACK_IDS,
    FAMILY_ATTACK_IDS,
    LEFTHOOK_ATTACK_IDS,
    REVIEW_ATTACK_IDS,
)
from tests.support.bundled import bundled_servers, write_config
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
    GitAttack(
        "moved-include-dir",
        "inc",  # the user's repository includes ../conf/team.gitconfig, which is there
        lambda m, w: [
            ["rename", "inc/conf", "inc/conf.orig"],  # the read-only file goes with it
            ["mkdir", "inc/conf"],
            ["write", "inc/conf/team.gitconfig", _fsmonitor(m)],
        ],
    ),
    GitAttack(
        "moved-link-on-the-way",
        "inc3",  # the same, through the user's link inc3/conf -> ../shared
        lambda m, w: [
            ["rename", "inc3/conf", "inc3/conf.orig"],  # a link: no mount point to pin
            ["mkdir", "inc3/conf"],
            ["write", "inc3/conf/team.gitconfig", _fsmonitor(m)],
        ],
    ),
    GitAttack(
        "include-chain",
        "chain",  # includes ../conf2/team.gitconfig, which includes local.gitconfig
        lambda m, w: [["write", "chain/conf2/local.gitconfig", _fsmonitor(m)]],
    ),
    GitAttack(
        "worktree-config-include",
        "wtc",  # its .git/config.worktree includes ../shared-wt.gitconfig
        lambda m, w: [["write", "wtc/shared-wt.gitconfig", _fsmonitor(m)]],
    ),
    GitAttack(
        "include-through-symlink",
        "opt",  # the user's repository includes ../local/extra.gitconfig, not there yet
        lambda m, w: [
            ["write", "stash/extra.gitconfig", _fsmonitor(m)],
            ["symlink", "opt/local", "../stash"],
        ],
    ),
    GitAttack(
        "include-moved-into-place",
        "opt2",  # the same, the directory made elsewhere and moved into the way
        lambda m, w: [
            ["write", "stage/extra.gitconfig", _fsmonitor(m)],
            ["rename", "stage", "opt2/local"],
        ],
    ),
]

# Every name of the catalogue, planted new at some depth.
NAMES = [
    *autorun.PROTECTED_NAMES,
    *(s.replace("*", "x") for s in (*autorun.PROTECTED_SUFFIXES, *autorun.PROTECTED_PATTERNS)),
]


# A directory on the way to a catalogue entry of several components (".cargo" of
# ".cargo/config.toml"), planted as a link to a directory holding the rest.
LEADING = sorted(
    {n.split("/")[0] for n in (*autorun.PROTECTED_NAMES, *autorun.PROTECTED_PATTERNS) if "/" in n}
    - {".git"}
)
PLANTED = [*NAMES, *(f"{name} (a link)" for name in LEADING)]


def _name_ops() -> list[Op]:
    ops = [["write", f"cat/{i}/{name}", "evil\n"] for i, name in enumerate(NAMES)]
    for i, name in enumerate(LEADING):
        ops += [["mkdir", f"lead/{i}/real"], ["symlink", f"lead/{i}/{name}", "real"]]
    return ops


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
        f'[includeIf "gitdir:{ws}/hl/"]\n\tpath = ~/team/team.gitconfig\n'
    )
    (ws / "dotfiles").mkdir()
    (ws / "dotfiles" / "team.gitconfig").write_text("[color]\n\tui = auto\n")
    (user.home / "team").symlink_to(ws / "dotfiles")  # a dotfiles repository in the tree
    # The user's own virtualenv; a repository whose hooks live in the tree (relative
    # core.hooksPath); one whose hook is a link to a script of the tree.
    (ws / "venv" / "pyvenv.cfg").parent.mkdir()
    (ws / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    subprocess.run(["git", "init", "-q", str(ws / "work2")], check=True)
    subprocess.run(["git", "-C", str(ws / "work2"), "config", "core.hooksPath", ".githooks"])
    subprocess.run(["git", "init", "-q", str(ws / "sl")], check=True)
    (ws / "sl" / ".git" / "hooks" / "pre-commit").symlink_to("../../scripts/pre-commit")
    # Repositories whose configuration includes a file of the tree: there, or not yet.
    for repo, included in (
        ("inc", "../conf/team.gitconfig"),
        ("inc3", "../conf/team.gitconfig"),
        ("inc4", "../conf/team.gitconfig"),
        ("chain", "../conf2/team.gitconfig"),
        ("opt", "../local/extra.gitconfig"),
        ("opt2", "../local/extra.gitconfig"),
    ):
        subprocess.run(["git", "init", "-q", str(ws / repo)], check=True)
        subprocess.run(["git", "-C", str(ws / repo), "config", "include.path", included])
    (ws / "inc" / "conf").mkdir()
    (ws / "inc" / "conf" / "team.gitconfig").write_text("[color]\n\tui = auto\n")
    (ws / "shared").mkdir()
    (ws / "shared" / "team.gitconfig").write_text("[color]\n\tui = auto\n")
    (ws / "inc3" / "conf").symlink_to("../shared")
    subprocess.run(["git", "init", "-q", str(ws / "sl2")], check=True)
    (ws / "sl2" / "tools" / "hooks").mkdir(parents=True)
    (ws / "sl2" / "tools" / "hooks" / "pre-commit").write_text("# the user's\n")
    (ws / "sl2" / "hooks").symlink_to("tools/hooks")
    (ws / "sl2" / ".git" / "hooks" / "pre-commit").symlink_to("../../hooks/pre-commit")
    (ws / "chain" / "conf2").mkdir()
    (ws / "chain" / "conf2" / "team.gitconfig").write_text("[include]\n\tpath = local.gitconfig\n")
    subprocess.run(["git", "init", "-q", str(ws / "wtc")], check=True)
    subprocess.run(["git", "-C", str(ws / "wtc"), "config", "extensions.worktreeConfig", "true"])
    subprocess.run(
        [
            "git",
            "-C",
            str(ws / "wtc"),
            "config",
            "--worktree",
            "include.path",
            "../shared-wt.gitconfig",
        ]
    )
    # A repository with a linked worktree; both check out the hooks core.hooksPath names.
    lw = ws / "lw"
    subprocess.run(["git", "init", "-q", str(lw)], check=True)
    (lw / ".githooks").mkdir()
    (lw / ".githooks" / "pre-commit").write_text("# the user's\n")
    git = ["git", "-C", str(lw), "-c", "user.name=u", "-c", "user.email=u@x"]
    subprocess.run([*git, "config", "core.hooksPath", ".githooks"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "hooks"], check=True)
    subprocess.run([*git, "worktree", "add", "-q", str(ws / "lw-wt")], check=True)
    (ws / "inc4" / "shared").mkdir()
    (ws / "inc4" / "shared" / "team.gitconfig").write_text("# the user's\n")
    (ws / "inc4" / "conf").mkdir()
    (ws / "inc4" / "conf" / "team.gitconfig").symlink_to("../shared/team.gitconfig")
    for rel in CONTENT.values():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text("# the user's\n")
    if os.geteuid() == 0:  # servers then run as the workspace's owner: make it nobody
        subprocess.run(["chown", "-R", "65534:65534", str(ws)], check=True)
    markers = base / "markers"
    markers.mkdir()
    markers.chmod(0o777)
    return user, ws, markers


# The way to a file of the user's that host tools run, through a link of the user's,
# replaced: id -> (operations, the file host tools would then load).
LINKED_WAYS = {
    # .git/hooks/pre-commit -> ../../hooks/pre-commit, and hooks -> tools/hooks
    "hook-through-linked-dir": (
        [["rename", "sl2/hooks", "sl2/hooks.orig"], ["mkdir", "sl2/hooks"]],
        "sl2/hooks/pre-commit",
    ),
    # include.path = ../conf/team.gitconfig, itself a link to ../shared/team.gitconfig
    "include-names-a-link": (
        [["rename", "inc4/conf/team.gitconfig", "inc4/conf/old-link"]],
        "inc4/conf/team.gitconfig",
    ),
}

# Files of the user's that host tools run, which a server tries to rewrite: id -> path.
CONTENT = {
    "venv-activate": "venv/bin/activate",
    "venv-site-packages": "venv/lib/python3/site-packages/_distutils_hack/__init__.py",
    "relative-hooks-path": "work2/.githooks/post-checkout",
    "linked-hook": "sl/scripts/pre-commit",
    "linked-worktree-hook": "lw-wt/.githooks/pre-commit",
    # ~/.gitconfig includes ~/team/team.gitconfig, and ~/team links into the tree
    "home-link-include": "dotfiles/team.gitconfig",
}


def _moved_ops(rel: str) -> list[Op]:
    """``rel`` rewritten after the directory holding it is renamed away (the read-only
    mount goes with it) and made again."""
    parent = os.path.dirname(rel)
    return [["rename", parent, f"{parent}.orig"], ["mkdir", parent], ["write", rel, "evil"]]


def _evil(path: Path) -> bool:
    return path.is_file() and not path.is_symlink() and path.read_text() == "evil"


def _ran(ws: Path, user: Home, markers: Path) -> dict[str, bool]:
    for attack in GIT_ATTACKS:
        if (ws / attack.where).is_dir():
            _host_git(ws, attack.where, user.home)
    return {a.id: (markers / a.id).exists() for a in GIT_ATTACKS}


def _left(ws: Path) -> list[str]:
    names = [name for i, name in enumerate(NAMES) if os.path.lexists(ws / "cat" / str(i) / name)]
    links = [
        f"{name} (a link)"
        for i, name in enumerate(LEADING)
        if os.path.lexists(ws / "lead" / str(i) / name)
    ]
    return [*names, *links]


# What host git ran (by attack), the catalogue names left and the probe's answer texts.
Outcome = tuple[dict[str, bool], list[str], list[str]]


def _hostile(base: Path, sandboxed: bool) -> Outcome:
    user, ws, markers = _world(base)
    calls = [
        ("fs_ops", {"base": str(ws), "ops": attack.ops(str(markers / attack.id), str(ws))})
        for attack in GIT_ATTACKS
    ]
    calls.append(("fs_ops", {"base": str(ws), "ops": _name_ops()}))
    calls += [
        ("fs_ops", {"base": str(ws), "ops": [["write", rel, "evil"]]}) for rel in CONTENT.values()
    ]
    moved = [("fs_ops", {"base": str(ws), "ops": _moved_ops(rel)}) for rel in CONTENT.values()]
    moved += [
        ("fs_ops", {"base": str(ws), "ops": [*ops, ["write", rel, "evil"]]})
        for ops, rel in LINKED_WAYS.values()
    ]
    ran: dict[str, bool] = {}

    def rewritten() -> list[tuple[str, dict[str, Any]]]:
        return moved

    answers = run_probe(user, ws, probe_server_config(sandboxed), lambda: calls)
    ran.update({key: _evil(ws / rel) for key, rel in CONTENT.items()})
    answers += run_probe(user, ws, probe_server_config(sandboxed), rewritten)
    ran.update({f"{key}-moved": _evil(ws / rel) for key, rel in CONTENT.items()})
    ran.update({key: _evil(ws / rel) for key, (_, rel) in LINKED_WAYS.items()})
    ran.update(_ran(ws, user, markers))
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
    assert left == PLANTED


@pytest.fixture(scope="module")
def hostile_sandboxed(tmp_path_factory: pytest.TempPathFactory) -> Outcome:
    return _hostile(tmp_path_factory.mktemp("boxed"), sandboxed=True)


@pytest.fixture(scope="module")
def hostile_bare(tmp_path_factory: pytest.TempPathFactory) -> Outcome:
    return _hostile(tmp_path_factory.mktemp("bare"), sandboxed=False)


HOSTILE = [
    *(a.id for a in GIT_ATTACKS),
    *CONTENT,
    *(f"{key}-moved" for key in CONTENT),
    *LINKED_WAYS,
]


@pytest.mark.parametrize("attack", HOSTILE)
def test_a_hostile_server_plants_nothing_host_git_runs(
    attack: str, hostile_sandboxed: Outcome
) -> None:
    ran, _, answers = hostile_sandboxed
    assert not ran[attack], answers


@pytest.mark.parametrize("attack", HOSTILE)
def test_without_the_sandbox_host_git_runs_it(attack: str, hostile_bare: Outcome) -> None:
    ran, _, answers = hostile_bare
    assert ran[attack], answers


def test_no_catalogue_name_survives_the_session(hostile_sandboxed: Outcome) -> None:
    _, left, answers = hostile_sandboxed
    assert left == [], answers


def test_without_the_sandbox_every_catalogue_name_is_left(hostile_bare: Outcome) -> None:
    _, left, _ = hostile_bare
    assert left == PLANTED


def test_holding_every_proxy_connection_does_not_switch_the_guard_off(tmp_path: Path) -> None:
    """A networked server floods its egress proxy so the trusted process has no descriptor
    left for the guard, then plants a repository: it is still neutralised."""
    user, ws, markers = _world(tmp_path)
    server = probe_server_config(True)
    server["sandbox"]["network"] = {"allowedDomains": ["example.invalid"]}
    attack = GIT_ATTACKS[0]
    calls: list[tuple[str, dict[str, Any]]] = [
        ("hold_connections", {"path": "/run/ironcurtain/egress.sock", "count": 1500}),
        ("fs_ops", {"base": str(ws), "ops": attack.ops(str(markers / attack.id), str(ws))}),
    ]
    # The launcher gets few descriptors, as on a machine with a low limit.
    out = run_probe(user, ws, server, lambda: calls, prefix=["prlimit", "--nofile=256:256"])
    assert out[0][1].startswith("OK"), out
    assert not _ran(ws, user, markers)[attack.id], out


# -- the agent, through allowed calls of the bundled servers -------------------------------


def _by_agent(attack: GitAttack) -> bool:
    """Whether the filesystem server's calls can make it: it has no chmod and no symlink
    (a move is the agent's own test below)."""
    return all(op[0] in ("mkdir", "write") for op in attack.ops("m", "w"))


def _agent_calls(ws: Path, markers: Path) -> list[tuple[str, dict[str, Any]]]:
    """The git attacks as filesystem and git tool calls the bundled policy allows."""
    calls: list[tuple[str, dict[str, Any]]] = []
    for attack in filter(_by_agent, GIT_ATTACKS):
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
    config = write_config(
        user.root / "agent.json", bundled_servers("filesystem", "git", sandboxed=sandboxed)
    )
    out: list[tuple[bool, str]] = []

    async def scenario() -> None:
        async with connect(user, "--config", str(config), "--workspace", str(ws)) as session:
            for tool, args in _agent_calls(ws, markers):
                out.append(await call(session, tool, args))

    asyncio.run(scenario())
    made = {a.id for a in GIT_ATTACKS if _by_agent(a)}
    return {k: v for k, v in _ran(ws, user, markers).items() if k in made}, out


def test_the_agent_plants_nothing_host_git_runs_and_git_work_goes_on(tmp_path: Path) -> None:
    ran, out = _agent(tmp_path, sandboxed=True)
    assert not any(ran.values()), (ran, out)
    assert all(not error for error, _ in out), out  # every call allowed, the work done
    assert "notes" in out[-1][1]


def test_the_agents_attacks_run_without_the_sandbox(tmp_path: Path) -> None:
    ran, out = _agent(tmp_path, sandboxed=False)
    assert all(ran.values()), (ran, out)


def _agent_moves(base: Path, sandboxed: bool) -> tuple[bool, list[tuple[bool, str]]]:
    """The agent renames the directory holding the file the user's repository includes
    (its read-only mount goes with it), makes it again and writes its own file there."""
    user, ws, markers = _world(base)
    config = write_config(
        user.root / "agent.json", bundled_servers("filesystem", sandboxed=sandboxed)
    )
    conf = ws / "inc" / "conf"
    calls: list[tuple[str, dict[str, Any]]] = [
        ("filesystem__move_file", {"source": str(conf), "destination": f"{conf}.orig"}),
        ("filesystem__create_directory", {"path": str(conf)}),
        (
            "filesystem__write_file",
            {"path": str(conf / "team.gitconfig"), "content": _fsmonitor(str(markers / "inc"))},
        ),
    ]
    out: list[tuple[bool, str]] = []

    async def scenario() -> None:
        async with connect(user, "--config", str(config), "--workspace", str(ws)) as session:
            for tool, args in calls:
                out.append(await call(session, tool, args))

    asyncio.run(scenario())
    _host_git(ws, "inc", user.home)
    return (markers / "inc").exists(), out


def test_the_agent_cannot_move_the_way_to_what_a_repository_includes(tmp_path: Path) -> None:
    ran, out = _agent_moves(tmp_path, sandboxed=True)
    assert not ran, out
    assert out[0][0] and "busy" in out[0][1].lower(), out  # the way is a mount point


def test_the_agents_move_runs_without_the_sandbox(tmp_path: Path) -> None:
    ran, out = _agent_moves(tmp_path, sandboxed=False)
    assert ran, out


def _own_files_in_the_workspace(base: Path, sandboxed: bool) -> tuple[str, list[tuple[bool, str]]]:
    """ironcurtain's config kept in the workspace: a server renames the directory on the
    way to it and writes its own config, unsandboxing itself for the next session."""
    user, ws, _ = _world(base)
    own = ws / "ops" / "ironcurtain"
    own.mkdir(parents=True)
    config = own / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"probe": probe_server_config(sandboxed)}}))
    policy = write_raw_policy(own / "policy")
    if os.geteuid() == 0:
        subprocess.run(["chown", "-R", "65534:65534", str(ws / "ops")], check=True)
    mine = config.read_text()
    forged = json.dumps({"mcpServers": {"probe": {"command": "/bin/sh", "sandbox": False}}})
    ops: list[Op] = [
        ["rename", "ops", "ops.orig"],
        ["mkdir", "ops"],
        ["mkdir", "ops/ironcurtain"],
        ["write", "ops/ironcurtain/servers.json", forged],
    ]
    out: list[tuple[bool, str]] = []
    args = ["--config", str(config), "--policy-dir", str(policy), "--workspace", str(ws)]

    async def scenario() -> None:
        async with connect(user, *args) as session:
            out.append(await call(session, "probe__fs_ops", {"base": str(ws), "ops": ops}))

    asyncio.run(scenario())
    now = config.read_text() if config.is_file() else ""
    return ("the user's" if now == mine else "forged" if now == forged else now), out


def _nested(base: Path, sandboxed: bool) -> tuple[bool, list[tuple[bool, str]]]:
    """A writable root inside another (allowWrite names the directory a hook links into):
    the server renames the directory above the inner root and makes the way again."""
    user, ws, _ = _world(base)
    nest = ws / "nest"
    subprocess.run(["git", "init", "-q", str(nest)], check=True)
    (nest / "tools" / "hooks").mkdir(parents=True)
    (nest / "tools" / "hooks" / "pre-commit").write_text("# the user's\n")
    (nest / ".git" / "hooks" / "pre-commit").symlink_to("../../tools/hooks/pre-commit")
    if os.geteuid() == 0:
        subprocess.run(["chown", "-R", "65534:65534", str(nest)], check=True)
    server = probe_server_config(sandboxed)
    if sandboxed:
        server["sandbox"]["filesystem"]["allowWrite"].append(str(nest / "tools" / "hooks"))
    ops: list[Op] = [
        ["rename", "nest/tools", "nest/tools.orig"],
        ["mkdir", "nest/tools"],
        ["mkdir", "nest/tools/hooks"],
        ["write", "nest/tools/hooks/pre-commit", "evil"],
    ]
    out = run_probe(user, ws, server, lambda: [("fs_ops", {"base": str(ws), "ops": ops})])
    return _evil(nest / "tools" / "hooks" / "pre-commit"), out


def test_a_writable_root_inside_another_keeps_the_way_to_it(tmp_path: Path) -> None:
    ran, out = _nested(tmp_path, sandboxed=True)
    assert not ran, out


def test_without_the_sandbox_the_way_to_an_inner_root_is_replaced(tmp_path: Path) -> None:
    ran, out = _nested(tmp_path, sandboxed=False)
    assert ran, out


def test_ironcurtains_own_files_in_the_workspace_stay_the_users(tmp_path: Path) -> None:
    whose, out = _own_files_in_the_workspace(tmp_path, sandboxed=True)
    assert whose == "the user's", out


def test_without_the_sandbox_a_server_rewrites_ironcurtains_own_files(tmp_path: Path) -> None:
    whose, out = _own_files_in_the_workspace(tmp_path, sandboxed=False)
    assert whose == "forged", out


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
            known = (*HOSTILE, *FAMILY_ATTACK_IDS, *LEFTHOOK_ATTACK_IDS, *DIRENV_HOME_ATTACK_IDS)
            known = (*known, *REVIEW_ATTACK_IDS)
            assert test == "name" or test in known, (entry.match, test)


def test_what_the_guard_cannot_follow_stops_the_server_that_can_write_there(
    tmp_path: Path,
) -> None:
    """A tree deeper than the guard follows: the server that can write there is stopped and
    its call answered with an error, the event audited; a server that cannot write there
    goes on; the end-of-session sweep still leaves nothing host git would run."""
    user, ws, markers = _world(tmp_path)
    bundled = {"mcpServers": bundled_servers("time")}
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
    # Too deep to follow, or (on a loaded machine) changed faster than the guard could check
    # within its time: either way it fails closed, which is the promise.
    assert "deeper than 400 levels" in text or "fell behind" in text, text
    assert error2 and "was stopped" in text2
    assert not error3 and "UTC" in text3, text3  # the server that cannot write goes on
    events = [json.loads(line) for line in audit.read_text().splitlines()]
    failures = [e for e in events if e.get("event") == "guard-failure"]
    assert failures and failures[0]["stopped"] == ["probe"]
    _host_git(ws, deep, user.home)
    assert not (markers / "deep").exists()
