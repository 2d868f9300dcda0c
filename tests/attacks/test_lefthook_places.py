"""Places a lefthook configuration names, and those its installed hook runs by itself.

The user's repositories use lefthook, its hook installed, their configuration naming a
scripts folder elsewhere (``source_dir`` in YAML with lefthook's case-blind keys,
``source_dir_local`` in TOML, JSONC with comments), an ``rc`` file the hook sources, a glob
of files it ``extends`` with, and the default ``.config/lefthook/`` scripts folder; one
repository holds the workspace itself and names a folder inside it; one has lefthook from
npm, which the hook runs from ``node_modules``. A hostile server (the probe) and the agent
(the bundled filesystem server) write what each would run; then the user commits, with the
real git and lefthook. Sandboxed, nothing runs; with the sandbox off, each attack runs. A
configuration that cannot be read for sure makes the roots read-only.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.autorun_attacks import (
    ENCLOSING,
    FLOW_ID,
    LEFTHOOK_ATTACKS,
    LEFTHOOK_CASES,
    NOOP,
    NPM_LEFTHOOK,
    SCRIPT,
)
from tests.support.bundled import bundled_servers, write_config
from tests.support.home import Home, make_home
from tests.support.lefthook import LEFTHOOK, LEFTHOOK_MISSING, lefthook_path, user_git
from tests.support.marks import needs_bwrap
from tests.support.probe import probe_server_config, run_probe
from tests.support.sdk import call, connect

pytestmark = needs_bwrap

USER_FILES = {"extends-glob": {"cfg/base.yml": "pre-commit:" + NOOP}}


def _repo(repo: Path, config: tuple[str, str], env: dict[str, str], files: dict[str, str]) -> None:
    repo.mkdir(parents=True, exist_ok=True)
    user_git("init", "-q", cwd=repo)
    user_git("commit", "-q", "--allow-empty", "-m", "start", cwd=repo)
    for name, text in [config, *files.items()]:
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    binary = LEFTHOOK or "lefthook"
    if repo.name == "npm-lefthook":  # installed with npm: the binary is in node_modules
        (repo / NPM_LEFTHOOK).parent.mkdir(parents=True)
        shutil.copy(_go_binary(), repo / NPM_LEFTHOOK)
        binary = str(repo / NPM_LEFTHOOK)
    subprocess.run([binary, "install"], cwd=repo, env=env, check=True)


def _go_binary() -> Path:
    """lefthook's own binary (the PyPI package's command is a Python wrapper around it)."""
    import lefthook

    found = sorted((Path(lefthook.__file__).parent / "bin").glob("lefthook-*/lefthook"))
    if not found:
        pytest.fail(LEFTHOOK_MISSING)
    return found[0]


def _world(base: Path, configs: dict[str, tuple[str, str]]) -> tuple[Home, Path, Path]:
    """The workspace is ``outer/app``, inside the user's repository ``outer`` (whose
    configuration names ``app/hk``); the other repositories are in the workspace."""
    if LEFTHOOK is None:
        pytest.fail(LEFTHOOK_MISSING)
    user = make_home(base)
    (user.home / ".gitconfig").write_text(
        "[safe]\n\tdirectory = *\n[user]\n\tname = u\n\temail = u@x\n"
    )
    env = {**os.environ, "HOME": str(user.home), "PATH": lefthook_path()}
    outer = user.root / "outer"
    ws = outer / "app"
    ws.mkdir(parents=True)
    _repo(outer, ("lefthook.yml", "source_dir: app/hk\npre-commit:" + SCRIPT), env, {})
    for case, config in configs.items():
        _repo(ws / case, config, env, USER_FILES.get(case, {}))
    if os.geteuid() == 0:  # servers then run as the workspace's owner: make it nobody
        subprocess.run(["chown", "-R", "65534:65534", str(outer)], check=True)
    markers = base / "markers"
    markers.mkdir()
    markers.chmod(0o777)
    return user, ws, markers


def _planted(markers: Path, cases: list[str]) -> list[tuple[str, str]]:
    """(path relative to the workspace, content) of every attack."""
    out = [
        (f"{case}/{rel}", text.format(marker=markers / case))
        for case in cases
        for rel, text in LEFTHOOK_CASES[case][1].items()
    ]
    return [*out, ("hk/pre-commit/check.sh", f"touch {markers / ENCLOSING}\n")]


def _commit(user: Home, repo: Path, path: str) -> None:
    env = {"PATH": path, "HOME": str(user.home), "GIT_CONFIG_NOSYSTEM": "1"}
    with open(repo / "notes.txt", "a") as notes:  # lefthook skips a commit of nothing
        notes.write("work\n")
    for args in (["add", "notes.txt"], ["commit", "-q", "-m", "work"]):
        subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, timeout=60)


def _commit_everywhere(user: Home, ws: Path, cases: list[str]) -> None:
    for case in cases:
        # lefthook from npm is not on PATH: the hook looks in node_modules
        _commit(user, ws / case, "/usr/bin:/bin" if case == "npm-lefthook" else lefthook_path())
    _commit(user, ws.parent, lefthook_path())


def _hostile(base: Path, sandboxed: bool) -> tuple[set[str], list[tuple[bool, str]]]:
    user, ws, markers = _world(base, {c: LEFTHOOK_CASES[c][0] for c in LEFTHOOK_CASES})
    calls = [
        ("fs_ops", {"base": str(ws), "ops": [["write", rel, text]]})
        for rel, text in _planted(markers, list(LEFTHOOK_CASES))
    ]
    answers = run_probe(user, ws, probe_server_config(sandboxed), lambda: calls)
    _commit_everywhere(user, ws, list(LEFTHOOK_CASES))
    return {p.name for p in markers.iterdir()}, answers


@pytest.fixture(scope="module")
def boxed(tmp_path_factory: pytest.TempPathFactory) -> tuple[set[str], list[tuple[bool, str]]]:
    return _hostile(tmp_path_factory.mktemp("boxed"), sandboxed=True)


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> tuple[set[str], list[tuple[bool, str]]]:
    return _hostile(tmp_path_factory.mktemp("bare"), sandboxed=False)


@pytest.mark.parametrize("attack", LEFTHOOK_ATTACKS)
def test_what_a_hostile_server_writes_where_lefthook_looks_does_not_run(
    attack: str, boxed: tuple[set[str], list[tuple[bool, str]]]
) -> None:
    ran, answers = boxed
    assert attack not in ran, answers


@pytest.mark.parametrize("attack", LEFTHOOK_ATTACKS)
def test_without_the_sandbox_the_next_commit_runs_it(
    attack: str, bare: tuple[set[str], list[tuple[bool, str]]]
) -> None:
    ran, answers = bare
    assert attack in ran, answers


def test_only_what_lefthook_would_run_is_kept_from_the_server(
    boxed: tuple[set[str], list[tuple[bool, str]]],
) -> None:
    """The folders the configurations name that exist are read-only (the glob's folder);
    the rest is moved away as it appears; nothing fails closed."""
    _, answers = boxed
    failed = [text for _, text in answers if not text.startswith("OK")]
    assert all(
        "No such file or directory" in text or "Read-only file system" in text for text in failed
    ), failed


# -- a configuration that cannot be read for sure -----------------------------------------

FLOW = "{source_dir: tools/hk, pre-commit: {scripts: {check.sh: {runner: sh}}}}\n"


def _unreadable(base: Path, sandboxed: bool) -> tuple[bool, list[tuple[bool, str]]]:
    user, ws, markers = _world(base, {FLOW_ID: ("lefthook.yml", FLOW)})
    marker = markers / "flow"
    ops = [["write", "flow/tools/hk/pre-commit/check.sh", f"touch {marker}\n"]]
    answers = run_probe(
        user,
        ws,
        probe_server_config(sandboxed),
        lambda: [("fs_ops", {"base": str(ws), "ops": ops})],
    )
    _commit(user, ws / "flow", lefthook_path())
    return marker.exists(), answers


def test_a_lefthook_configuration_not_read_for_sure_makes_the_roots_read_only(
    tmp_path: Path,
) -> None:
    ran, answers = _unreadable(tmp_path, sandboxed=True)
    assert not ran, answers
    assert "Read-only file system" in answers[0][1], answers


def test_without_the_sandbox_that_configurations_scripts_run(tmp_path: Path) -> None:
    ran, answers = _unreadable(tmp_path, sandboxed=False)
    assert ran, answers


# -- the agent, through the bundled filesystem server's allowed calls ----------------------

AGENT_CASES = ["yaml-source-dir", "toml-source-dir-local", "rc", "dot-config-scripts"]


def _agent(base: Path, sandboxed: bool) -> tuple[set[str], list[tuple[bool, str]], Path]:
    user, ws, markers = _world(base, {c: LEFTHOOK_CASES[c][0] for c in AGENT_CASES})
    config = write_config(
        user.root / "agent.json", bundled_servers("filesystem", sandboxed=sandboxed)
    )
    # write_file makes no executable file: lefthook runs these through sh, or sources them.
    planted = [*_planted(markers, AGENT_CASES), ("tools/x.py", "print('hi')\n")]
    calls: list[tuple[str, dict[str, Any]]] = []
    for rel, text in planted:
        path = ws / rel
        calls.append(("filesystem__create_directory", {"path": str(path.parent)}))
        calls.append(("filesystem__write_file", {"path": str(path), "content": text}))
    out: list[tuple[bool, str]] = []

    async def scenario() -> None:
        async with connect(user, "--config", str(config), "--workspace", str(ws)) as session:
            for tool, args in calls:
                out.append(await call(session, tool, args))

    asyncio.run(scenario())
    _commit_everywhere(user, ws, AGENT_CASES)
    return {p.name for p in markers.iterdir()}, out, ws


def test_the_agents_files_where_lefthook_looks_do_not_run(tmp_path: Path) -> None:
    ran, out, ws = _agent(tmp_path, sandboxed=True)
    assert not ran & {*AGENT_CASES, ENCLOSING}, out
    assert (ws / "tools" / "x.py").is_file()  # normal project work stays


def test_without_the_sandbox_the_agents_files_run(tmp_path: Path) -> None:
    ran, out, _ = _agent(tmp_path, sandboxed=False)
    assert {*AGENT_CASES, ENCLOSING} <= ran, out
