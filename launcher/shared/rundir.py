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
import stat
import time

PREFIX = "ironcurtain-"
PID_FILE = "pid"
ORIGIN_FILE = "base"  # in a directory made in /tmp instead: where it would have gone
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


def mark_origin(runtime_dir: str) -> None:
    """Record, in a runtime directory made in ``/tmp`` because the preferred place's path
    was too long, that preferred place (:func:`serving` tells its sessions by it)."""
    preferred = bases()[0]
    if os.path.dirname(runtime_dir) != preferred:
        with open(os.path.join(runtime_dir, ORIGIN_FILE), "w", encoding="utf-8") as handle:
            handle.write(preferred)


def serving() -> list[str]:
    """This user's runtime directories (real directories it owns) of sessions started with
    the same preferred place (``$XDG_RUNTIME_DIR``, else ``/tmp``): those in it, and those
    made in ``/tmp`` instead of it; oldest first. Another user's are left out unseen."""
    preferred = bases()[0]
    found = []
    for base in bases():
        for path in glob.glob(os.path.join(glob.escape(base), PREFIX + "[0-9]*")):
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
                continue
            if _origin(path) == preferred:
                found.append(path)
    return sorted(found, key=_mtime)


def _origin(runtime_dir: str) -> str:
    """The preferred place ``runtime_dir``'s session was started with."""
    try:
        with open(os.path.join(runtime_dir, ORIGIN_FILE), encoding="utf-8") as handle:
            return handle.read(4096)
    except (OSError, UnicodeDecodeError):
        return os.path.dirname(runtime_dir)


def doubt(sock: str) -> str:
    """Why the socket ``sock`` in a runtime directory is not one a session of this user's
    made there ('' when it is): the directory, not a link, this user's and closed to
    everyone else; the socket, not a link, this user's and usable by this user only."""
    checks = (
        (os.path.dirname(sock), stat.S_ISDIR, "directory"),
        (sock, stat.S_ISSOCK, "socket"),
    )
    for path, kind, what in checks:
        try:
            st = os.lstat(path)
        except OSError as exc:
            return f"{path}: {exc.strerror}"
        if not kind(st.st_mode):
            return f"{path} is not a {what}"
        if st.st_uid != os.getuid():
            return f"{path} belongs to uid {st.st_uid}, not to this user"
        if st.st_mode & 0o077:
            return f"{path} is open to others (mode {stat.S_IMODE(st.st_mode):04o})"
    return ""


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
