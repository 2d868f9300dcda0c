"""The quarantine guard on a real filesystem: inotify events, races, symlink tricks."""

from __future__ import annotations

import contextlib
import os
import resource
import subprocess
from pathlib import Path

import pytest

from launcher.guard.watch import MAX_DEPTH, Guard, GuardFailure, Quarantined

# The workspace, the quarantine, the guard over them and what it has moved so far.
Setup = tuple[Path, Path, Guard, list[Quarantined]]


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    ws = tmp_path / "ws"
    ws.mkdir()
    quarantine = tmp_path / "quarantine"
    seen: list[Quarantined] = []
    guard = Guard([str(ws)], [str(ws / "deny" / "me.txt")], str(quarantine), seen.append)
    return ws, quarantine, guard, seen


def test_existing_protected_names_are_left_alone(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "repo" / ".git" / "hooks").mkdir(parents=True)
    (ws / ".bashrc").write_text("mine")
    seen: list[Quarantined] = []
    guard = Guard([str(ws)], [], str(tmp_path / "q"), seen.append)
    guard.start()
    guard.settle()
    assert seen == [] and (ws / ".bashrc").read_text() == "mine"
    assert (ws / "repo" / ".git" / "hooks").is_dir()


def test_new_names_at_any_depth_are_moved_out(setup: Setup) -> None:
    ws, quarantine, guard, seen = setup
    guard.start()
    # Created faster than any watch could be added: the scan of each new directory finds it.
    (ws / "a" / "b" / "c" / ".git" / "hooks").mkdir(parents=True)
    (ws / "a" / "b" / "c" / ".git" / "hooks" / "pre-commit").write_text("evil")
    (ws / "a" / ".mcp.json").write_text("{}")
    (ws / "deny").mkdir()
    (ws / "deny" / "me.txt").write_text("x")
    (ws / "deny" / "other.txt").write_text("fine")
    guard.settle()
    assert not (ws / "a" / "b" / "c" / ".git" / "hooks").exists()
    assert (ws / "a" / "b" / "c" / ".git").is_dir()  # only the protected part goes
    assert not (ws / "a" / ".mcp.json").exists()
    assert not (ws / "deny" / "me.txt").exists() and (ws / "deny" / "other.txt").exists()
    assert {Path(r.path).relative_to(ws).as_posix() for r in seen} == {
        "a/b/c/.git/hooks",
        "a/.mcp.json",
        "deny/me.txt",
    }
    hook = next(r for r in seen if r.path.endswith("hooks"))
    assert (Path(hook.moved_to) / "pre-commit").read_text() == "evil"
    assert Path(hook.moved_to).parent == quarantine


def test_a_directory_moved_in_is_checked(setup: Setup) -> None:
    ws, _, guard, seen = setup
    staging = ws / "staging"
    (staging / "hooks").mkdir(parents=True)
    (staging / "hooks" / "post-checkout").write_text("evil")
    guard.start()
    os.rename(staging, ws / ".git")  # becomes .git/hooks in one step
    guard.settle()
    assert not (ws / ".git" / "hooks").exists()
    assert [Path(r.path).name for r in seen] == ["hooks"]


def test_a_symlink_in_the_way_never_moves_anything_outside(setup: Setup, tmp_path: Path) -> None:
    ws, _, guard, seen = setup
    outside = tmp_path / "home"
    outside.mkdir()
    (outside / ".bashrc").write_text("the user's real one")
    guard.start()
    # The server points a directory of the workspace at the user's home...
    (ws / "evil").symlink_to(outside)
    guard.settle()
    (ws / "evil" / ".bashrc").write_text("hmm")  # lands in the home, not the workspace
    guard.settle()
    # ...and the guard, asked to quarantine evil/.bashrc, does not follow the link.
    guard.quarantine(str(ws), ("evil", ".bashrc"), "test")
    assert (outside / ".bashrc").read_text() == "hmm"
    assert seen == [] and guard.failures == []


def test_a_protected_name_that_is_a_symlink_is_moved_as_a_link(
    setup: Setup, tmp_path: Path
) -> None:
    ws, _, guard, seen = setup
    target = tmp_path / "target"
    target.write_text("not moved")
    guard.start()
    (ws / ".bashrc").symlink_to(target)
    guard.settle()
    assert not os.path.lexists(ws / ".bashrc")
    assert target.read_text() == "not moved"
    assert os.path.islink(seen[0].moved_to)


# -- what used to switch the guard off ---------------------------------------------------


