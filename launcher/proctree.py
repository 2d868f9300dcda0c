"""A server's whole process tree, and whether it has gone over its limits.

The rlimits set in the child bound each process; these bound the tree. The tree is found
through the kernel's own lists of each task's children, so a look costs a few reads per
process of the server, not a scan of the whole machine.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

from sandbox_profiles.model import Limits

if TYPE_CHECKING:
    import psutil


def process_tree(pid: int) -> list[psutil.Process]:
    """``pid`` and all its descendants, from ``/proc/PID/task/TID/children`` (no scan of
    every process on the machine); empty when ``pid`` is gone."""
    pids = [pid]
    i = 0
    while i < len(pids):
        current = pids[i]
        i += 1
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{current}/task/{task}/children", "rb") as handle:
                    pids.extend(int(child) for child in handle.read().split())
            except (OSError, ValueError):
                continue
    import psutil  # here, not at start-up: the first look is after a server has started

    tree = []
    for member in pids:
        with contextlib.suppress(psutil.Error):
            tree.append(psutil.Process(member))
    return tree


def over_limits(limits: Limits, tree: list[psutil.Process]) -> str | None:
    """Why the sandboxed tree (bwrap, its init process and the server's own) is over
    ``limits`` (``it used more memory than its limit of 512 MiB``), or None."""
    import psutil

    rss = cpu = 0.0
    for proc in tree:
        with contextlib.suppress(psutil.Error):
            rss += proc.memory_info().rss
            times = proc.cpu_times()
            cpu += times.user + times.system
    if limits.memory is not None and rss > limits.memory:
        return f"it used more memory than its limit of {limits.memory // 2**20} MiB"
    if limits.processes is not None and len(tree) - 2 > limits.processes:
        # bwrap and its init process are not the server's own.
        return f"it ran more processes than its limit of {limits.processes}"
    if limits.cpu_seconds is not None and cpu > limits.cpu_seconds:
        return f"it used more CPU time than its limit of {limits.cpu_seconds} s"
    return None
