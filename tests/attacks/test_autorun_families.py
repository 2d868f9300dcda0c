"""Whole tool families in the catalogue, and git configurations read as git reads them.

A hostile server (the probe) and the agent (the bundled filesystem server's allowed
``write_file``) plant what lefthook, run by the hook it installed, would run on the user's
next ``git commit``: each of its configuration names (every extension, dotted and not, the
``.config/`` forms, the ``-local`` ones it merges) and its script folder. Then repositories
whose git configuration git reads but a naive reader would not (a byte-order mark, CRLF,
escapes, continuation lines, case, conditions, past a MiB) name a hooks directory or an
include that is not there yet: the server makes it. The user then commits, with the real
lefthook and git. Sandboxed, nothing runs; with the sandbox off, each attack runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sandbox_profiles import autorun_names
from tests.support.autorun_attacks import FAIL_CLOSED, GIT_CONFIG_ATTACKS, HOOK
from tests.support.bundled import bundled_servers, write_config
from tests.support.home import Home, make_home
from tests.support.lefthook import LEFTHOOK, LEFTHOOK_MISSING, lefthook_path, user_git
from tests.support.marks import needs_bwrap
from tests.support.probe import probe_server_config, run_probe
from tests.support.sdk import call, connect

pytestmark = needs_bwrap


MAIN_CONFIGS = [
    n for n in autorun_names.expand("{,.,.config/}lefthook." + autorun_names._ANY_CONFIG)
]
LOCAL_CONFIGS = [
    n for n in autorun_names.expand("{,.,.config/}lefthook-local." + autorun_names._ANY_CONFIG)
]


def _lefthook_config(name: str, marker: str) -> str:
    """A lefthook configuration in the format its name says, running ``touch marker``."""
    if name.endswith(".toml"):
        return f'[pre-commit.commands.x]\nrun = "touch {marker}"\n'
    if name.endswith((".json", ".jsonc")):
        return json.dumps({"pre-commit": {"commands": {"x": {"run": f"touch {marker}"}}}})
    return f"pre-commit:\n  commands:\n    x:\n      run: touch {marker}\n"


USERS_LEFTHOOK = 'pre-commit:\n  scripts:\n    "check.sh":\n      runner: sh\n'


def _world(base: Path, unreadable: bool = False) -> tuple[Home, Path, Path]:
    """The user's workspace: repositories with lefthook's hook installed (some with their
    own lefthook.yml), and repositories with the configurations above; with
    ``unreadable``, one whose configuration includes a file too large to look at."""
    if LEFTHOOK is None:
        pytest.fail(LEFTHOOK_MISSING)
    user = make_home(base)
    ws = user.ws("ws")
    (user.home / ".gitconfig").write_text(
        "[safe]\n\tdirectory = *\n[user]\n\tname = u\n\temail = u@x\n"
    )
    env = {**os.environ, "HOME": str(user.home), "PATH": lefthook_path()}
    for kind, names in (("main", MAIN_CONFIGS), ("local", LOCAL_CONFIGS), ("script", ["s"])):
        for i, _ in enumerate(names):
            repo = ws / "lh" / kind / str(i)
            repo.mkdir(parents=True)
            user_git("init", "-q", cwd=repo)
            # lefthook skips a root commit: the user's repositories have some history
            user_git("commit", "-q", "--allow-empty", "-m", "start", cwd=repo)
            if kind == "local":
                (repo / "lefthook.yml").write_text(
                    "pre-commit:\n  commands:\n    y:\n      run: 'true'\n"
                )
            elif kind == "script":
                (repo / "lefthook.yml").write_text(USERS_LEFTHOOK)
            # Installed with the user's configuration (lefthook records its checksum).
            subprocess.run(
                [LEFTHOOK, "install"], cwd=repo, env=env, check=True, capture_output=True
            )
            if kind == "main":
                (repo / "lefthook.yml").unlink()  # the hook stays: lefthook finds any name
    for key, (config, _) in GIT_CONFIG_ATTACKS.items():
        repo = ws / "gc" / key
        repo.mkdir(parents=True)
        user_git("init", "-q", cwd=repo)
        (repo / ".git" / "config").write_bytes(config)
    if unreadable:
        repo = ws / "gc" / FAIL_CLOSED
        repo.mkdir(parents=True)
        user_git("init", "-q", cwd=repo)
        user_git("config", "include.path", "../../big.gitconfig", cwd=repo)
        with open(ws / "gc" / "big.gitconfig", "wb") as big:
            # A comment git reads past (sparse: no disk), then what counts.
            big.write(b"#")
            big.seek(65 << 20)
            big.write(b"\n[core]\n\thooksPath = .hk\n")
    if os.geteuid() == 0:  # servers then run as the workspace's owner: make it nobody
        subprocess.run(["chown", "-R", "65534:65534", str(ws)], check=True)
    markers = base / "markers"
    markers.mkdir()
    markers.chmod(0o777)
    return user, ws, markers


def _ops(ws: Path, markers: Path) -> list[list[str]]:
    """Every attack as the probe's filesystem operations, relative to the workspace."""
    ops: list[list[str]] = []
    for kind, names in (("main", MAIN_CONFIGS), ("local", LOCAL_CONFIGS)):
        for i, name in enumerate(names):
            marker = str(markers / f"lefthook-{kind}-{i}")
            ops.append(["write", f"lh/{kind}/{i}/{name}", _lefthook_config(name, marker)])
    ops.append(["write", "lh/script/0/.lefthook/pre-commit/check.sh", f"touch {markers}/script\n"])
    for key, (_, planted) in GIT_CONFIG_ATTACKS.items():
        for rel, content in planted.items():
            ops.append(
                ["write", os.path.normpath(f"gc/{key}/{rel}"), content.format(marker=markers / key)]
            )
    return ops


