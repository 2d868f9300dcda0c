"""``ironcurtain approvals`` (every session of the user's) against sockets planted in the
runtime directory: one not made as a session makes its own (open to others, in a
directory open to others, a link, another user's) is never connected to, so what it would
ask is never put to the human; one that sends garbage or floods is dropped, and the real
sessions are served all along. Each has its control: the same socket made as a session's
is attached."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.paths import IRONCURTAIN
from tests.support.probe import probe_session
from tests.support.sdk import answer_asked, call, connect, leave

pytestmark = needs_bwrap

ASK = {
    "name": "ask-before-env",
    "if": {"tool": ["env_value"]},
    "then": "escalate",
    "reason": "reading the server's environment needs a human",
}
# What a planted socket says to whoever connects: a session's hello and a question.
PLANTED_SAYS = (
    b'{"type": "attached", "servers": ["planted"]}\n'
    b'{"type": "request", "id": "q1", "server": "planted", "tool": "steal", "arguments": {}}\n'
)


class Planted:
    """A listening socket at ``ironcurtain-ID/approvals.sock`` in ``run_dir``, made by the
    test (this user's); it counts connections and says ``says`` to each."""

    def __init__(self, run_dir: Path, name: str, says: bytes = PLANTED_SAYS) -> None:
        self.dir = run_dir / f"ironcurtain-20990101-000000-{name}"
        self.dir.mkdir(mode=0o700)
        self.path = self.dir / "approvals.sock"
        self.says = says
        self.accepted: list[socket.socket] = []
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(self.path))
        os.chmod(self.path, 0o600)
        self.listener.listen(8)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted.append(conn)
            with suppress(OSError):
                conn.sendall(self.says)

    def close(self) -> None:
        self.listener.close()
        for conn in self.accepted:
            conn.close()


@contextmanager
def planted(run_dir: Path, *names: str) -> Iterator[list[Planted]]:
    made = [Planted(run_dir, name) for name in names]
    try:
        yield made
    finally:
        for plant in made:
            plant.close()


