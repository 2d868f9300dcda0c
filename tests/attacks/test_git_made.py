"""``git init`` and ``git clone`` by a server in the workspace, under the guard: what git
itself lays down (sample hooks, description, info/exclude, a config of its own settings)
stays, so the repository works; anything a hostile server adds to make the user's git run
its code is moved out before the call returns.

Each attack is what a hostile server does in one call (real git, in the workspace the guard
watches, settled as a session settles it). The promise is checked as the user meets it:
``git status``, ``git add`` and ``git commit`` on the host in the repository run nothing the
server wrote. Each has its CONTROL: the same call with no guard, where the user's git does
run it.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import resource
from collections.abc import Callable
from pathlib import Path

import pytest

from launcher.guard.gitmade import template_hooks
from tests.support.gitmade import bare_repo, git, host_env, marker_script, settled

Attack = Callable[[Path, Path, Path], Path]  # (workspace, origin, marker) -> the repository


def _template(ws: Path, marker: Path) -> Path:
    """A template directory of the server's, with a real hook."""
    tmpl = ws / ".cache" / "tmpl"
    marker_script(tmpl / "hooks" / "pre-commit", marker)
    return tmpl


def init_with_template_option(ws: Path, origin: Path, marker: Path) -> Path:
    git(ws, "init", "-q", f"--template={_template(ws, marker)}", "r")
    return ws / "r"


def clone_with_template_dir_setting(ws: Path, origin: Path, marker: Path) -> Path:
    tmpl = _template(ws, marker)
    git(ws, "-c", f"init.templateDir={tmpl}", "clone", "-q", str(origin), "r", check=False)
    return ws / "r"


def init_with_template_variable(ws: Path, origin: Path, marker: Path) -> Path:
    tmpl = _template(ws, marker)
    git(ws, "init", "-q", "r", env={**os.environ, "GIT_TEMPLATE_DIR": str(tmpl)})
    return ws / "r"


def hook_written_after_clone(ws: Path, origin: Path, marker: Path) -> Path:
    git(ws, "clone", "-q", str(origin), "r")
    marker_script(ws / "r" / ".git" / "hooks" / "pre-commit", marker)
    return ws / "r"


def sample_rewritten_and_renamed(ws: Path, origin: Path, marker: Path) -> Path:
    git(ws, "init", "-q", "r")
    hooks = ws / "r" / ".git" / "hooks"
    marker_script(hooks / "pre-commit.sample", marker)  # written in place
    with contextlib.suppress(FileNotFoundError):  # the guard moved the sample out first
        os.rename(hooks / "pre-commit.sample", hooks / "pre-commit")
    return ws / "r"


def hooks_made_a_symlink(ws: Path, origin: Path, marker: Path) -> Path:
    git(ws, "clone", "-q", str(origin), "r")
    marker_script(ws / "elsewhere" / "pre-commit", marker)
    hooks = ws / "r" / ".git" / "hooks"
    for sample in hooks.iterdir():
        sample.unlink()
    hooks.rmdir()
    hooks.symlink_to(ws / "elsewhere")
    return ws / "r"


def hooks_path_in_the_clone_config(ws: Path, origin: Path, marker: Path) -> Path:
    marker_script(ws / ".h" / "pre-commit", marker)
    # The guard may move the config out while git is still writing it: the clone may fail.
    git(ws, "clone", "-q", "-c", f"core.hooksPath={ws / '.h'}", str(origin), "r", check=False)
    return ws / "r"


def fsmonitor_in_the_clone_config(ws: Path, origin: Path, marker: Path) -> Path:
    script = marker_script(ws / "tools" / "fsm", marker)
    git(ws, "clone", "-q", "-c", f"core.fsmonitor={script}", str(origin), "r", check=False)
    return ws / "r"


def include_added_to_the_config(ws: Path, origin: Path, marker: Path) -> Path:
    git(ws, "clone", "-q", str(origin), "r")
    script = marker_script(ws / "tools" / "fsm", marker)
    (ws / "notes.cfg").write_text(f"[core]\n\tfsmonitor = {script}\n")
    git(ws / "r", "config", "include.path", str(ws / "notes.cfg"))
    return ws / "r"


def config_rewritten_in_place(ws: Path, origin: Path, marker: Path) -> Path:
    git(ws, "clone", "-q", str(origin), "r")
    marker_script(ws / ".h" / "pre-commit", marker)
    with open(ws / "r" / ".git" / "config", "a") as config:  # no new file, no rename
        config.write(f"[core]\n\thooksPath = {ws / '.h'}\n")
    return ws / "r"