def _make(base: Path, rel: str, content: str | None = None) -> None:
    """Create ``rel`` below ``base`` one component at a time (any depth, any length)."""
    parts = rel.split("/")
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, dir_fd=fd)
            child = os.open(part, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        if content is None:
            os.mkdir(parts[-1], dir_fd=fd)
        else:
            out = os.open(parts[-1], os.O_WRONLY | os.O_CREAT, 0o755, dir_fd=fd)
            os.write(out, content.encode())
            os.close(out)
    finally:
        os.close(fd)


def _exists(base: Path, rel: str) -> bool:
    parts = rel.split("/")
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            child = os.open(part, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        os.lstat(parts[-1], dir_fd=fd)
        return True
    except FileNotFoundError:
        return False
    finally:
        os.close(fd)


DEEP = "/".join(["d" * 60] * 90)  # 5,490 characters: past PATH_MAX and any file name


def test_a_hook_deeper_than_any_path_or_name_limit_is_moved(setup: Setup) -> None:
    ws, _, guard, seen = setup
    guard.start()
    _make(ws, f"{DEEP}/.git/hooks/pre-commit", "evil")
    guard.settle()
    assert not _exists(ws, f"{DEEP}/.git/hooks")
    assert _exists(ws, f"{DEEP}/.git")
    assert guard.failures == [] and len(seen) == 1
    assert (Path(seen[0].moved_to) / "pre-commit").read_text() == "evil"


def test_read_only_directories_do_not_stop_the_move(setup: Setup) -> None:
    ws, _, guard, seen = setup
    (ws / "r" / ".git").mkdir(parents=True)
    guard.start()
    staging = ws / "staging"
    staging.mkdir()
    (staging / "post-checkout").write_text("evil")
    os.rename(staging, ws / "r" / ".git" / "hooks")  # a directory moves only while writable
    (ws / "r" / ".git" / "hooks").chmod(0o555)
    (ws / "r" / ".git").chmod(0o555)
    (ws / "locked" / ".git").mkdir(parents=True)
    (ws / "locked" / ".git" / "config").write_text("[core]\n\tfsmonitor = evil\n")
    (ws / "locked").chmod(0)
    guard.settle()
    assert guard.failures == []
    assert not (ws / "r" / ".git" / "hooks").exists()
    assert not (ws / "locked" / ".git" / "config").exists()
    assert {Path(r.path).relative_to(ws).as_posix() for r in seen} == {
        "r/.git/hooks",
        "locked/.git/config",
    }


def test_git_indirection_is_caught_by_structure(setup: Setup) -> None:
    ws, _, guard, seen = setup
    subprocess.run(["git", "init", "-q", str(ws / "mine")], check=True)
    guard.start()
    # A .git file sending git elsewhere.
    (ws / "proj").mkdir()
    (ws / "proj" / ".git").write_text("gitdir: ../store\n")
    # A bare repository, its config written before it looks like one.
    bare = ws / "store"
    bare.mkdir()
    (bare / "config").write_text("[core]\n\tworktree = ../proj\n\tfsmonitor = evil\n")
    (bare / "objects").mkdir()
    (bare / "refs").mkdir()
    (bare / "HEAD").write_text("ref: refs/heads/main\n")
    # commondir in the user's own repository.
    (ws / "mine" / ".git" / "commondir").write_text("../../store\n")
    guard.settle()
    assert {Path(r.path).relative_to(ws).as_posix() for r in seen} == {
        "proj/.git",
        "store/config",
        "mine/.git/commondir",
    }
    # The user's own repository keeps what it had.
    assert (ws / "mine" / ".git" / "config").is_file()
    assert (ws / "mine" / ".git" / "hooks").is_dir()


def test_a_replaced_file_is_not_the_users_any_more(setup: Setup, tmp_path: Path) -> None:
    ws, _, guard, seen = setup
    (ws / ".bashrc").symlink_to(tmp_path / "elsewhere")
    guard.start()
    (ws / ".bashrc").unlink()
    (ws / ".bashrc").write_text("evil")
    guard.settle()
    assert not (ws / ".bashrc").exists()
    assert [Path(r.path).name for r in seen] == [".bashrc"]


def test_what_cannot_be_moved_fails_closed(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "blocker").write_text("a file where the quarantine would be")
    failures: list[GuardFailure] = []
    guard = Guard([str(ws)], [], str(tmp_path / "blocker" / "q"), print, failures.append)
    guard.start()
    (ws / ".envrc").write_text("evil")
    guard.settle()
    assert [(f.root, f.path) for f in failures] == [(str(ws), str(ws / ".envrc"))]
    assert "quarantine" in failures[0].reason


def test_no_descriptors_left_fails_closed(setup: Setup) -> None:
    ws, _, guard, _ = setup
    failures: list[GuardFailure] = []
    guard.on_failure = failures.append
    guard.start()
    (ws / "a" / "b").mkdir(parents=True)
    (ws / "a" / "b" / ".mcp.json").write_text("{}")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 16, hard))
    filler: list[int] = []
    try:
        with contextlib.suppress(OSError):  # every descriptor taken, as a flood would
            while True:
                filler.append(os.open("/dev/null", os.O_RDONLY))
        guard.settle()
    finally:
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert failures, "the guard went on as if it had handled it"
    assert (ws / "a" / "b" / ".mcp.json").exists()  # not handled, and said so


