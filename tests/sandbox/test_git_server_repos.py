"""The design's git server (``@cyanheads/git-mcp-server`` 2.15.3, from npm) making
repositories in the workspace through ironcurtain: ``git_init`` and an approved
``git_clone`` work under the guard, ``git_remote add`` and ``set-url`` of a remote it added
on the user's own repository work, and afterwards the user's ``git status`` and ``git
commit`` on the host run nothing the sandbox wrote (what the attacks on the same guard
show: ``tests/attacks/test_git_made.py``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from launcher.guard.gitmade import config_verdict, template_hooks
from tests.support.gitmade import bare_repo, git, host_env
from tests.support.gitserver import installed_git_server, write_git_session
from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.sdk import answering, call, connect

pytestmark = needs_bwrap


def _elicit(answers: list[str]):  # type: ignore[no-untyped-def]
    answer, _ = answering(*answers)

    async def callback(context: object, params: object) -> object:
        return await answer(params)  # type: ignore[arg-type]

    return callback


def _git_own(repo: Path) -> None:
    """What the server left in ``repo`` is what git lays down: the host git's samples,
    a configuration of the settings git writes."""
    hooks = {p.name: p.read_bytes() for p in (repo / "hooks").iterdir()}
    assert hooks == template_hooks()
    assert config_verdict((repo / "config").read_text()) is None


def _commit_on_the_host(repo: Path, home: Path) -> str:
    env = host_env(home)
    (repo / "mine.txt").write_text("mine\n")
    git(repo, "add", "mine.txt", env=env)
    git(repo, "commit", "-qm", "the user's", env=env)
    return git(repo, "status", "--short", env=env) + git(repo, "log", "--oneline", env=env)


def test_init_and_an_approved_clone_work_and_run_nothing_on_the_host(user: Home) -> None:
    entry = installed_git_server()
    ws = user.ws()
    (user.root / "remote").mkdir()
    origin = bare_repo(user.root / "remote" / "origin.git")
    args = write_git_session(user.root, entry, ws, readable=(user.root / "remote",))

    async def scenario() -> None:
        async with connect(user, *args, elicitation=_elicit(["approve"])) as s:
            failed, text = await call(
                s, "git__git_init", {"path": str(ws / "fresh"), "initialBranch": "main"}
            )
            assert not failed, text
            failed, text = await call(
                s, "git__git_clone", {"url": str(origin), "path": str(ws / "copy")}
            )
            assert not failed, text
            failed, text = await call(s, "git__git_status", {"path": str(ws / "copy")})
            assert not failed, text

    asyncio.run(scenario())
    for repo in (ws / "fresh", ws / "copy"):
        _git_own(repo / ".git")
    assert (ws / "copy" / "README.md").read_text() == "hello\n"
    shown = _commit_on_the_host(ws / "copy", user.home)
    assert "the user's" in shown and "first" in shown
    assert "the user's" in _commit_on_the_host(ws / "fresh", user.home)


def test_remote_add_and_set_url_change_the_users_config_as_git_writes_it(user: Home) -> None:
    entry = installed_git_server()
    ws = user.ws()
    repo = ws / "mine"
    env = host_env(user.home)
    git(ws, "init", "-q", "-b", "main", "mine", env=env)
    git(repo, "config", "alias.st", "status")  # the user's own, not a setting git writes
    git(repo, "remote", "add", "origin", "https://example.com/mine.git")
    args = write_git_session(user.root, entry, ws)
    calls = [
        {"mode": "add", "name": "up", "url": "https://example.com/up.git"},
        {"mode": "set-url", "name": "up", "url": "https://example.com/moved.git"},
    ]

    async def scenario() -> None:
        async with connect(user, *args, elicitation=_elicit(["approve"] * len(calls))) as s:
            for arguments in calls:
                failed, text = await call(s, "git__git_remote", {"path": str(repo), **arguments})
                assert not failed, text

    asyncio.run(scenario())
    remotes = git(repo, "remote", "-v", env=env)
    assert "https://example.com/mine.git" in remotes and "https://example.com/moved.git" in remotes
    assert "alias.st=status" in git(repo, "config", "--list", env=env)
    users = "[alias]\n\tst = status\n"
    assert config_verdict((repo / ".git" / "config").read_text(), users) is None
    assert "the user's" in _commit_on_the_host(repo, user.home)
