"""The host's facts a server's launch needs: the thread count its uid has already (what its
process limit is added to)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import psutil

from launcher.host.machine import _count_threads


def _status(proc: Path, pid: int, uid: int, threads: int | None) -> None:
    (proc / str(pid)).mkdir()
    lines = [f"Name:\tx{pid}", f"Uid:\t{uid}\t{uid + 7}\t{uid}\t{uid}"]
    if threads is not None:
        lines.append(f"Threads:\t{threads}")
    (proc / str(pid) / "status").write_text("\n".join(lines) + "\n")


def test_threads_are_counted_by_real_uid(tmp_path: Path) -> None:
    _status(tmp_path, 10, 1000, 3)
    _status(tmp_path, 11, 1000, 1)
    _status(tmp_path, 12, 1007, 50)  # its effective uid is 1014: not counted for 1014
    _status(tmp_path, 13, 1000, None)  # no Threads line: one
    (tmp_path / "14").mkdir()  # ended while listed: no status
    (tmp_path / "self").mkdir()
    assert _count_threads(1000, str(tmp_path)) == 5
    assert _count_threads(1007, str(tmp_path)) == 50
    assert _count_threads(1014, str(tmp_path)) == 0


def test_the_count_is_the_one_the_kernel_keeps() -> None:
    # The same machine read by psutil, while this process holds a few more threads: the
    # two counts agree (read again if a process came or went between them).
    stop = threading.Event()
    extra = [threading.Thread(target=stop.wait) for _ in range(4)]
    for thread in extra:
        thread.start()
    try:
        uid = os.getuid()
        for _ in range(10):
            ours = _count_threads(uid)
            theirs = sum(
                p.info["num_threads"] or 1
                for p in psutil.process_iter(["uids", "num_threads"])
                if p.info["uids"] is not None and p.info["uids"].real == uid
            )
            if ours == theirs:
                break
        assert ours == theirs
        assert ours >= 5
    finally:
        stop.set()
        for thread in extra:
            thread.join()
