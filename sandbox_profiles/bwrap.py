"""The bubblewrap rendering of a :class:`SandboxProfile`: an argv, nothing spawned."""

from __future__ import annotations

from sandbox_profiles.model import Limits, Mount, SandboxProfile

_FLAGS = {
    "ro-bind": "--ro-bind",
    "ro-bind-try": "--ro-bind-try",
    "bind": "--bind",
    "mask-file": "--ro-bind",
}

SETPRIV = "/usr/bin/setpriv"
# What a privileged bwrap keeps until setpriv has switched to the unprivileged uid (and
# DAC_READ_SEARCH so bwrap can enter a workspace only that uid may open); setpriv's switch
# to a non-root uid empties every capability set, and it drops the bounding set too.
_SWITCH_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_DAC_READ_SEARCH")


def render(
    profile: SandboxProfile,
    bwrap: str = "bwrap",
    seccomp_fd: int | str | None = None,
    setpriv: str = SETPRIV,
    table_fd: int | str | None = None,
) -> list[str]:
    """The full argv to start the profile's command under bubblewrap.

    The environment is not on it: the caller starts bwrap with ``profile.env`` as its whole
    environment (bwrap hands it down), so no secret appears on any argv. ``seccomp_fd`` is
    the descriptor the caller passes with the compiled filter; ``table_fd`` one numbered as
    high as the descriptor table the server should start with (bwrap forks the server's
    process while it is open, then closes it there before the exec).

    >>> from sandbox_profiles.model import Mount, SandboxProfile
    >>> p = SandboxProfile("s", ("/usr/bin/true",), "/", {}, (Mount("tmpfs", "/tmp"),))
    >>> render(p)[-6:]
    ['--tmpfs', '/tmp', '--chdir', '/', '--', '/usr/bin/true']
    """
    return [
        arg
        for chunk, _ in render_explained(profile, bwrap, seccomp_fd, setpriv, table_fd)
        for arg in chunk
    ]


_NAMESPACE_REASONS = {
    "user": "own user namespace: the caller's uid mapped, nothing else",
    "pid": "own process tree: host processes are invisible",
    "ipc": "own System V IPC and POSIX message queues",
    "uts": "own hostname",
    "cgroup": "own cgroup view",
    "net": "own network stack with only loopback: no route out",
}


def _isolation(
    profile: SandboxProfile, namespaces: list[str], privileged: bool
) -> list[tuple[list[str], str]]:
    """The namespaces unshared and the process's other bounds."""
    out: list[tuple[list[str], str]] = []
    for ns in namespaces:
        out.append(([f"--unshare-{ns}"], _NAMESPACE_REASONS.get(ns, "")))
    if profile.disable_nested_userns and "user" in namespaces:
        out.append((["--disable-userns"], "no new user namespaces inside"))
    if profile.die_with_parent:
        out.append((["--die-with-parent"], "ends when ironcurtain ends"))
    if profile.new_session:
        out.append((["--new-session"], "no controlling terminal to push input into"))
    if profile.drop_all_capabilities:
        out.append((["--cap-drop", "ALL"], "no capabilities"))
        if privileged:
            for cap in _SWITCH_CAPS:
                out.append((["--cap-add", cap], "kept only until setpriv switches uid"))
    if "uts" in namespaces:
        out.append((["--hostname", profile.hostname], ""))
    return out


def _mount_args(mount: Mount) -> list[str]:
    chunk: list[str] = []
    if mount.mode is not None:
        chunk += ["--perms", f"{mount.mode:04o}"]
    if mount.kind in _FLAGS:
        chunk += [_FLAGS[mount.kind], mount.source or mount.dest, mount.dest]
    elif mount.kind == "symlink":
        chunk += ["--symlink", mount.source or "", mount.dest]
    else:  # proc, dev, tmpfs, dir
        chunk += [f"--{mount.kind}", mount.dest]
    return chunk


def _switch_user(setpriv: str, run_as: tuple[int, int]) -> tuple[list[str], str]:
    uid, gid = run_as
    return (
        [
            setpriv,
            f"--reuid={uid}",
            f"--regid={gid}",
            "--clear-groups",
            "--bounding-set=-all",
            "--inh-caps=-all",
            "--",
        ],
        "never root: switch to an unprivileged uid with no capabilities",
    )


def render_explained(
    profile: SandboxProfile,
    bwrap: str = "bwrap",
    seccomp_fd: int | str | None = None,
    setpriv: str = SETPRIV,
    table_fd: int | str | None = None,
) -> list[tuple[list[str], str]]:
    """The argv of :func:`render` in pieces, each with the reason it is there."""
    privileged = profile.run_as is not None
    namespaces = [ns for ns in profile.namespaces if not (privileged and ns == "user")]
    out: list[tuple[list[str], str]] = [([bwrap], "")]
    out += _isolation(profile, namespaces, privileged)
    if seccomp_fd is not None:
        out.append((["--seccomp", str(seccomp_fd)], "system-call filter (compiled libseccomp)"))
    if table_fd is not None:
        # bwrap closes it in the server's process before the exec, unless --as-pid-1 (which
        # is never rendered: it would leave the descriptor open in the server).
        why = "held by the sandbox's pid 1 only: the server's descriptor table starts wide"
        out.append((["--sync-fd", str(table_fd)], why))
    for mount in profile.mounts:
        out.append((_mount_args(mount), mount.reason))
    out.append((["--chdir", profile.cwd], "working directory"))
    out.append((["--"], ""))
    if profile.run_as is not None:
        out.append(_switch_user(setpriv, profile.run_as))
    out.append((list(profile.argv), "the server"))
    return out


def limits_argv(limits: Limits, prlimit: str = "prlimit", nproc_base: int = 0) -> list[str]:
    """A ``prlimit`` prefix that sets the limits in the child before bwrap starts.

    RLIMIT_NPROC counts every process of the uid, so the server's own allowance is added to
    ``nproc_base``, the processes that uid already had.

    >>> limits_argv(Limits(open_files=64, cpu_seconds=5))
    ['prlimit', '--nofile=64:64', '--cpu=5:6', '--']
    >>> limits_argv(Limits())
    []
    """
    if not limits.any():
        return []
    argv = [prlimit]
    if limits.memory is not None:
        argv.append(f"--data={limits.memory}:{limits.memory}")
    if limits.open_files is not None:
        argv.append(f"--nofile={limits.open_files}:{limits.open_files}")
    if limits.processes is not None:
        total = nproc_base + limits.processes
        argv.append(f"--nproc={total}:{total}")
    if limits.cpu_seconds is not None:
        # SIGXCPU at the soft limit, SIGKILL a second later if it is ignored.
        argv.append(f"--cpu={limits.cpu_seconds}:{limits.cpu_seconds + 1}")
    if limits.file_size is not None:
        argv.append(f"--fsize={limits.file_size}:{limits.file_size}")
    return [*argv, "--"]
