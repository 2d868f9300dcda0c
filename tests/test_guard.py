"""The quarantine guard on a real filesystem: inotify events, races, symlink tricks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from launcher.guard import Guard, Quarantined


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path, Guard, list[Quarantined]]:
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


def test_new_names_at_any_depth_are_moved_out(setup: tuple[Path, Path, Guard, list]) -> None:
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


def test_a_directory_moved_in_is_checked(setup: tuple[Path, Path, Guard, list]) -> None:
    ws, _, guard, seen = setup
    staging = ws / "staging"
    (staging / "hooks").mkdir(parents=True)
    guard.start()
    os.rename(staging, ws / ".git")  # becomes .git/hooks in one step
    guard.settle()
    assert not (ws / ".git" / "hooks").exists()
    assert [Path(r.path).name for r in seen] == ["hooks"]


def test_a_symlink_in_the_way_never_moves_anything_outside(
    setup: tuple[Path, Path, Guard, list], tmp_path: Path
) -> None:
    ws, _, guard, seen = setup
    outside = tmp_path / "home"
    outside.mkdir()
    (outside / ".bashrc").write_text("the user's real one")
    guard.start()
    # The server points a directory of the workspace at the user's home...
    (ws / "evil").symlink_to(outside)
    guard.settle()
    # ...and the guard, asked to quarantine evil/.bashrc, will not follow the link.
    assert guard._quarantine(str(ws), ["evil", ".bashrc"], "test") is False
    assert (outside / ".bashrc").read_text() == "the user's real one"
    assert seen == []


def test_a_protected_name_that_is_a_symlink_is_moved_as_a_link(
    setup: tuple[Path, Path, Guard, list], tmp_path: Path
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