def config_given_another_name(ws: Path, origin: Path, marker: Path) -> Path:
    git(ws, "clone", "-q", str(origin), "r")
    os.link(ws / "r" / ".git" / "config", ws / "r" / "settings.ini")  # to write through later
    marker_script(ws / ".h" / "pre-commit", marker)
    with open(ws / "r" / "settings.ini", "a") as config:
        config.write(f"[core]\n\thooksPath = {ws / '.h'}\n")
    return ws / "r"


ATTACKS: list[Attack] = [
    init_with_template_option,
    clone_with_template_dir_setting,
    init_with_template_variable,
    hook_written_after_clone,
    sample_rewritten_and_renamed,
    hooks_made_a_symlink,
    hooks_path_in_the_clone_config,
    fsmonitor_in_the_clone_config,
    include_added_to_the_config,
    config_rewritten_in_place,
    config_given_another_name,
]


def _user_works_in(repo: Path, home: Path) -> None:
    """What the user does in the repository on the host: status, add, commit."""
    env = host_env(home)
    if not repo.is_dir():
        return  # the guard made the server's git fail: nothing of it is left to run
    (repo / "work.txt").write_text("mine\n")
    for args in (["status"], ["add", "work.txt"], ["commit", "-qm", "mine"], ["status"]):
        git(repo, *args, env=env, check=False)


@pytest.mark.parametrize("protected", [True, False], ids=["guarded", "CONTROL-unguarded"])
@pytest.mark.parametrize("attack", ATTACKS, ids=lambda a: a.__name__)
def test_the_users_git_runs_nothing_the_server_wrote(
    attack: Attack, protected: bool, tmp_path: Path
) -> None:
    ws, marker = tmp_path / "ws", tmp_path / "ran"
    ws.mkdir()
    (tmp_path / "home").mkdir()
    origin = bare_repo(tmp_path / "origin.git")
    with settled(ws, tmp_path / "quarantine", on=protected) as watched:
        repo = attack(ws, origin, marker)
        watched.returned()
        _user_works_in(repo, tmp_path / "home")  # while the session goes on
        assert marker.exists() != protected, watched.moved
        assert watched.failures == []
    _user_works_in(repo, tmp_path / "home")  # after the session
    assert marker.exists() != protected


def test_a_sample_rewritten_is_gone_before_the_user_enables_it(tmp_path: Path) -> None:
    """A sample says "rename this file to enable it": one the server changed is moved out
    (the hooks directory with it), so enabling it runs nothing of the server's."""
    for protected in (False, True):  # the CONTROL first
        ws, marker = tmp_path / f"ws-{protected}", tmp_path / f"ran-{protected}"
        ws.mkdir()
        with settled(ws, tmp_path / f"q-{protected}", on=protected) as watched:
            git(ws, "init", "-q", "r")
            hooks = ws / "r" / ".git" / "hooks"
            marker_script(hooks / "pre-commit.sample", marker)
            watched.returned()
            if (hooks / "pre-commit.sample").exists():
                os.rename(hooks / "pre-commit.sample", hooks / "pre-commit")  # the user
            _user_works_in(ws / "r", tmp_path)
        assert marker.exists() != protected
        if protected:
            assert watched.paths(ws) == {"r/.git/hooks"}, [m.why for m in watched.moved]


