"""Keep a process holding credentials from giving them away through its memory: no core
file (``RLIMIT_CORE`` 0, hard and soft), and not dumpable (``PR_SET_DUMPABLE`` 0), so the
kernel refuses every other process of the same user a ptrace attach and its
``/proc/PID/mem``, ``environ``, ``maps`` and the like; only a process holding
``CAP_SYS_PTRACE`` (root) still may. The programs it starts are not affected: ``execve``
makes a process dumpable again.

Linux only (elsewhere a core limit of 0 is all that is set)."""

from __future__ import annotations

import ctypes
import resource
import sys

from launcher.shared.user_errors import StartupError

PR_SET_DUMPABLE = 4
PR_GET_DUMPABLE = 3


class DumpsNotStopped(StartupError):
    """The kernel refused to keep this process from being dumped or read."""


def _prctl(option: int, value: int) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    result = int(libc.prctl(option, value, 0, 0, 0))
    if result < 0:
        errno = ctypes.get_errno()
        raise DumpsNotStopped(f"prctl({option}) failed with errno {errno}")
    return result


def keep_from_dumps() -> None:
    """Make this process write no core file and be unreadable by other processes of its
    user (idempotent). :class:`DumpsNotStopped` when the kernel refuses: a process about to
    hold a credential must not go on readable."""
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ValueError, OSError) as exc:
        raise DumpsNotStopped(f"cannot set the core file size limit to 0: {exc}") from None
    if sys.platform.startswith("linux"):
        _prctl(PR_SET_DUMPABLE, 0)


def dumpable() -> bool:
    """Whether this process may be dumped or read by its user's other processes."""
    if not sys.platform.startswith("linux"):
        return resource.getrlimit(resource.RLIMIT_CORE)[0] != 0
    return _prctl(PR_GET_DUMPABLE, 0) != 0
