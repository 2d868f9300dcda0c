"""A server's whole process tree, whether it has gone over its limits, and killing it.

The rlimits set in the child bound each process; these bound the tree. On Linux the tree
is found through the kernel's own lists of each task's children, and each process is read
from its ``/proc/PID/stat`` and ``statm``: a look costs a few reads per process of the
server, not a scan of the whole machine, and loads no process library. A kernel built
without those lists gets a scan of every process's parent instead; a system without
Linux's ``/proc`` (macOS) asks psutil.
"""

from __future__ import annotations

import contextlib
import os
import signal
from typing import NamedTuple

from sandbox_profiles.model import Limits

PROCFS = os.path.exists("/proc/self/stat")
_PAGE = os.sysconf("SC_PAGE_SIZE")
_TICKS = os.sysconf("SC_CLK_TCK")


class Member(NamedTuple):
    """One process of a tree, as it was when looked at."""

    pid: int
    started: int  # when it started (clock ticks after boot; psutil: ms): names this process
    rss: int  # bytes
    cpu: float  # seconds, user and system


def process_tree(pid: int) -> list[Member]:
    """``pid`` and all its descendants, as they are now; empty when ``pid`` is gone."""
    tree = []
    for member in _descendants(pid):
        found = _look(member)
        if found is not None:
            tree.append(found)
    return tree


def kill(tree: list[Member]) -> None:
    """SIGKILL each process of ``tree`` that is still the one looked at (a pid the kernel has
    given to a new process since is left alone)."""
    for member in tree:
        now = _look(member.pid)
        if now is not None and now.started == member.started:
            with contextlib.suppress(ProcessLookupError, PermissionError):
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


def _descendants(pid: int) -> list[int]:
    """``pid`` first, then every process under it, from ``/proc/PID/task/TID/children``
    (no scan of every process on the machine)."""
    if not PROCFS:
        import psutil

        try:
            return [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]
        except psutil.Error:
            return []
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
            except FileNotFoundError:
                if os.path.isdir(f"/proc/{current}/task/{task}"):
                    return _descendants_by_parent(pid)  # a kernel without the lists
            except (OSError, ValueError):
                continue
    return pids


def _descendants_by_parent(pid: int) -> list[int]:
    """``pid`` and every process under it, from every process's parent."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                children.setdefault(int(_stat(int(entry))[1]), []).append(int(entry))
    pids = [pid]
    for current in pids:
        pids.extend(children.get(current, ()))
    return pids


def _look(pid: int) -> Member | None:
    """What ``pid`` uses now, and when it started; None when it is gone."""
    if not PROCFS:
        import psutil

        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                times = proc.cpu_times()
                started = round(proc.create_time() * 1000)
                return Member(pid, started, proc.memory_info().rss, times.user + times.system)
        except psutil.Error:
            return None
    try:
        stat = _stat(pid)
        with open(f"/proc/{pid}/statm", "rb") as handle:
            rss = int(handle.read().split()[1]) * _PAGE
        cpu = (int(stat[11]) + int(stat[12])) / _TICKS  # utime, stime
        return Member(pid, int(stat[19]), rss, cpu)
    except (OSError, ValueError, IndexError):
        return None


def _stat(pid: int) -> list[bytes]:
    """The fields of ``/proc/PID/stat`` after the command name (which may hold spaces and
    parentheses): the process state is ``[0]``, the parent ``[1]``."""
    with open(f"/proc/{pid}/stat", "rb") as handle:
        return handle.read().rpartition(b")")[2].split()