def test_init_clone_and_remotes_keep_what_git_lays_down(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    origin = bare_repo(tmp_path / "origin.git")
    with settled(ws, tmp_path / "quarantine") as watched:
        git(ws, "init", "-q", "-b", "main", "fresh")
        git(ws, "clone", "-q", str(origin), "copy")
        git(ws, "clone", "-q", "--bare", str(origin), "mirror.git")
        git(ws / "copy", "remote", "add", "upstream", "https://example.com/u.git")
        git(ws / "copy", "remote", "set-url", "--push", "origin", "https://example.com/p.git")
        git(ws / "copy", "branch", "-q", "--set-upstream-to=origin/main")
        watched.returned()
        assert watched.moved == [] and watched.failures == []
    assert watched.moved == [] and watched.failures == []  # nor at the sweep
    samples = template_hooks()
    assert samples, "the host git has template hooks"
    for repo in (ws / "fresh" / ".git", ws / "copy" / ".git", ws / "mirror.git"):
        assert {p.name: p.read_bytes() for p in (repo / "hooks").iterdir()} == samples
        assert (repo / "description").is_file() and (repo / "info" / "exclude").is_file()
    env = host_env(tmp_path)
    (ws / "copy" / "new.txt").write_text("x\n")
    git(ws / "copy", "add", "new.txt", env=env)
    git(ws / "copy", "commit", "-qm", "second", env=env)
    assert "second" in git(ws / "copy", "log", "--oneline", env=env)
    assert "https://example.com/p.git" in git(ws / "copy", "remote", "-v", env=env)


# -- the user's own repository: git changes its config (a remote added), nothing else may


def _users_repo(ws: Path, home: Path) -> tuple[Path, bytes]:
    """The user's repository, there before the session: its config as it was."""
    repo = ws / "mine"
    env = host_env(home)
    git(ws, "init", "-q", "-b", "main", "mine", env=env)
    git(repo, "config", "alias.st", "status")  # the user's own setting, not one git writes
    git(repo, "remote", "add", "origin", "https://example.com/mine.git")
    (repo / "a.txt").write_text("a\n")
    git(repo, "add", "a.txt", env=env)
    git(repo, "commit", "-qm", "first", env=env)
    return repo, (repo / ".git" / "config").read_bytes()


def hooks_path_set_with_git_config(repo: Path, ws: Path, marker: Path) -> None:
    marker_script(ws / ".h" / "pre-commit", marker)
    git(repo, "config", "core.hooksPath", str(ws / ".h"))  # a new file renamed over it


def fsmonitor_written_in_place(repo: Path, ws: Path, marker: Path) -> None:
    script = marker_script(ws / "tools" / "fsm", marker)
    with open(repo / ".git" / "config", "a") as config:
        config.write(f"[core]\n\tfsmonitor = {script}\n")


def config_replaced_by_a_link(repo: Path, ws: Path, marker: Path) -> None:
    marker_script(ws / ".h" / "pre-commit", marker)
    (ws / "evil.cfg").write_text(f"[core]\n\thooksPath = {ws / '.h'}\n")
    (repo / ".git" / "link").symlink_to(ws / "evil.cfg")
    os.rename(repo / ".git" / "link", repo / ".git" / "config")


def alias_added_beside_a_remote(repo: Path, ws: Path, marker: Path) -> None:
    marker_script(ws / ".h" / "pre-commit", marker)
    git(repo, "remote", "add", "up", "https://example.com/up.git")
    git(repo, "config", "alias.ci", f"-c core.hooksPath={ws / '.h'} commit")


USERS_CONFIG_ATTACKS = [
    hooks_path_set_with_git_config,
    fsmonitor_written_in_place,
    config_replaced_by_a_link,
    alias_added_beside_a_remote,
]


@pytest.mark.parametrize("protected", [True, False], ids=["guarded", "CONTROL-unguarded"])
@pytest.mark.parametrize("attack", USERS_CONFIG_ATTACKS, ids=lambda a: a.__name__)
def test_the_users_config_changes_only_as_git_changes_it(
    attack: Callable[[Path, Path, Path], None], protected: bool, tmp_path: Path
) -> None:
    ws, marker, home = tmp_path / "ws", tmp_path / "ran", tmp_path / "home"
    ws.mkdir()
    home.mkdir()
    repo, before = _users_repo(ws, home)
    with settled(ws, tmp_path / "quarantine", on=protected) as watched:
        attack(repo, ws, marker)
        watched.returned()
        env = host_env(home)
        (repo / "b.txt").write_text("b\n")
        for args in (["status"], ["add", "b.txt"], ["ci", "-qm", "mine"], ["commit", "-qm", "2"]):
            git(repo, *args, env=env, check=False)
        assert marker.exists() != protected, watched.moved
        if protected:  # the user's configuration is there again, as it was
            assert (repo / ".git" / "config").read_bytes() == before
            assert not (repo / ".git" / "config").is_symlink()
            # and the writers of the workspace are stopped (a session halts its servers)
            assert [f.path for f in watched.failures] == [str(repo / ".git" / "config")]


def test_the_users_config_removed_is_put_back(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    repo, before = _users_repo(ws, tmp_path)
    with settled(ws, tmp_path / "quarantine") as watched:
        (repo / ".git" / "config").unlink()
        watched.returned()
        assert (repo / ".git" / "config").read_bytes() == before
    # CONTROL: no guard, and it stays gone.
    (repo / ".git" / "config").unlink()
    assert not (repo / ".git" / "config").exists()


def test_remotes_added_and_set_in_the_users_repository_stay(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    repo, _ = _users_repo(ws, tmp_path)
    with settled(ws, tmp_path / "quarantine") as watched:
        git(repo, "remote", "add", "up", "https://example.com/up.git")
        git(repo, "remote", "set-url", "up", "https://example.com/moved.git")
        git(repo, "remote", "set-url", "--push", "up", "https://example.com/push.git")
        git(repo, "remote", "remove", "up")
        git(repo, "remote", "add", "second", "https://example.com/second.git")
        git(repo, "branch", "feature")
        git(repo, "branch", "--set-upstream-to", "main", "feature")  # a local branch: "."
        watched.returned()
        assert watched.moved == [] and watched.failures == []
    assert watched.moved == []
    remotes = git(repo, "remote", "-v")
    assert "https://example.com/mine.git" in remotes and "second" in remotes
    assert "alias.st=status" in git(repo, "config", "--list")  # the user's own, kept


# -- the user's own remotes sent elsewhere: no code runs, but the user's next push goes to
# the server's address (or a pull brings its commits)


def origin_set_elsewhere(repo: Path, evil: Path) -> None:
    git(repo, "remote", "set-url", "origin", str(evil))


def origin_given_a_push_url(repo: Path, evil: Path) -> None:
    git(repo, "remote", "set-url", "--push", "origin", str(evil))


def branch_given_a_push_remote(repo: Path, evil: Path) -> None:
    git(repo, "remote", "add", "mirror", str(evil))  # a new remote: allowed alone
    git(repo, "config", "branch.main.pushRemote", "mirror")


def branch_sent_to_a_new_remote(repo: Path, evil: Path) -> None:
    git(repo, "remote", "add", "mirror", str(evil))
    git(repo, "config", "branch.main.remote", "mirror")
    git(repo, "config", "branch.main.merge", "refs/heads/main")


REDIRECTS = [
    origin_set_elsewhere,
    origin_given_a_push_url,
    branch_given_a_push_remote,
    branch_sent_to_a_new_remote,
]


@pytest.mark.parametrize("protected", [True, False], ids=["guarded", "CONTROL-unguarded"])
@pytest.mark.parametrize("attack", REDIRECTS, ids=lambda a: a.__name__)
def test_the_users_push_goes_where_it_went_at_the_start(
    attack: Callable[[Path, Path], None], protected: bool, tmp_path: Path
) -> None:
    ws, home = tmp_path / "ws", tmp_path / "home"
    ws.mkdir()
    home.mkdir()
    env = host_env(home)
    good, evil = tmp_path / "good.git", ws / "evil.git"
    for bare in (good, evil):
        git(tmp_path, "init", "-q", "--bare", str(bare), env=env)
    git(ws, "init", "-q", "-b", "main", "mine", env=env)
    repo = ws / "mine"
    git(repo, "remote", "add", "origin", str(good), env=env)
    (repo / "a.txt").write_text("a\n")
    git(repo, "add", "a.txt", env=env)
    git(repo, "commit", "-qm", "first", env=env)
    git(repo, "push", "-q", "-u", "origin", "main", env=env)
    with settled(ws, tmp_path / "quarantine", on=protected) as watched:
        attack(repo, evil)
        watched.returned()
        (repo / "b.txt").write_text("b\n")
        git(repo, "add", "b.txt", env=env)
        git(repo, "commit", "-qm", "second", env=env)
        git(repo, "push", "-q", env=env, check=False)  # the user's push, as the user types it
    landed = git(evil, "for-each-ref", env=env)
    assert (landed == "") == protected, landed
    if protected:
        assert "second" in git(good, "log", "--format=%s", "main", env=env)
        assert [f.path for f in watched.failures] == [str(repo / ".git" / "config")]


def test_a_config_git_rewrites_again_and_again_stays(tmp_path: Path) -> None:
    """git writes a configuration anew (renamed over the old) at every setting; the guard
    reading the old one as it goes takes the one there now, never the replaced one as a
    link-less "other" file (before, about one run in six lost the repository's config)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    with settled(ws, tmp_path / "quarantine") as watched:
        for n in range(5):
            git(ws, "init", "-q", f"r{n}")
            for k in range(20):
                git(ws / f"r{n}", "remote", "add", f"o{k}", f"https://example.com/{k}.git")
        watched.returned()
        assert [m.why for m in watched.moved] == [] and watched.failures == []
    assert watched.moved == []
    assert "o19" in git(ws / "r4", "remote")


# -- a change no event reports: a store through a shared mapping of the configuration


def _mapped_config(config: Path, at_start: bytes) -> tuple[int, mmap.mmap, int]:
    """The configuration opened for writing and mapped, a comment line of padding written
    after what was there (a change git could have made: nothing but a comment), and the
    page made writable through the mapping already (its one change-time update)."""
    pad = b"#" + b"x" * 400 + b"\n"
    fd = os.open(config, os.O_RDWR)
    os.lseek(fd, 0, os.SEEK_END)
    os.write(fd, pad)
    mapping = mmap.mmap(fd, len(at_start) + len(pad))
    mapping[0:1] = at_start[0:1]  # the write fault: the page is writable from here on
    return fd, mapping, len(at_start)


@pytest.mark.parametrize("protected", [True, False], ids=["guarded", "CONTROL-unguarded"])
@pytest.mark.parametrize("whose", ["users", "cloned"])
def test_a_config_changed_through_a_mapping_is_seen(
    whose: str, protected: bool, tmp_path: Path
) -> None:
    """A store into a page already mapped writable changes the file with no inotify event
    and no new change time: what the guard checked last is not what git reads now. The
    promise holds at the next settle all the same (the call's return)."""
    ws, marker, home = tmp_path / "ws", tmp_path / "ran", tmp_path / "home"
    ws.mkdir()
    home.mkdir()
    origin = bare_repo(tmp_path / "origin.git")
    if whose == "users":
        _users_repo(ws, home)  # there before the session
    with settled(ws, tmp_path / "quarantine", on=protected) as watched:
        if whose == "cloned":
            git(ws, "clone", "-q", str(origin), "mine")
        repo = ws / "mine"
        config = repo / ".git" / "config"
        script = marker_script(ws / "tools" / "fsm", marker)
        fd, mapping, at = _mapped_config(config, config.read_bytes())
        watched.returned()  # the guard looks at the padded config: only a comment more
        hostile = f"[core]\n\tfsmonitor = {script}\n#".encode()
        mapping[at : at + len(hostile)] = hostile  # no event, no new change time
        watched.returned()  # the next call returns
        (repo / "b.txt").write_text("b\n")
        git(repo, "status", env=host_env(home), check=False)
        mapping.close()
        os.close(fd)
        assert marker.exists() != protected, watched.moved


# -- a branch's remote that is a URL: git takes a name no remote has for a URL


@pytest.mark.parametrize("protected", [True, False], ids=["guarded", "CONTROL-unguarded"])
@pytest.mark.parametrize("key", ["remote", "pushRemote"])
@pytest.mark.parametrize("whose", ["users", "cloned"])
def test_a_branch_remote_that_runs_a_command_is_refused(
    whose: str, key: str, protected: bool, tmp_path: Path
) -> None:
    """``branch.<name>.remote`` (and ``pushRemote``) may be a URL: an ``ext::`` one is a
    command the user's ``git pull`` (``git push``) runs, for a user whose own configuration
    allows that transport."""
    ws, marker, home = tmp_path / "ws", tmp_path / "ran", tmp_path / "home"
    ws.mkdir()
    home.mkdir()
    (home / ".gitconfig").write_text('[protocol "ext"]\n\tallow = always\n')
    origin = bare_repo(tmp_path / "origin.git")
    if whose == "users":
        _users_repo(ws, home)
    with settled(ws, tmp_path / "quarantine", on=protected) as watched:
        if whose == "cloned":
            git(ws, "clone", "-q", str(origin), "mine")
        repo = ws / "mine"
        git(repo, "config", f"branch.main.{key}", f"ext::sh -c touch% {marker}")
        watched.returned()
        env = host_env(home)
        git(repo, "pull" if key == "remote" else "push", env=env, check=False)
        assert marker.exists() != protected, watched.moved


@pytest.mark.parametrize("protected", [True, False], ids=["guarded", "CONTROL-unguarded"])
def test_a_guard_short_of_descriptors_keeps_watching_the_users_config(
    protected: bool, tmp_path: Path
) -> None:
    """A server that holds every descriptor the trusted process may have (its egress proxy's
    connections) while the guard settles, then changes the user's config in place: the
    guard, unable to look at the file for a moment, has not taken it for removed and
    stopped looking at it."""
    ws, marker, home = tmp_path / "ws", tmp_path / "ran", tmp_path / "home"
    ws.mkdir()
    home.mkdir()
    repo, before = _users_repo(ws, home)
    with settled(ws, tmp_path / "quarantine", on=protected) as watched:
        limits = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (1, limits[1]))  # no descriptor left
        try:
            watched.returned()
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, limits)
        fsmonitor_written_in_place(repo, ws, marker)
        watched.returned()
        (repo / "b.txt").write_text("b\n")
        git(repo, "status", env=host_env(home), check=False)
        assert marker.exists() != protected, watched.moved
        if protected:
            assert (repo / ".git" / "config").read_bytes() == before
