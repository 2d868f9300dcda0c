"""A hostile server that runs git in the workspace, through ironcurtain in its sandbox: it
makes repositories (``git init``, ``git clone``) and plants what would make the user's git
run its code. Each attack's promise is checked as the user meets it: ``git status``,
``git add`` and ``git commit`` on the host in the repository run nothing the server wrote.
The CONTROL is the same server with no sandbox (no guard either): the user's git runs it.
(The same attacks in process, with more variants: ``tests/attacks/test_git_made.py``.)"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from tests.support.gitmade import bare_repo, git, host_env, marker_script
from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.paths import TESTS
from tests.support.probe import write_raw_policy
from tests.support.sdk import call, connect

pytestmark = needs_bwrap

PLANTER = TESTS / "servers" / "git_planter.py"


def _hook(marker: Path) -> str:
    """Shell lines writing an executable hook script to ``$1`` that leaves ``marker``."""
    return f'printf \'#!/bin/sh\\necho ran >> {marker}\\n\' > "$1" && chmod +x "$1"'


def _attacks(origin: Path, marker: Path) -> dict[str, str]:
    hook = f"plant() {{ {_hook(marker)}; }}"
    return {
        "hook-written-during-init": f"{hook}; git init -q r && plant r/.git/hooks/pre-commit",
        "sample-renamed": f"{hook}; git init -q r && plant r/.git/hooks/pre-commit.sample"
        " && mv r/.git/hooks/pre-commit.sample r/.git/hooks/pre-commit",
        "template-dir-with-a-hook": f"{hook}; mkdir -p t/hooks && plant t/hooks/pre-commit"
        " && git init -q --template=t r",
        "hooks-path-in-the-clone-config": f"{hook}; mkdir -p h && plant h/pre-commit"
        f' && git clone -q {origin} r && git -C r config core.hooksPath "$PWD/h"',
        "hook-written-after-clone": f"{hook}; git clone -q {origin} r"
        " && plant r/.git/hooks/pre-commit",
    }


def _safe(directory: Path) -> Path:
    config = directory / "server.gitconfig"
    config.write_text("[safe]\n\tdirectory = *\n")
    return config


def _server(sandboxed: bool, origin: Path) -> dict[str, object]:
    server: dict[str, object] = {
        "command": sys.executable,
        "args": [str(PLANTER)],
        # The sandbox's user owns nothing of the user's: git is told every repository is
        # safe (a global configuration, which git passes on to the git serving a local clone).
        "env": {"GIT_CONFIG_GLOBAL": str(_safe(origin.parent)), "HOME": "/tmp"},
    }
    if sandboxed:
        read = [str(PLANTER.parent), str(origin.parent)]
        server["sandbox"] = {"filesystem": {"allowRead": read, "allowWrite": ["${workspace}"]}}
    else:
        server["sandbox"] = False
    return server


@pytest.mark.parametrize("sandboxed", [True, False], ids=["guarded", "CONTROL-unsandboxed"])
@pytest.mark.parametrize(
    "attack",
    [
        "hook-written-during-init",
        "sample-renamed",
        "template-dir-with-a-hook",
        "hooks-path-in-the-clone-config",
        "hook-written-after-clone",
    ],
)
def test_a_planting_git_server_runs_nothing_on_the_host(
    user: Home, attack: str, sandboxed: bool
) -> None:
    ws, marker = user.ws(), user.root / "ran"
    (user.root / "remote").mkdir()
    origin = bare_repo(user.root / "remote" / "origin.git")
    (user.root / "remote" / "origin.git").chmod(0o755)
    config = user.root / "planter.json"
    config.write_text(json.dumps({"mcpServers": {"git": _server(sandboxed, origin)}}))
    policy = write_raw_policy(user.root / "policy", {"git": {"sh": ["cwd", "script"]}})
    args = ["--config", str(config), "--policy-dir", str(policy), "--workspace", str(ws)]
    script = _attacks(origin, marker)[attack]

    async def scenario() -> None:
        async with connect(user, *args) as session:
            failed, text = await call(session, "git__sh", {"cwd": str(ws), "script": script})
            assert not failed, text
            assert (ws / "r" / ".git" / "HEAD").is_file(), text  # the repository was made
            # The call has returned: the user works in the repository, the session going on.
            _user_works_in(ws / "r", user.home)
            assert marker.exists() != sandboxed, text

    asyncio.run(scenario())
    _user_works_in(ws / "r", user.home)  # and after it
    assert marker.exists() != sandboxed


def _user_works_in(repo: Path, home: Path) -> None:
    env = {**host_env(home), "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory",
           "GIT_CONFIG_VALUE_0": "*"}  # fmt: skip
    if not repo.is_dir():
        return
    (repo / "work.txt").write_text("mine\n")
    for args in (["status"], ["add", "work.txt"], ["commit", "-qm", "mine"]):
        git(repo, *args, env=env, check=False)


@pytest.mark.parametrize("sandboxed", [True, False], ids=["guarded", "CONTROL-unsandboxed"])
def test_a_server_rewriting_the_users_config_again_and_again_is_stopped(
    user: Home, sandboxed: bool
) -> None:
    """The user's ``.git/config`` is writable in the sandbox (git renames a new one over it
    to add a remote). A process the server leaves behind appends ``core.fsmonitor`` to it
    over and over: each time the guard puts the user's back, it is changed again, and the
    user's git running meanwhile (an editor's ``git status``) would read it so changed. The
    first such change stops the server, its process tree with it."""
    ws, marker = user.ws(), user.root / "ran"
    repo = ws / "mine"
    env = host_env(user.home)
    git(ws, "init", "-q", "-b", "main", "mine", env=env)
    before = (repo / ".git" / "config").read_bytes()
    fsm = marker_script(user.root / "fsm", marker)
    (user.root / "remote").mkdir()
    origin = bare_repo(user.root / "remote" / "origin.git")
    config = user.root / "planter.json"
    config.write_text(json.dumps({"mcpServers": {"git": _server(sandboxed, origin)}}))
    policy = write_raw_policy(user.root / "policy", {"git": {"sh": ["cwd", "script"]}})
    args = ["--config", str(config), "--policy-dir", str(policy), "--workspace", str(ws)]
    # as git writes it (a new file renamed over it), so the file's owner and mode do not matter
    line = (
        f"printf '[core]\\n\\tfsmonitor = {fsm}\\n' > mine/.git/c.lock"
        " && mv -f mine/.git/c.lock mine/.git/config"
    )
    script = (
        f"(i=0; while [ $i -lt 3000 ]; do {line}; i=$((i+1)); sleep 0.002; done)"
        " >/dev/null 2>&1 & sleep 0.5; echo looping"
    )

    async def scenario() -> None:
        async with connect(user, *args) as session:
            await call(session, "git__sh", {"cwd": str(ws), "script": script})
            # The call has returned (or its server was stopped): the user's editor runs
            # git status again and again, the session going on.
            for _ in range(30):
                git(repo, "status", env=env, check=False)
            assert marker.exists() != sandboxed
            if sandboxed:
                assert (repo / ".git" / "config").read_bytes() == before

    asyncio.run(scenario())


_MAPPED = """
import mmap, os, sys, time
config, fsm = sys.argv[1], sys.argv[2]
at = os.path.getsize(config)
pad = b"#" + b"x" * 400 + b"\\n"
fd = os.open(config, os.O_RDWR)
os.lseek(fd, 0, os.SEEK_END)
os.write(fd, pad)  # a comment more: an event, and the guard finds it git's own
mapping = mmap.mmap(fd, at + len(pad))
mapping[0:1] = mapping[0:1]  # the page writable from here on
time.sleep(1.5)  # the call has returned
hostile = f"[core]\\n\\tfsmonitor = {fsm}\\n#".encode()
mapping[at : at + len(hostile)] = hostile  # no event, no new change time
time.sleep(60)
"""


@pytest.mark.parametrize("sandboxed", [True, False], ids=["guarded", "CONTROL-unsandboxed"])
def test_a_config_changed_through_a_mapping_after_the_call_is_seen(
    user: Home, sandboxed: bool
) -> None:
    """A process the server leaves behind maps the user's ``.git/config`` and, once the call
    has returned, stores ``core.fsmonitor`` into it: no inotify event, so no settle follows
    it. The session settles the guard every second as well: the change is seen, the user's
    config put back and the server stopped, before the user's git runs for long with it."""
    ws, marker = user.ws(), user.root / "ran"
    repo = ws / "mine"
    env = host_env(user.home)
    git(ws, "init", "-q", "-b", "main", "mine", env=env)
    before = (repo / ".git" / "config").read_bytes()
    fsm = marker_script(user.root / "fsm", marker)
    (user.root / "remote").mkdir()
    origin = bare_repo(user.root / "remote" / "origin.git")
    (user.root / "mapped.py").write_text(_MAPPED)
    config = user.root / "planter.json"
    server = _server(sandboxed, origin)
    if sandboxed:
        server["sandbox"]["filesystem"]["allowRead"].append(str(user.root / "mapped.py"))  # type: ignore[index]
    config.write_text(json.dumps({"mcpServers": {"git": server}}))
    policy = write_raw_policy(user.root / "policy", {"git": {"sh": ["cwd", "script"]}})
    args = ["--config", str(config), "--policy-dir", str(policy), "--workspace", str(ws)]
    script = (
        f"{sys.executable} {user.root / 'mapped.py'} mine/.git/config {fsm}"
        " >/dev/null 2>&1 & sleep 0.3; echo mapped"
    )

    async def scenario() -> None:
        async with connect(user, *args) as session:
            failed, text = await call(session, "git__sh", {"cwd": str(ws), "script": script})
            assert not failed, text
            # The store comes after the call: the user's editor runs git status now and
            # then; it has once the store is in (or the user's config is back).
            for _ in range(200):
                now = (repo / ".git" / "config").read_bytes()
                if b"fsmonitor" in now:
                    break
                await asyncio.sleep(0.05)
            for _ in range(200):
                if (repo / ".git" / "config").read_bytes() == before:
                    break
                await asyncio.sleep(0.05)
            git(repo, "status", env=env, check=False)
            assert marker.exists() != sandboxed

    asyncio.run(scenario())
