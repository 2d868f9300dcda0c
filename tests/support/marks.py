"""Marks for what a test needs of the machine.

``sandbox``: the test starts bubblewrap or real servers. ``needs_bwrap`` is that mark for a
test that cannot run without bwrap (``tests/conftest.py`` skips it where bwrap is not
installed); a test that starts real servers without a sandbox (its own control, or the relay
under test) is marked ``pytest.mark.sandbox`` alone. Every test under ``tests/sandbox/`` is
marked ``sandbox`` too, so ``pytest -m "not sandbox"`` runs the in-process tests alone.

What a test needs installed (a tool, a client, ACLs on the filesystem) is skipped where it is
missing, with ``needs_installed`` or ``lacks``, except where ``CI=true``: CI installs all of
it, so there the test runs and fails instead of passing unseen. What a test needs to *be*
(root, or an ordinary user) stays a plain skip: CI runs the suite both ways."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"

needs_bwrap = pytest.mark.sandbox(needs="bwrap")


def needs_installed(missing: bool, reason: str) -> pytest.MarkDecorator:
    """Skip when ``missing`` (``reason`` says what to install), never in CI."""
    return pytest.mark.skipif(missing and not IN_CI, reason=reason)


def lacks(reason: str) -> NoReturn:
    """The machine lacks what this test needs: skipped, or in CI a failure naming it."""
    if IN_CI:
        pytest.fail(f"CI installs everything the tests need, yet: {reason}")
    pytest.skip(reason)