def _commit_everywhere(user: Home, ws: Path) -> None:
    """The user commits in every repository, with their own git and lefthook."""
    env = {
        "PATH": lefthook_path(),
        "HOME": str(user.home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "LEFTHOOK_VERBOSE": "0",
    }
    repos = [p.parent for p in ws.glob("*/*/*/.git")] + [p.parent for p in ws.glob("gc/*/.git")]
    # Twice: lefthook spends the first run after its configuration changed re-syncing hooks.
    for repo in [*repos, *repos]:
        with open(repo / "notes.txt", "a") as notes:  # lefthook skips a commit of nothing
            notes.write("work\n")
        for args in (["status"], ["add", "notes.txt"], ["commit", "-q", "-m", "work"]):
            subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, timeout=60)


def _ran(markers: Path) -> dict[str, bool]:
    made = {p.name for p in markers.iterdir()}
    ran = {
        "lefthook-config": [f"lefthook-main-{i}" in made for i in range(len(MAIN_CONFIGS))]
        + [f"lefthook-local-{i}" in made for i in range(len(LOCAL_CONFIGS))],
        "lefthook-script": ["script" in made],
    }
    ran.update({key: [key in made] for key in GIT_CONFIG_ATTACKS})
    return {key: all(v) for key, v in ran.items()} | {
        f"{key} (any)": any(v) for key, v in ran.items()
    }


# What ran afterwards (by attack) and the probe's answers.
Outcome = tuple[dict[str, bool], list[tuple[bool, str]]]


def _hostile(base: Path, sandboxed: bool) -> Outcome:
    user, ws, markers = _world(base)
    ops = _ops(ws, markers)
    # One call per operation: a server made read-only fails one, not the rest.
    calls = [("fs_ops", {"base": str(ws), "ops": [op]}) for op in ops]
    answers = run_probe(user, ws, probe_server_config(sandboxed), lambda: calls)
    _commit_everywhere(user, ws)
    return _ran(markers), answers


@pytest.fixture(scope="module")
def boxed(tmp_path_factory: pytest.TempPathFactory) -> Outcome:
    return _hostile(tmp_path_factory.mktemp("boxed"), sandboxed=True)


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Outcome:
    return _hostile(tmp_path_factory.mktemp("bare"), sandboxed=False)


HOSTILE = ["lefthook-config", "lefthook-script", *GIT_CONFIG_ATTACKS]


@pytest.mark.parametrize("attack", HOSTILE)
def test_what_a_hostile_server_plants_does_not_run_at_the_next_commit(
    attack: str, boxed: Outcome
) -> None:
    ran, answers = boxed
    assert not ran[f"{attack} (any)"], answers


@pytest.mark.parametrize("attack", HOSTILE)
def test_without_the_sandbox_the_next_commit_runs_it(attack: str, bare: Outcome) -> None:
    ran, answers = bare
    assert ran[attack], answers


