"""Marks for what a test needs of the machine.

``sandbox``: the test starts bubblewrap or real servers. ``needs_bwrap`` is that mark for a
test that cannot run without bwrap (``tests/conftest.py`` skips it where bwrap is not
installed); a test that starts real servers without a sandbox (its own control, or the relay
under test) is marked ``pytest.mark.sandbox`` alone. Every test under ``tests/sandbox/`` is
marked ``sandbox`` too, so ``pytest -m "not sandbox"`` runs the in-process tests alone."""

from __future__ import annotations

import pytest

needs_bwrap = pytest.mark.sandbox(needs="bwrap")
