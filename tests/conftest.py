from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.home import Home, make_home
from tests.support.web import serving_pages

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
            item.add_marker(pytest.mark.skipif(missing, reason="bubblewrap not installed"))


@pytest.fixture
def user(tmp_path: Path) -> Home:
    return make_home(tmp_path)


@pytest.fixture
def web() -> Iterator[tuple[int, list[str]]]:
    """A loopback web server (``tests.support.web``): its port, and the requests it got."""
    with serving_pages() as served:
        yield served
