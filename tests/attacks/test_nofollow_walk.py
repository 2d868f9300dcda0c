"""The one walk that never follows a symlink (``launcher.host.nofollow.descend``), attacked
through both of its callers: the trusted process walking a tree a sandboxed server shapes
(``host.nofollow``), and wrap reading a hostile project's client files
(``clients.file_io``). A symlink planted mid-path, a FIFO where a directory or the file
should be, a directory or the file swapped for a link while it is read, a ``..`` among the
parts: none of them leads either caller to the user's own file, and none hangs it. Each
beside its control: the same path walked the ordinary way reaches the user's file (or
hangs on the FIFO)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.clients.files.file_io import Refused, list_project, read_project
from launcher.host.nofollow import SymlinkOnTheWay, descend, entries, open_chain
from launcher.host.oscalls import DIR, READ_FILE

SECRET = "the user's own secret"
RENAME_EXCHANGE = 2
SWAPS = 400  # reads raced against the swapping (each swap is a few microseconds)


@pytest.fixture
def scene(tmp_path: Path) -> tuple[Path, Path]:
    """A project (``proj``) and the user's own directory (``mine``) holding ``mcp.json``
    and ``secret`` with the secret; the project's ``.vscode`` is a plain directory."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "mcp.json").write_text(SECRET)
    (mine / "secret").write_text(SECRET)
    project = tmp_path / "proj"
    (project / ".vscode").mkdir(parents=True)
    (project / ".vscode" / "mcp.json").write_text("{}")
    return project, mine


def _plant_link(project: Path, mine: Path) -> None:
    """The project's ``.vscode`` made a link to the user's directory."""
    (project / ".vscode" / "mcp.json").unlink()
    (project / ".vscode").rmdir()
    (project / ".vscode").symlink_to(mine)


def _read(root: Path, parts: tuple[str, ...]) -> str:
    """``root/parts`` read through the kept walk, as the trusted process reads a file."""
    fd = descend(os.open(root, DIR), parts, READ_FILE)
    try:
        return os.read(fd, 1 << 16).decode()
    finally:
        os.close(fd)


def test_a_link_planted_mid_path_is_refused_by_both_callers(scene: tuple[Path, Path]) -> None:
    project, mine = scene
    _plant_link(project, mine)
    # Control: walked the ordinary way, the project's path is the user's file.
    assert (project / ".vscode" / "mcp.json").read_text() == SECRET
    with pytest.raises(Refused, match=r"\.vscode is a symbolic link; ironcurtain does not"):
        read_project(project, ".vscode/mcp.json")
    with pytest.raises(Refused, match=r"\.vscode is a symbolic link"):
        list_project(project, ".vscode")
    with pytest.raises(SymlinkOnTheWay) as caught:
        _read(project, (".vscode", "secret"))
    assert (caught.value.filename, caught.value.target) == (".vscode", str(mine))
    assert entries(str(project), (".vscode",)) is None  # gone to the tree's walkers
    assert isinstance(caught.value, NotADirectoryError)  # what the walkers took it for


def test_a_fifo_on_the_way_or_as_the_file_hangs_neither_caller(
    scene: tuple[Path, Path],
) -> None:
    project, _ = scene
    (project / ".vscode" / "mcp.json").unlink()
    os.mkfifo(project / ".vscode" / "mcp.json")
    os.mkfifo(project / ".cursor")
    # Control: an ordinary open of the FIFO waits for a writer that never comes.
    blocked = threading.Event()

    def ordinary() -> None:
        with open(project / ".vscode" / "mcp.json", "rb"):
            blocked.set()

    waiting = threading.Thread(target=ordinary, daemon=True)
    waiting.start()
    waiting.join(0.5)
    assert waiting.is_alive() and not blocked.is_set()
    with open(project / ".vscode" / "mcp.json", "wb"):  # lets the control go
        waiting.join(5)
    with pytest.raises(Refused, match=r"not a regular file \(a FIFO\): not read"):
        read_project(project, ".vscode/mcp.json")
    assert read_project(project, ".cursor/mcp.json") is None
    assert list_project(project, ".cursor") == []
    with pytest.raises(NotADirectoryError):
        _read(project, (".cursor", "mcp.json"))
    assert entries(str(project), (".cursor",)) is None


