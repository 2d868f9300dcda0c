"""The carry-over of a widened call, attacked where the server cannot reach: the instants
between ironcurtain's own checks and its own writes on the host."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from launcher.host.fdtree import TooLarge
from launcher.host.oscalls import rename_noreplace
from launcher.relay.approving.grants import CannotWiden, Grant
from launcher.servers import staging
from launcher.servers.staging import Stage

# The kernel's rename without replacing: (source dir fd, name, destination dir fd, name).
Rename = Callable[[int, str, int, str], None]


def _stage(tmp_path: Path) -> tuple[Stage, Path]:
    run = tmp_path / "run"
    run.mkdir()
    host = tmp_path / "host"
    host.mkdir()
    return Stage(str(run), "probe", None), host


def _move(host: Path) -> tuple[Grant, Grant]:
    source = Grant("source", str(host / "draft.txt"), "read", True, "file")
    target = Grant("destination", str(host / "final.txt"), "write", False, "absent")
    return source, target


def _server_moves(stage: Stage, source: Grant, target: Grant) -> None:
    """What the server did inside its instance: the staged file moved."""
    os.rename(stage.root + source.path, stage.root + target.path)


@pytest.mark.parametrize("guarded", [True, False])
def test_a_source_swapped_for_a_link_just_before_the_move_is_not_moved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, guarded: bool
) -> None:
    # Something of the host's own that can reach the source (a second session's server,
    # a kept instance) swaps it for a symlink to a secret after the checks, just before the
    # host's rename: a link at the approved destination would give the next reader the
    # secret. The rename lands on a hidden name and what landed is checked first.
    stage, host = _stage(tmp_path)
    (host / "draft.txt").write_text("the draft\n")
    secret = tmp_path / "secret"
    secret.write_text("the user's key\n")
    source, target = _move(host)
    stage.prepare([source, target], [], str(host))
    _server_moves(stage, source, target)
    real = rename_noreplace
    swapped: list[str] = []

    def swap_then_rename(src_fd: int, src: str, dst_fd: int, dst: str) -> None:
        if not swapped:
            os.unlink(src, dir_fd=src_fd)
            os.symlink(str(secret), src, dir_fd=src_fd)
            swapped.append(src)
            if not guarded:  # the protection off: straight to the destination
                dst = "final.txt"
        real(src_fd, src, dst_fd, dst)

    monkeypatch.setattr(staging, "rename_noreplace", swap_then_rename)
    if not guarded:
        monkeypatch.setattr(Stage, "_moved", _unguarded(swap_then_rename))
    records, why = stage.carry_over([source, target])
    assert swapped
    final = host / "final.txt"
    if not guarded:
        assert final.is_symlink() and final.read_text() == "the user's key\n"
        return
    assert why is not None and "was replaced while it was being moved" in why
    assert not final.exists() and not final.is_symlink()
    assert (host / "draft.txt").is_symlink()  # put back as it was found
    assert [p.name for p in host.iterdir()] == ["draft.txt"]  # no hidden name left
    assert {r["outcome"] for r in records} == {"failed"}


def _unguarded(rename: Rename) -> Callable[[Stage, Grant, Grant], bool]:
    """The move as it was before the check: one ``rename``, straight to the target."""

    def moved(self: Stage, source: Grant, target: Grant) -> bool:
        src_parent, src_name = os.path.split(source.path)
        dst_parent, dst_name = os.path.split(target.path)
        src_fd = os.open(src_parent, os.O_RDONLY | os.O_DIRECTORY)
        dst_fd = os.open(dst_parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            rename(src_fd, src_name, dst_fd, dst_name)
        finally:
            os.close(src_fd)
            os.close(dst_fd)
        return True

    return moved


def test_a_file_grown_past_the_bound_is_not_installed_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A kept instance can grow its file after the size was looked at: the copy onto the
    # host stops at the bound, the host's file is as it was, and no temporary file stays.
    stage, host = _stage(tmp_path)
    (host / "notes.txt").write_text("the user's notes\n")
    monkeypatch.setattr(staging, "MAX_STAGED_BYTES", 1 << 20)
    grant = Grant("path", str(host / "notes.txt"), "write", False, "file")
    stage.prepare([grant], [], str(host))
    Path(stage.root + grant.path).write_bytes(b"x" * ((1 << 20) + 1))
    with pytest.raises(TooLarge):
        stage._install(grant.path, grant.path, stage.root)
    assert (host / "notes.txt").read_text() == "the user's notes\n"
    assert [p.name for p in host.iterdir()] == ["notes.txt"]
    # At the bound exactly, it is written.
    Path(stage.root + grant.path).write_bytes(b"x" * (1 << 20))
    assert stage._install(grant.path, grant.path, stage.root) == "written"
    assert (host / "notes.txt").stat().st_size == 1 << 20


def test_a_copied_directory_holds_files_and_links_never_sockets_or_fifos(tmp_path: Path) -> None:
    stage, host = _stage(tmp_path)
    notes = host / "notes"
    (notes / "sub").mkdir(parents=True)
    (notes / "a.txt").write_text("a\n")
    (notes / "sub" / "b.txt").write_text("b\n")
    (notes / "link").symlink_to("a.txt")
    os.mkfifo(notes / "pipe")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(notes / "agent.sock"))
    (notes / "private").mkdir()
    (notes / "private" / "key").write_text("hidden\n")
    try:
        grant = Grant("path", str(notes), "read", False, "directory")
        stage.prepare([grant], [], str(host), hidden=[str(notes / "private")])
    finally:
        listener.close()
    copy = Path(stage.root + str(notes))
    assert sorted(p.name for p in copy.iterdir()) == ["a.txt", "link", "sub"]
    assert (copy / "sub" / "b.txt").read_text() == "b\n"
    assert os.readlink(copy / "link") == "a.txt"


@pytest.mark.parametrize(("entries", "size"), [(3, 1 << 20), (50, 10)])
def test_a_directory_too_large_to_copy_fails_the_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entries: int, size: int
) -> None:
    stage, host = _stage(tmp_path)
    notes = host / "notes"
    notes.mkdir()
    for i in range(4):
        (notes / f"{i}.txt").write_text("0123456789\n")
    monkeypatch.setattr(staging, "MAX_STAGED_ENTRIES", entries)
    monkeypatch.setattr(staging, "MAX_STAGED_BYTES", size)
    grant = Grant("path", str(notes), "read", False, "directory")
    with pytest.raises(CannotWiden, match=f"path: {notes} holds more than .*allowRead"):
        stage.prepare([grant], [], str(host))
