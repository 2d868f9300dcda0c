"""Roots the guard is given while the session runs (a caller's workspace, made when the
caller first calls): watched from then on as the roots of the start are, what was there
before taken as the user's; one that cannot be watched is refused, every time."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from launcher.guard.watch import MAX_DEPTH, Guard, GuardError, Quarantined


def _guard(tmp_path: Path) -> tuple[Guard, list[Quarantined]]:
    first = tmp_path / "first"
    first.mkdir()
    seen: list[Quarantined] = []
    guard = Guard([str(first)], [], str(tmp_path / "q"), seen.append)
    guard.start()
    return guard, seen


def test_a_root_added_later_is_guarded_and_what_was_there_is_left(tmp_path: Path) -> None:
    guard, seen = _guard(tmp_path)
    later = tmp_path / "later"
    (later / "repo" / ".git" / "hooks").mkdir(parents=True)
    (later / ".bashrc").write_text("mine")
    assert guard.add_roots([str(later)], [str(later / "deny.txt")], []) == [str(later)]
    assert guard.add_roots([str(later) + "/"], [], []) == []  # once
    (later / "a" / "b").mkdir(parents=True)
    (later / "a" / "b" / ".mcp.json").write_text("{}")
    (later / "deny.txt").write_text("x")
    (tmp_path / "first" / ".mcp.json").write_text("{}")  # the first root is still watched
    guard.settle()
    assert (later / ".bashrc").read_text() == "mine"
    assert (later / "repo" / ".git" / "hooks").is_dir()
    moved = {r.path for r in seen}
    assert moved == {
        str(later / "a" / "b" / ".mcp.json"),
        str(later / "deny.txt"),
        str(tmp_path / "first" / ".mcp.json"),
    }
    guard.close()


def test_without_adding_it_nothing_there_is_guarded(tmp_path: Path) -> None:
    """The control: the same files in a directory the guard was not given stay."""
    guard, seen = _guard(tmp_path)
    later = tmp_path / "later"
    (later / "a").mkdir(parents=True)
    (later / "a" / ".mcp.json").write_text("{}")
    guard.settle()
    assert seen == [] and (later / "a" / ".mcp.json").exists()
    guard.close()


def test_a_root_that_cannot_be_watched_is_refused_every_time(tmp_path: Path) -> None:
    guard, seen = _guard(tmp_path)
    deep = tmp_path / "deep"
    os.makedirs(deep, exist_ok=True)
    fd = os.open(deep, os.O_RDONLY)
    try:  # deeper than the guard follows, made one level at a time (no path is that long)
        for _ in range(MAX_DEPTH + 2):
            os.mkdir("x", dir_fd=fd)
            inner = os.open("x", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)
    for _ in range(2):
        with pytest.raises(GuardError, match="deeper than"):
            guard.add_roots([str(deep)], [], [])
        assert guard.roots == [str(tmp_path / "first")]
    (tmp_path / "first" / ".mcp.json").write_text("{}")
    guard.settle()
    assert [r.path for r in seen] == [str(tmp_path / "first" / ".mcp.json")]
    guard.close()
