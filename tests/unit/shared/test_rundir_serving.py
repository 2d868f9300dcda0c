"""Which runtime directories ``ironcurtain approvals`` serves: this user's sessions started
with the same preferred place, including those whose paths were too long for it and went
to /tmp; never a session of another preferred place's kept in /tmp (another login's, or
another test run's on the same machine), never another user's directory."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.shared import rundir
from tests.support.home import Home
from tests.support.paths import IRONCURTAIN


@pytest.fixture
def in_tmp() -> Iterator[list[Path]]:
    """Runtime directories made in /tmp by a test, removed after it."""
    made: list[Path] = []
    yield made
    for path in made:
        shutil.rmtree(path, ignore_errors=True)


def _session(path: str, made: list[Path]) -> str:
    os.makedirs(path, mode=0o700)
    made.append(Path(path))
    rundir.mark_origin(path)
    return path


def test_a_session_that_went_to_tmp_is_served_with_the_place_it_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_tmp: list[Path]
) -> None:
    deep = tmp_path / ("d" * 80)  # a socket path there would be too long
    deep.mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(deep))
    sid = "20990101-000000-" + uuid.uuid4().hex[:6]
    moved = rundir.path_for(sid)
    assert moved == f"/tmp/ironcurtain-{sid}"
    _session(moved, in_tmp)
    here = _session(str(deep / f"ironcurtain-{sid}x"), in_tmp)
    assert {moved, here} <= set(rundir.serving())
    # Another place's terminal (another login, another test run) does not serve them, nor
    # does one without a preferred place (the /tmp sessions that never moved).
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert not {moved, here} & set(rundir.serving())
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert moved not in rundir.serving()


def test_a_tmp_session_of_another_place_is_not_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_tmp: list[Path]
) -> None:
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    other = _session(f"/tmp/ironcurtain-20990101-000000-{uuid.uuid4().hex[:6]}", in_tmp)
    assert other in rundir.serving()  # the control: served where /tmp is the place
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert other not in rundir.serving()


def test_what_is_not_a_sessions_socket_is_doubted(in_tmp: list[Path]) -> None:
    tmp_path = Path(tempfile.mkdtemp(prefix="icrd-", dir="/tmp"))  # short: a socket fits
    in_tmp.append(tmp_path)
    session = tmp_path / "ironcurtain-20990101-000000-abcdef"
    session.mkdir(mode=0o700)
    path = session / "approvals.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    os.chmod(path, 0o600)
    assert rundir.doubt(str(path)) == ""  # the control: as a session makes it
    os.chmod(path, 0o660)
    assert rundir.doubt(str(path)) == f"{path} is open to others (mode 0660)"
    os.chmod(path, 0o600)
    os.chmod(session, 0o711)
    assert rundir.doubt(str(path)) == f"{session} is open to others (mode 0711)"
    os.chmod(session, 0o700)
    os.rename(path, tmp_path / "real.sock")
    os.symlink(tmp_path / "real.sock", path)
    assert rundir.doubt(str(path)) == f"{path} is not a socket"
    path.unlink()
    path.write_text("")
    assert rundir.doubt(str(path)) == f"{path} is not a socket"
    listener.close()


def test_approvals_for_one_session_names_why_its_socket_is_not_attached(
    user: Home, in_tmp: list[Path]
) -> None:
    run = Path(tempfile.mkdtemp(prefix="icrd-", dir="/tmp"))
    in_tmp.append(run)
    user.env["XDG_RUNTIME_DIR"] = str(run)
    session = run / "ironcurtain-20990101-000000-abcdef"
    session.mkdir(mode=0o700)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(session / "approvals.sock"))
    listener.listen(1)
    os.chmod(session / "approvals.sock", 0o666)  # anyone may connect: not a session's
    done = subprocess.run(
        [IRONCURTAIN, "approvals", "--session", "20990101-000000-abcdef"], input="",
        capture_output=True, text=True, env=user.env, timeout=60,
    )  # fmt: skip
    listener.close()
    assert done.returncode == 2, done.stderr
    assert "is open to others (mode 0666)" in done.stderr and "Traceback" not in done.stderr


def test_approvals_reading_answers_from_nothing_says_so(user: Home, in_tmp: list[Path]) -> None:
    run = Path(tempfile.mkdtemp(prefix="icrd-", dir="/tmp"))
    in_tmp.append(run)
    user.env["XDG_RUNTIME_DIR"] = str(run)
    with open(os.devnull) as nothing:
        done = subprocess.run(
            [IRONCURTAIN, "approvals"], stdin=nothing, capture_output=True, text=True,
            env=user.env, timeout=60,
        )  # fmt: skip
    assert done.returncode == 2
    assert "reads its answers from a terminal or a pipe" in done.stderr