async def _terminal(user: Home) -> asyncio.subprocess.Process:
    """``ironcurtain approvals`` (every session) as ``user``."""
    return await asyncio.create_subprocess_exec(
        IRONCURTAIN, "approvals", env=user.env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def _said(terminal: asyncio.subprocess.Process, *needles: str) -> str:
    """What ``terminal`` shows up to the line where it has said every one of ``needles``."""
    assert terminal.stdout
    seen = ""
    while not all(needle in seen for needle in needles):
        line = await asyncio.wait_for(terminal.stdout.readline(), 60)
        assert line, f"the terminal ended before saying {needles!r}:\n{seen}"
        seen += line.decode()
    return seen


def _refused_then_attached(
    user: Home,
    plants: list[Planted],
    spoil: Callable[[Planted], str],
    fix: Callable[[Planted], None],
) -> list[str]:
    """A real session asking while ``plants`` (each spoiled by ``spoil``, which says how
    the terminal names the fault) are in the run dir; then each fixed: what the terminal
    showed at each step. The real session's question must be answered meanwhile."""
    args, _, _ = probe_session(user, first=[ASK])
    shown: list[str] = []
    out: list[tuple[bool, str]] = []

    async def scenario() -> None:
        async with connect(user, *args) as s:
            faults = [spoil(plant) for plant in plants]
            terminal = await _terminal(user)
            shown.append(await _said(terminal, "attached to", *faults))
            asked = asyncio.create_task(call(s, "probe__env_value", {"name": "HOME"}))
            shown.append(await answer_asked(terminal, b"a"))
            out.append(await asked)
            assert [len(p.accepted) for p in plants] == [0] * len(plants)
            # Control: made as a session makes its socket, each is attached and asks.
            for plant in plants:
                fix(plant)
            shown.append("".join([await answer_asked(terminal, b"d") for _ in plants]))
            shown.append(await leave(terminal))

    asyncio.run(scenario())
    assert out == [(False, "/tmp/home")]
    return shown


def test_a_socket_open_to_others_or_in_a_directory_open_to_others_is_not_attached(
    user: Home, run_dir: Path
) -> None:
    def spoil(plant: Planted) -> str:
        if plant.dir.name.endswith("opendir"):
            os.chmod(plant.dir, 0o755)
            return f"not attaching to {plant.path}: {plant.dir} is open to others (mode 0755)"
        if plant.dir.name.endswith("opensock"):
            os.chmod(plant.path, 0o666)
            return f"not attaching to {plant.path}: {plant.path} is open to others (mode 0666)"
        # A link to a socket of this user's elsewhere, in place of the socket.
        os.rename(plant.path, plant.dir.parent / "elsewhere.sock")
        os.symlink(plant.dir.parent / "elsewhere.sock", plant.path)
        return f"not attaching to {plant.path}: {plant.path} is not a socket"

    def fix(plant: Planted) -> None:
        os.chmod(plant.dir, 0o700)
        if plant.path.is_symlink():
            plant.path.unlink()
            os.rename(plant.dir.parent / "elsewhere.sock", plant.path)
        os.chmod(plant.path, 0o600)

    with planted(run_dir, "opendir", "opensock", "alink") as plants:
        shown = _refused_then_attached(user, plants, spoil, fix)
        # Before the fix: nothing of theirs was shown; after it, each was attached (the
        # control) and its question put to the human.
        assert "steal" not in "".join(shown[:2])
        assert all(len(p.accepted) == 1 for p in plants)
        for plant in plants:
            session = plant.dir.name.removeprefix("ironcurtain-")
            assert f"[session {session}] planted/steal needs your approval" in shown[2]


@pytest.mark.skipif(os.geteuid() != 0, reason="making a socket another user's needs root")
def test_another_users_socket_in_the_run_dir_is_not_attached(user: Home, run_dir: Path) -> None:
    def spoil(plant: Planted) -> str:
        os.chown(plant.path, 65534, 65534)
        return f"not attaching to {plant.path}: {plant.path} belongs to uid 65534, not to this user"

    with planted(run_dir, "theirs") as plants:
        shown = _refused_then_attached(user, plants, spoil, lambda p: os.chown(p.path, 0, 0))
        assert "steal" not in "".join(shown[:2])
        assert len(plants[0].accepted) == 1  # the control: once it is root's, attached
        assert "planted/steal needs your approval" in shown[2]


def test_a_session_socket_sending_garbage_is_dropped_and_the_others_are_served(
    user: Home, run_dir: Path
) -> None:
    garbage = [
        b"not json",
        b"[1, 2]",
        b'{"type": "request"}',  # no id
        b'{"type": "request", "id": 5, "server": "x"}',  # not a string
        b"\xff\xfe\x00",
        b"[" * 200_000,  # nesting deeper than a parser recurses
        b'{"type": "closed", "id": "nothing"}',
        json.dumps({"type": "attached", "servers": ["\x1b]0;owned\x07", 7]}).encode(),
    ]
    says = b"\n".join(garbage) + b"\n" + b"x" * (17 * 2**20)  # then a line without end
    args, _, _ = probe_session(user, first=[ASK])
    out: list[tuple[bool, str]] = []
    shown: list[str] = []

    async def scenario() -> None:
        async with connect(user, *args) as s:
            with planted(run_dir, "garbage") as (plant,):
                plant.says = says
                terminal = await _terminal(user)
                shown.append(await _said(terminal, "detached from it", "(servers: probe)"))
                asked = asyncio.create_task(call(s, "probe__env_value", {"name": "HOME"}))
                shown.append(await answer_asked(terminal, b"a"))
                out.append(await asked)
                shown.append(await leave(terminal))
                assert plant.accepted[0].recv(1) == b""  # the terminal hung up on it

    asyncio.run(scenario())
    assert out == [(False, "/tmp/home")]
    assert "sent a message over 16777216 bytes" in shown[0]
    assert "\x1b" not in "".join(shown)  # the escape in its hello is shown as text
    assert "probe/env_value needs your approval" in shown[1]
