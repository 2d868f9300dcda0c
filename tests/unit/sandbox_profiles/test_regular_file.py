"""The one reader of files another may have put there: nothing but a regular file is read,
never more than the limit, and opening what is there never waits."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from sandbox_profiles.gitconfig import UnreadableConfig, read_bounded, read_config
from sandbox_profiles.regular_file import UNTRUSTED, NotRegular, read_regular


def _read(path: Path, limit: int) -> bytes:
    fd = os.open(path, UNTRUSTED)
    try:
        return read_regular(fd, limit)[0]
    finally:
        os.close(fd)


def test_a_regular_file_within_the_limit_is_read_whole(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x" * 3_000_000)
    assert _read(tmp_path / "f", 3_000_000) == b"x" * 3_000_000


@pytest.mark.parametrize(
    ("path", "kind"), [("/dev/zero", "a character device"), (".", "a directory")]
)
def test_what_is_not_a_regular_file_is_not_read(path: str, kind: str) -> None:
    with pytest.raises(NotRegular) as refused:
        _read(Path(path), 10)
    assert refused.value.kind == kind


def test_a_fifo_is_opened_without_waiting_and_not_read(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(NotRegular, match=r"not a regular file \(a FIFO\)"):
        _read(tmp_path / "fifo", 10)


def test_a_larger_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x" * 11)
    with pytest.raises(NotRegular, match="larger than 10 bytes") as refused:
        _read(tmp_path / "f", 10)
    assert refused.value.size == 11


def _returns(call: object, seconds: float = 20) -> bool:
    """Whether ``call()`` returns (or raises) within ``seconds``."""
    done = threading.Event()

    def run() -> None:
        with contextlib.suppress(Exception):
            call()  # type: ignore[operator]
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return done.wait(seconds)


def test_a_project_file_that_is_a_fifo_does_not_hold_the_start(tmp_path: Path) -> None:
    """A hostile project's `.envrc` (or mise file, or an instruction file's import) made a
    FIFO: what reads it for the sandbox's profile says it cannot be read, at once."""
    fifo = tmp_path / ".envrc"
    os.mkfifo(fifo)
    refusals: list[str] = []

    def look() -> None:
        try:
            read_bounded(str(fifo), 1 << 20)
        except UnreadableConfig as exc:
            refusals.append(exc.reason)

    assert _returns(look)
    assert refusals == ["is not a regular file (a FIFO)"]

    def parse() -> None:
        with pytest.raises(UnreadableConfig):
            read_config(str(fifo))

    assert _returns(parse)
    # CONTROL: reading it as a file is read waits for a writer that never comes.
    plain = [sys.executable, "-c", f"open({str(fifo)!r}, 'rb').read()"]
    with pytest.raises(subprocess.TimeoutExpired):
        subprocess.run(plain, timeout=3, check=False)
