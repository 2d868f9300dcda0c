from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.home import Home, make_home
from tests.support.marks import needs_installed
from tests.support.web import serving_pages

if TYPE_CHECKING:
    from tests.support.otlp import Receiver

SANDBOX_TESTS = Path(__file__).parent / "sandbox"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under ``tests/sandbox/`` is marked ``sandbox``; a test that needs bwrap
    (``tests.support.marks.needs_bwrap``) is skipped where it is not installed."""
    missing = shutil.which("bwrap") is None
    for item in items:
        if item.path.is_relative_to(SANDBOX_TESTS):
            item.add_marker(pytest.mark.sandbox)
        needs = {m.kwargs.get("needs") for m in item.iter_markers("sandbox")}
        if "bwrap" in needs:
            item.add_marker(needs_installed(missing, "bubblewrap not installed"))


@pytest.fixture(autouse=True)
def _close_what_a_test_opened() -> Iterator[None]:
    """The audit logs of the relay harnesses a test built, and the clients it started, are
    closed after it."""
    from tests.support import client

    client.hold()
    mark = len(client.HELD or ())
    yield
    relay = sys.modules.get("tests.support.relay")
    while relay is not None and relay.OPEN_LOGS:
        relay.OPEN_LOGS.pop().close()
    client.release_since(mark)


@pytest.fixture
def user(tmp_path: Path) -> Home:
    return make_home(tmp_path)


@pytest.fixture
def run_dir(user: Home) -> Path:
    """``user``'s own runtime directory (``XDG_RUNTIME_DIR`` of what it runs), short enough
    that its sessions' sockets fit in it: its sessions, and no other test's, are found."""
    return Path(user.env["XDG_RUNTIME_DIR"])


@pytest.fixture
def web() -> Iterator[tuple[int, list[str]]]:
    """A loopback web server (``tests.support.web``): its port, and the requests it got."""
    with serving_pages() as served:
        yield served


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    """An OTLP/HTTP receiver on loopback, and the environment of a session exporting to it."""
    from tests.support.otlp import receiving

    with receiving(monkeypatch) as served:
        yield served
