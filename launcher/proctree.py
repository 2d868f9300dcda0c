"""A server's whole process tree, whether it has gone over its limits, and killing it.

The rlimits set in the child bound each process; these bound the tree. The tree is found
through the kernel's own lists of each task's children, and each process is read from its
``/proc/PID/stat`` and ``statm``: a look costs a few reads per process of the server, not a
scan of the whole machine, and loads no process library.
"""

from __future__ import annotations

import contextlib
import os
import signal
from typing import NamedTuple

from sandbox_profiles.model import Limits

_PAGE = os.sysconf("SC_PAGE_SIZE")
_TICKS = os.sysconf("SC_CLK_TCK")


class Member(NamedTuple):
    """One process of a tree, as it was when looked at."""

    pid: int
    started: int  # clock ticks after boot: with the pid, names this process and no later one
    rss: int  # bytes
    cpu: float  # seconds, user and system


def process_tree(pid: int) -> list[Member]:
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
    tree = []
    for member in pids:
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = _stat(member)
            with open(f"/proc/{member}/statm", "rb") as handle:
                rss = int(handle.read().split()[1]) * _PAGE
            cpu = (int(stat[11]) + int(stat[12])) / _TICKS  # utime, stime
            tree.append(Member(member, int(stat[19]), rss, cpu))
    return tree


def _stat(pid: int) -> list[bytes]:
    """The fields of ``/proc/PID/stat`` after the command name (which may hold spaces and
    parentheses): the process state is ``[0]``."""
    with open(f"/proc/{pid}/stat", "rb") as handle:
        return handle.read().rpartition(b")")[2].split()


def kill(tree: list[Member]) -> None:
    """SIGKILL each process of ``tree`` that is still the one looked at (a pid the kernel has
    given to a new process since is left alone)."""
    for member in tree:
        with contextlib.suppress(OSError, ValueError, IndexError):
            if int(_stat(member.pid)[19]) == member.started:
                os.kill(member.pid, signal.SIGKILL)


def over_limits(limits: Limits, tree: list[Member]) -> str | None:
    """Why the sandboxed tree (bwrap, its init process and the server's own) is over
    ``limits`` (``it used more memory than its limit of 512 MiB``), or None."""
    rss = sum(member.rss for member in tree)
    cpu = sum(member.cpu for member in tree)
    if limits.memory is not None and rss > limits.memory:
        return f"it used more memory than its limit of {limits.memory // 2**20} MiB"
    if limits.processes is not None and len(tree) - 2 > limits.processes:
        # bwrap and its init process are not the server's own.
        return f"it ran more processes than its limit of {limits.processes}"
    if limits.cpu_seconds is not None and cpu > limits.cpu_seconds:
        return f"it used more CPU time than its limit of {limits.cpu_seconds} s"
    return None