def test_the_sandbox_lets_the_writes_happen_and_the_guard_moves_them(boxed: Outcome) -> None:
    """Nothing fails closed here (no root is read-only): every write is made, or, for a
    file in a new folder that is itself protected (``.lefthook/``, a hooks directory a
    configuration names), finds that folder already moved away: the guard acts as events
    come, during the call."""
    _, answers = boxed
    failed = [text for _, text in answers if not text.startswith("OK")]
    assert all("No such file or directory" in text for text in failed), failed
    assert len(failed) < len(answers) / 2, failed


def _unreadable(base: Path, sandboxed: bool) -> tuple[bool, list[tuple[bool, str]]]:
    user, ws, markers = _world(base, unreadable=True)
    marker = markers / FAIL_CLOSED
    ops = [["write", f"gc/{FAIL_CLOSED}/.hk/pre-commit", HOOK.format(marker=marker)]]
    answers = run_probe(
        user,
        ws,
        probe_server_config(sandboxed),
        lambda: [("fs_ops", {"base": str(ws), "ops": ops})],
    )
    _commit_everywhere(user, ws)
    return marker.exists(), answers


def test_a_git_configuration_too_large_to_read_makes_the_roots_read_only(tmp_path: Path) -> None:
    """What cannot be read whole is protected as if it named anything: the server can
    write nothing, and nothing runs."""
    ran, answers = _unreadable(tmp_path, sandboxed=True)
    assert not ran, answers
    assert "Read-only file system" in answers[0][1], answers


def test_without_the_sandbox_the_too_large_configurations_hook_runs(tmp_path: Path) -> None:
    ran, answers = _unreadable(tmp_path, sandboxed=False)
    assert ran, answers


# -- the agent, through the bundled filesystem server's allowed calls ----------------------


def _agent(base: Path, sandboxed: bool) -> tuple[dict[str, bool], list[tuple[bool, str]], Path]:
    user, ws, markers = _world(base)
    config = write_config(
        user.root / "agent.json", bundled_servers("filesystem", sandboxed=sandboxed)
    )
    calls: list[tuple[str, dict[str, Any]]] = []
    for op in _ops(ws, markers):
        # write_file makes no executable file: git would not run it as a hook, but lefthook
        # runs its scripts through their runner, and git reads an included configuration.
        if op[1].startswith(("lh/", "gc/bom-inc")):
            path = ws / op[1]
            calls.append(("filesystem__create_directory", {"path": str(path.parent)}))
            calls.append(("filesystem__write_file", {"path": str(path), "content": op[2]}))
    # Normal project work is not in the catalogue: it stays where it was written.
    for rel, content in (
        ("proj/src/x.py", "print('hi')\n"),
        ("proj/README.md", "# proj\n"),
        ("proj/package.json", '{"name": "proj"}\n'),
    ):
        calls.append(("filesystem__create_directory", {"path": str((ws / rel).parent)}))
        calls.append(("filesystem__write_file", {"path": str(ws / rel), "content": content}))
    out: list[tuple[bool, str]] = []

    async def scenario() -> None:
        async with connect(user, "--config", str(config), "--workspace", str(ws)) as session:
            for tool, args in calls:
                out.append(await call(session, tool, args))

    asyncio.run(scenario())
    _commit_everywhere(user, ws)
    ran = _ran(markers)
    return ran, out, ws


def test_the_agents_lefthook_and_git_configurations_do_not_run(tmp_path: Path) -> None:
    ran, out, ws = _agent(tmp_path, sandboxed=True)
    assert not ran["lefthook-config (any)"] and not ran["lefthook-script (any)"], out
    assert not ran["bom-include (any)"], out
    # Every call was allowed; the one that failed wrote into a folder the guard had already
    # moved away (.lefthook/, made by the call before).
    failed = [text for error, text in out if error]
    assert len(failed) == 1 and "ENOENT" in failed[0] and "/.lefthook/" in failed[0], failed
    for rel in ("proj/src/x.py", "proj/README.md", "proj/package.json"):
        assert (ws / rel).is_file(), rel  # normal project work stays


def test_without_the_sandbox_the_agents_files_run(tmp_path: Path) -> None:
    ran, out, _ = _agent(tmp_path, sandboxed=False)
    assert ran["lefthook-config"] and ran["lefthook-script"] and ran["bom-include"], out
