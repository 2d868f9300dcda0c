"""A server's process tree read from /proc (launcher.host.proctree): every descendant, what each
uses, and a kill that spares a pid the kernel has given to another process since."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from launcher.host import proctree
from launcher.host.proctree import Member, kill, over_limits, process_tree
from sandbox_profiles.model import Limits


def _start_tree() -> subprocess.Popen[bytes]:
    """A parent with a child and a grandchild, which burns a little CPU and holds 64 MiB."""
    grandchild = (
        "import time\n"
        "x = bytearray(64 << 20)\n"
        "t = time.process_time()\n"
        "while time.process_time() - t < 0.3: pass\n"
        "time.sleep(60)\n"
    )
    child = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {grandchild!r}])"
    parent = (
        "import subprocess, sys, time; "
        f"subprocess.Popen([sys.executable, '-c', {child!r}]); time.sleep(60)"
    )
    return subprocess.Popen([sys.executable, "-c", parent])


def _wait_for(proc: subprocess.Popen[bytes], count: int) -> list[Member]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        tree = process_tree(proc.pid)
        if len(tree) == count and sum(m.cpu for m in tree) >= 0.25:
            return tree
        time.sleep(0.05)
    raise AssertionError(f"the tree did not come up: {process_tree(proc.pid)}")


def test_the_tree_is_every_descendant_with_what_it_uses() -> None:
    proc = _start_tree()
    try:
        tree = _wait_for(proc, 3)
        expected = [proc.pid] + [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        assert [m.pid for m in tree] == expected
        assert sum(m.rss for m in tree) > 64 << 20
        for member in tree:  # the start time psutil names a process by
            started = psutil.boot_time() + member.started / os.sysconf("SC_CLK_TCK")
            assert abs(started - psutil.Process(member.pid).create_time()) < 0.05
        assert over_limits(Limits(memory=32 << 20), tree) == (
            "it used more memory than its limit of 32 MiB"
        )
        assert over_limits(Limits(processes=0), tree) == "it ran more processes than its limit of 0"
        assert over_limits(Limits(cpu_seconds=0), tree) == (
            "it used more CPU time than its limit of 0 s"
        )
        assert over_limits(Limits(memory=1 << 30, processes=1, cpu_seconds=60), tree) is None
    finally:
        kill(process_tree(proc.pid))
        proc.wait()


def test_a_kill_spares_a_pid_that_names_another_process_now() -> None:
    proc = _start_tree()
    try:
        tree = _wait_for(proc, 3)
        # The same pids, as if each had been given to a process started later.
        kill([member._replace(started=member.started + 1) for member in tree])
        time.sleep(0.2)
        assert proc.poll() is None and len(process_tree(proc.pid)) == 3
        kill(tree)
        assert proc.wait(timeout=10) == -9
        assert process_tree(proc.pid) == []
    finally:
        kill(process_tree(proc.pid))
        proc.wait()


def test_without_the_kernels_children_lists_every_parent_is_scanned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proc = _start_tree()
    try:
        tree = _wait_for(proc, 3)
        real_open = open

        def no_children_lists(path: object, *args: object, **kwargs: object) -> object:
            if str(path).endswith("/children"):
                raise FileNotFoundError(path)
            return real_open(path, *args, **kwargs)  # type: ignore[call-overload]

        monkeypatch.setattr("builtins.open", no_children_lists)
        assert sorted(m.pid for m in process_tree(proc.pid)) == sorted(m.pid for m in tree)
    finally:
        monkeypatch.undo()
        kill(process_tree(proc.pid))
        proc.wait()


def test_without_procfs_psutil_reads_the_same_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    # What a system without Linux's /proc (macOS) gets: the same processes and limits.
    proc = _start_tree()
    try:
        tree = _wait_for(proc, 3)
        monkeypatch.setattr(proctree, "PROCFS", False)
        other = process_tree(proc.pid)
        assert [m.pid for m in other] == [m.pid for m in tree]
        assert over_limits(Limits(memory=32 << 20), other) is not None
        kill([m._replace(started=m.started + 1) for m in other])
        time.sleep(0.2)
        assert proc.poll() is None
        kill(other)
        assert proc.wait(timeout=10) == -9
    finally:
        monkeypatch.undo()
        kill(process_tree(proc.pid))
        proc.wait()


def test_a_reaped_server_is_never_looked_at_or_killed_by_its_pid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Once a server has exited and been reaped, the kernel may hand its pid (and process
    # group id) to any new process: halting or stopping it then touches nothing.
    import asyncio

    from launcher.host.launch_spec import LaunchSpec
    from launcher.servers import connection

    touched: list[str] = []

    def kill_tree(tree: list[Member]) -> None:
        if tree:
            touched.append(f"kill {tree}")

    def tree_of(pid: int) -> list[Member]:
        touched.append("tree")
        return []

    monkeypatch.setattr(os, "killpg", lambda *a: touched.append(f"killpg{a}"))
    monkeypatch.setattr(connection, "kill", kill_tree)
    monkeypatch.setattr(connection, "process_tree", tree_of)

    async def scenario() -> connection.ServerConnection:
        spec = LaunchSpec("gone", [sys.executable, "-c", "pass"], dict(os.environ), "/", None)
        conn = connection.ServerConnection(spec)
        await conn.start()
        await conn.exited.wait()
        assert not conn.running  # exited and reaped
        conn.halt("it used more memory than its limit of 1 MiB")
        await conn.stop()
        return conn

    conn = asyncio.run(scenario())
    assert touched == []
    assert conn.limit_reason == "it used more memory than its limit of 1 MiB"
