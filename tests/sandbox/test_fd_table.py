"""Every server starts with a descriptor table of ``WIDE_TABLE`` slots, so a threaded
server opening its files does not stall while Linux grows a table its threads share (an RCU
grace period each time: the Node filesystem server started 20-30 ms slower sandboxed than
bare). The descriptor that sizes it is never the server's: a sandboxed server gets the
table through ``bwrap --sync-fd`` without the descriptor itself, an unsandboxed one through
the launcher's own table. (The descriptor itself, in process:
``tests/unit/host/test_wide_table.py``.)"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from launcher.host.oscalls import WIDE_TABLE, wide_table_fd
from sandbox_profiles.bwrap import render
from sandbox_profiles.profile import ProfileRequest, build_profile, write_runtime_files
from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.probe import probe_server_config, run_probe


def _seen_by_the_server(user: Home, sandboxed: bool) -> tuple[int, list[int]]:
    """The probe's own view, from a tool call: its table's size and its open descriptors."""
    answers = run_probe(
        user,
        user.ws(),
        probe_server_config(sandboxed),
        lambda: [
            ("read_path", {"path": "/proc/self/status"}),
            ("list_dir", {"path": "/proc/self/fd"}),
        ],
    )
    (status_failed, status), (fds_failed, fds) = answers
    assert not status_failed and not fds_failed, answers
    found = re.search(r"^FDSize:\s+(\d+)$", status, re.M)
    assert found, status
    # The listing includes the descriptor listdir itself has open on the directory.
    return int(found.group(1)), [int(fd) for fd in json.loads(fds.removeprefix("OK "))]


@needs_bwrap
def test_a_sandboxed_server_starts_with_a_wide_table_and_not_the_descriptor(user: Home) -> None:
    size, fds = _seen_by_the_server(user, sandboxed=True)
    assert size >= WIDE_TABLE
    assert max(fds) < WIDE_TABLE - 1, fds  # bwrap closed it in the server's process


def test_an_unsandboxed_server_starts_with_a_wide_table_and_not_the_descriptor(
    user: Home,
) -> None:
    size, fds = _seen_by_the_server(user, sandboxed=False)
    assert size >= WIDE_TABLE
    assert max(fds) < WIDE_TABLE - 1, fds


@needs_bwrap
@pytest.mark.parametrize("told", [True, False], ids=["sync-fd", "inherited (control)"])
def test_bwrap_keeps_the_descriptor_out_of_the_server_only_when_told_to_hold_it(
    tmp_path: Path, told: bool
) -> None:
    """The same descriptor passed to bwrap both times: held with ``--sync-fd``, the server
    (a shell listing its own descriptors) does not have it; merely inherited, it does."""
    fd = wide_table_fd()
    assert fd is not None
    ws, runtime = tmp_path / "ws", tmp_path / "run"
    ws.mkdir()
    write_runtime_files(str(runtime), os.getuid(), os.getgid())
    script = 'for f in /proc/$$/fd/*; do echo "fd ${f##*/}"; done'
    request = ProfileRequest(
        name="fds",
        command_path="/bin/sh",
        args=["-c", script],
        env={},
        workspace=str(ws),
        runtime_dir=str(runtime),
        search_path=["/usr/bin", "/bin"],
        host_env=os.environ,
    )
    profile = build_profile(request)
    done = subprocess.run(
        render(profile, table_fd=fd if told else None),
        env=dict(profile.env),
        pass_fds=[fd],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    held = {int(line.split()[1]) for line in done.stdout.splitlines() if line.startswith("fd ")}
    assert {0, 1, 2} <= held
    assert (fd in held) is not told
