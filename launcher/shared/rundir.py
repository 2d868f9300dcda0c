"""A session's runtime directory: owner-only, named for the session, holding its launcher's
pid, the approvals socket and the egress proxies' sockets.

It lives in ``$XDG_RUNTIME_DIR`` (else ``/tmp``), or in ``/tmp`` when that path would make a
socket path longer than a unix socket allows. Every place that names, finds or sweeps
these directories does it here.
"""

from __future__ import annotations

import glob
import os
import shutil
import time

PREFIX = "ironcurtain-"
PID_FILE = "pid"
UNIX_PATH_MAX = 107  # bytes in a unix socket path


def bases() -> list[str]:
    """Where runtime directories are made, in order (``/tmp``: where too-long paths go)."""
    return list(dict.fromkeys((os.environ.get("XDG_RUNTIME_DIR") or "/tmp", "/tmp")))


def path_for(
    session_id: str, longest_socket: str = "approvals.sock", base: str | None = None
) -> str:
    """The runtime directory of a new session whose longest socket name is
    ``longest_socket`` (``base``: where it would go; the first of :func:`bases`).

    >>> path_for("20261123-211000-abcdef", base="/run/user/1000")
    '/run/user/1000/ironcurtain-20261123-211000-abcdef'
    >>> path_for("20261123-211000-abcdef", "x" * 100, base="/run/user/1000")
    '/tmp/ironcurtain-20261123-211000-abcdef'
    """
    preferred = os.path.join(base or bases()[0], PREFIX + session_id)
    if len(preferred) + 1 + len(longest_socket) > UNIX_PATH_MAX:
        return os.path.join("/tmp", PREFIX + session_id)
    return preferred


def find(session_id: str | None, member: str) -> list[str]:
    """``member`` of this user's runtime directories (of ``session_id``, else of every
    session), newest first."""
    pattern = PREFIX + (glob.escape(session_id) if session_id else "*")
    found = [
        path
        for base in bases()
        for path in glob.glob(os.path.join(base, pattern, member))
        if _owned(path)
    ]
    return sorted(found, key=_mtime, reverse=True)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one of another user's counts: it cannot be signalled)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale(min_age: float = 60.0) -> None:
    """Remove this user's runtime directories of sessions that are gone (a launcher that was
    killed cannot clean up after itself). A directory's ``pid`` names its launcher."""
    now = time.time()
    for base in bases():
        try:
            entries = list(os.scandir(base))
        except OSError:
            continue
        for entry in entries:
            if not entry.name.startswith(PREFIX + "2") or not entry.is_dir(follow_symlinks=False):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
                if st.st_uid != os.getuid() or now - st.st_mtime < min_age:
                    continue
                with open(os.path.join(entry.path, PID_FILE), encoding="utf-8") as handle:
                    alive = _alive(int(handle.read().strip() or 0))
            except (OSError, ValueError):
                alive = False
            if not alive:
                shutil.rmtree(entry.path, ignore_errors=True)


def _owned(path: str) -> bool:
    try:
        return os.stat(path).st_uid == os.getuid()
    except OSError:
        return False


def _mtime(path: str) -> float:
    try:
        return os.path.getmtime(path)
    except OSError:
        return 0.0
