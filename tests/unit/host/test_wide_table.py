"""The descriptor that gives every server a table of ``WIDE_TABLE`` slots, in process: one
per process, numbered for the table, closed on exec, and handed to bwrap (``--sync-fd``) only
when given. (Each server's own view of its table: ``tests/sandbox/test_fd_table.py``.)"""

from __future__ import annotations

import os

import pytest

from launcher.host.oscalls import WIDE_TABLE, wide_table_fd
from sandbox_profiles.bwrap import render
from sandbox_profiles.model import SandboxProfile


def test_the_descriptor_is_numbered_for_the_table_and_closed_on_exec() -> None:
    import fcntl

    fd = wide_table_fd()
    assert fd is not None and fd >= WIDE_TABLE - 1
    assert wide_table_fd() == fd  # one per process
    assert fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
    assert os.readlink(f"/proc/self/fd/{fd}") == os.devnull


@pytest.mark.parametrize("table", [None, 1023])
def test_bwrap_is_told_to_hold_it_only_when_given(table: int | None) -> None:
    profile = SandboxProfile("s", ("/usr/bin/true",), "/", {}, ())
    argv = render(profile, table_fd=table)
    held = [argv[i + 1] for i, arg in enumerate(argv[: argv.index("--")]) if arg == "--sync-fd"]
    assert held == ([] if table is None else ["1023"])
