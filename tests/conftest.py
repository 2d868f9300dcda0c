from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.home import Home, make_home


@pytest.fixture
def user(tmp_path: Path) -> Home:
    return make_home(tmp_path)
