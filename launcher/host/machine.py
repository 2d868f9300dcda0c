"""The machine the launcher runs on: which platform, whether and as whom it can sandbox, and
the facts a launch argv is built from. The one place that asks which platform this is."""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from sandbox_profiles.bwrap import SETPRIV
from sandbox_profiles.launch import SANDBOX_EXEC, HostFacts
from sandbox_profiles.model import Limits, SandboxProfile

PLATFORM = sys.platform  # "linux" or "darwin"
MACOS = PLATFORM == "darwin"

BWRAP_FIX = (
    "install bubblewrap (Debian/Ubuntu: sudo apt-get install bubblewrap) and make sure "
    "unprivileged user namespaces are enabled (sudo sysctl -w kernel.unprivileged_userns_clone=1; "
    "on Ubuntu 24.04+ also kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor "
    "profile for bwrap)"
)
SECCOMP_FIX = (
    "install libseccomp (Debian/Ubuntu: sudo apt-get install libseccomp2) and the pyseccomp "
    "binding (scripts/install.sh does)"
)
# The unprivileged identity servers run as when ironcurtain itself runs as root.
NOBODY = (65534, 65534)


def host_facts(profile: SandboxProfile | None = None, bwrap: str = "bwrap") -> HostFacts:
    """The facts :func:`sandbox_profiles.launch.launch_argv` needs, as they are now. The
    thread count of the server's uid is only taken when ``profile`` limits processes."""
    processes = 0
    if profile is not None and profile.limits.processes is not None:
        processes = threads_of(profile.run_as[0] if profile.run_as else os.getuid())
    return HostFacts(
        platform=PLATFORM,
        bwrap=bwrap,
        hard_limits=own_hard_limits(),
        processes=processes,
        tmpdir=os.environ.get("TMPDIR", "/tmp"),
    )


def own_hard_limits() -> Limits:
    """The launcher's own hard rlimits (None: unlimited). The process count is left out:
    a server's allowance is added to what its uid runs already, not capped."""

    def hard(which: int) -> int | None:
        value = resource.getrlimit(which)[1]
        return None if value == resource.RLIM_INFINITY else value

    return Limits(
        memory=hard(resource.RLIMIT_DATA),
        open_files=hard(resource.RLIMIT_NOFILE),
        cpu_seconds=hard(resource.RLIMIT_CPU),
        file_size=hard(resource.RLIMIT_FSIZE),
    )


_THREAD_COUNTS: dict[int, tuple[float, int]] = {}


def threads_of(uid: int) -> int:
    """Threads of ``uid`` (RLIMIT_NPROC counts threads, not processes). Servers started
    together share one count (a scan of every process of the machine each)."""
    now = time.monotonic()
    cached = _THREAD_COUNTS.get(uid)
    if cached is not None and now - cached[0] < 2.0:
        return cached[1]
    count = _count_threads(uid)
    _THREAD_COUNTS[uid] = (now, count)
    return count


def _count_threads(uid: int, proc: str = "/proc") -> int:
    """The threads of every process whose real uid is ``uid``, from each process's
    ``status`` (its ``Uid:`` line's first field, its ``Threads:``); a process that ends
    while it is read is not counted. Read directly: this runs before any server starts,
    where importing a process library would cost more than the scan."""
    wanted = str(uid)
    count = 0
    with os.scandir(proc) as entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                with open(f"{proc}/{entry.name}/status", "rb") as handle:
                    status = handle.read()
            except OSError:
                continue
            real = threads = None
            for line in status.split(b"\n"):
                if line.startswith(b"Uid:"):
                    real = line.split()[1].decode()
                elif line.startswith(b"Threads:"):
                    threads = int(line.split()[1])
            if real == wanted:
                count += threads or 1
    return count


def sandbox_problem(privileged: bool = False) -> str | None:
    """Why bubblewrap cannot sandbox here, or None when it can (one ~4 ms probe).

    ``privileged``: the launcher runs as root, so bwrap builds the sandbox without a user
    namespace and ``setpriv`` switches the server to an unprivileged uid."""
    with SandboxProbe(privileged) as probe:
        return probe.result()


class SandboxProbe:
    """:func:`sandbox_problem`, started now and read later: the probe's bwrap runs (on
    another core) while the caller goes on; leaving the ``with`` block ends it either way."""

    def __init__(self, privileged: bool = False) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._problem = self._start(privileged)

    def _start(self, privileged: bool) -> str | None:
        if MACOS:
            ok = os.access(SANDBOX_EXEC, os.X_OK)
            return None if ok else "sandbox-exec is missing (it ships with macOS)"
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            return "bubblewrap (bwrap) is not installed"
        if privileged and not os.access(SETPRIV, os.X_OK):
            return f"{SETPRIV} (util-linux) is missing; it drops root for sandboxed servers"
        spaces = ["pid", "ipc", "net", "uts", "cgroup", *([] if privileged else ["user"])]
        probe = [
            bwrap,
            *(f"--unshare-{ns}" for ns in spaces),
            "--die-with-parent",
            "--ro-bind",
            "/",
            "/",
            "--",
            "true",
        ]
        try:
            # A group of its own: bwrap's child in the new namespaces waits for its parent
            # to map it, and a parent killed before that leaves it waiting for ever, holding
            # the stderr pipe (--die-with-parent is not yet in force then). The group goes
            # whole.
            self._proc = subprocess.Popen(
                probe,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            return f"bwrap could not be started: {exc}"
        return None

    @staticmethod
    def _end(proc: subprocess.Popen[bytes]) -> None:
        """The probe killed, with whatever it started, and reaped; its pipe closed unread."""
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()

    def result(self) -> str | None:
        """Why bwrap cannot sandbox here, or None: waits for the probe to end."""
        proc, self._proc = self._proc, None
        if proc is None:
            return self._problem
        try:
            _, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self._end(proc)
            self._problem = "bwrap could not be started: its probe did not end within 10 s"
            return self._problem
        if proc.returncode != 0:
            detail = err.decode(errors="replace").strip() or proc.returncode
            self._problem = f"bwrap cannot create a sandbox here: {detail}"
        return self._problem

    def __enter__(self) -> SandboxProbe:
        return self

    def __exit__(self, *exc: object) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:  # not read: not needed after all, or planning failed
            self._end(proc)


def sandbox_identity(workspace: str) -> tuple[int, int] | None:
    """Who sandboxed servers run as. None (the caller's own uid, mapped in a user
    namespace) unless ironcurtain runs as root: then the workspace's owner when that is an
    ordinary user, else ``nobody``. A server never keeps root's access to host files."""
    if os.geteuid() != 0:
        return None
    with contextlib.suppress(OSError):
        st = os.stat(workspace)
        if st.st_uid != 0:
            return st.st_uid, st.st_gid
    return NOBODY


def seccomp_filter(cache_dir: Path) -> tuple[bytes | None, str | None]:
    """The compiled system-call filter (kept in ``cache_dir`` across starts), or why none
    can be built here. macOS has none."""
    if MACOS:
        return None, None
    from launcher.host.seccomp_cache import compiled_filter
    from sandbox_profiles.seccomp import SeccompUnavailable

    try:
        return compiled_filter(cache_dir), None
    except SeccompUnavailable as exc:
        return None, f"no seccomp filter can be built: {exc}"
