"""Skip marks for what a machine may lack."""

from __future__ import annotations

import shutil

import pytest

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")