def test_a_tree_too_deep_to_follow_fails_closed(setup: Setup) -> None:
    ws, _, guard, _ = setup
    failures: list[GuardFailure] = []
    guard.on_failure = failures.append
    guard.start()
    _make(ws, "/".join(["x"] * (MAX_DEPTH + 5)))
    guard.settle()
    # Fails closed whichever limit it meets first: its depth, or (on a loaded machine) its
    # time to catch up with the tree.
    assert failures
    assert "deeper than" in failures[0].reason or "fell behind" in failures[0].reason


def test_the_sweep_finds_what_no_event_reported(setup: Setup) -> None:
    ws, _, guard, seen = setup
    (ws / ".vscode").mkdir()  # the user's: stays
    guard.start()
    guard.close()  # as if every event were lost
    (ws / "x" / ".git" / "hooks").mkdir(parents=True)
    (ws / "x" / ".git" / "hooks" / "pre-commit").write_text("evil")
    (ws / "y.pth").write_text("import os")
    moved = guard.sweep()
    assert {Path(r.path).relative_to(ws).as_posix() for r in moved} == {"x/.git/hooks", "y.pth"}
    assert (ws / ".vscode").is_dir()
    assert seen == moved


def test_legitimate_git_work_keeps_working(setup: Setup) -> None:
    ws, _, guard, seen = setup
    guard.start()
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "a",
        "GIT_AUTHOR_EMAIL": "a@b",
        "GIT_COMMITTER_NAME": "a",
        "GIT_COMMITTER_EMAIL": "a@b",
    }
    repo = ws / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=env)
    guard.settle()
    (repo / "file.txt").write_text("work")
    for args in (["add", "file.txt"], ["commit", "-qm", "one"], ["checkout", "-qb", "topic"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True, env=env)
        guard.settle()
    log = subprocess.run(
        ["git", "-C", str(repo), "log", "--oneline"], capture_output=True, text=True, env=env
    )
    assert "one" in log.stdout
    assert {Path(r.path).name for r in seen} <= {"config", "hooks"}


def test_falling_behind_fails_closed_once_and_the_sweep_catches_up(setup: Setup) -> None:
    ws, _, guard, _ = setup
    failures: list[GuardFailure] = []
    guard.on_failure = failures.append
    guard.start()
    guard.budget = 0.0  # as if a storm of renames kept it scanning
    for i in range(3):
        (ws / f"t{i}" / "a").mkdir(parents=True)
        (ws / f"t{i}" / "a" / ".envrc").write_text("evil")
    guard.settle()
    assert len(failures) == 1 and "fell behind" in failures[0].reason
    assert guard.fell_behind
    moved = guard.sweep()  # what the session does once the writers are stopped
    assert sorted(Path(r.path).relative_to(ws).as_posix() for r in moved) == [
        f"t{i}/a/.envrc" for i in range(3)
    ]


def test_a_directory_its_owner_cannot_list_is_still_checked(setup: Setup) -> None:
    ws, _, guard, seen = setup
    guard.start()
    d = ws / "d"
    (d / ".git" / "objects").mkdir(parents=True)
    (d / ".git" / "refs").mkdir()
    (d / ".git" / "config").write_text("[core]\n\tfsmonitor = evil\n")
    (d / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    d.chmod(0o311)  # write and search, no read: inotify and listing are refused
    guard.settle()
    assert guard.failures == []
    assert not (d / ".git" / "config").exists()
    assert [Path(r.path).relative_to(ws).as_posix() for r in seen] == ["d/.git/config"]


def test_a_rename_storm_scans_each_tree_once(setup: Setup) -> None:
    from launcher.guard.places import outermost

    kept = outermost([("/r", ("a",)), ("/r", ("a", "b")), ("/r", ("a",)), ("/r", ("c",))])
    assert sorted(kept) == [("/r", ("a",)), ("/r", ("c",))]