def test_dot_dot_and_slashes_are_not_names(scene: tuple[Path, Path]) -> None:
    project, mine = scene
    inner = project / ".vscode"
    # Control: ``..`` from the project's directory is outside it.
    fd = os.open(inner, DIR)
    try:
        up = os.open("..", DIR, dir_fd=fd)
        os.close(up)
    finally:
        os.close(fd)
    (project / "mine").symlink_to(mine)
    for parts in (("..", "mine", "secret"), ("mine/secret",), ("",), (".", "mcp.json")):
        with pytest.raises(ValueError, match="not one name"):
            _read(inner if parts[0] == ".." else project, parts)
    with pytest.raises(ValueError, match="not one name"):
        open_chain(str(inner), ("..", "mine"))
    with pytest.raises(ValueError, match="not one name"):
        read_project(inner, "../mine/secret")


def _exchange(directory: Path, a: str, b: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(directory, DIR)
    try:
        if libc.renameat2(fd, a.encode(), fd, b.encode(), RENAME_EXCHANGE) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), a)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _swapping(directory: Path, a: str, b: str) -> Iterator[None]:
    """``directory/a`` and ``directory/b`` exchanged (atomically) over and over."""
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            _exchange(directory, a, b)

    swapper = threading.Thread(target=swap, daemon=True)
    swapper.start()
    try:
        yield
    finally:
        stop.set()
        swapper.join(5)


def _outcomes(read: object, count: int = SWAPS) -> set[str]:
    seen: set[str] = set()
    for _ in range(count):
        try:
            seen.add(str(read()))  # type: ignore[operator]
        except (OSError, Refused) as exc:
            seen.add(type(exc).__name__)
    return seen


def _until_read(read: object, rounds: int = 20) -> set[str]:
    """``_outcomes`` of ``read`` gathered until one read got the real file (``{}``), at most
    ``rounds`` times: on a loaded machine every read of a round may meet the link. What is
    asserted of the secret holds for every read of every round."""
    seen = _outcomes(read)
    for _ in range(rounds):
        if "{}" in seen:
            break
        seen |= _outcomes(read)
    return seen


def test_a_directory_swapped_for_a_link_while_walked(scene: tuple[Path, Path]) -> None:
    project, mine = scene
    (project / ".vscode" / "secret").write_text("{}")
    (project / "swap").symlink_to(mine)
    with _swapping(project, ".vscode", "swap"):
        ordinary = _outcomes(lambda: (project / ".vscode" / "secret").read_text())
        kept = _until_read(lambda: _read(project, (".vscode", "secret")))
        wrap = _until_read(
            lambda: s.text if (s := read_project(project, ".vscode/mcp.json")) else ""
        )
    assert SECRET in ordinary  # control: the race is won
    assert SECRET not in kept and "{}" in kept, kept
    assert SECRET not in wrap and "{}" in wrap, wrap


def test_the_file_swapped_for_a_link_while_read(scene: tuple[Path, Path]) -> None:
    project, mine = scene
    inner = project / ".vscode"
    (inner / "swap").symlink_to(mine / "mcp.json")
    with _swapping(inner, "mcp.json", "swap"):
        ordinary = _outcomes(lambda: (inner / "mcp.json").read_text())
        kept = _until_read(lambda: _read(project, (".vscode", "mcp.json")))
        wrap = _until_read(
            lambda: s.text if (s := read_project(project, ".vscode/mcp.json")) else ""
        )
    assert SECRET in ordinary  # control: the race is won
    assert SECRET not in kept and "{}" in kept, kept
    assert SECRET not in wrap and "{}" in wrap, wrap
