"""The bubblewrap rendering of a :class:`SandboxProfile`: an argv, nothing spawned."""

from __future__ import annotations

from sandbox_profiles.model import Limits, SandboxProfile

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
) -> list[str]:
    """The full argv to start the profile's command under bubblewrap.

    The environment is not on it: the caller starts bwrap with ``profile.env`` as its whole
    environment (bwrap hands it down), so no secret appears on any argv. ``seccomp_fd`` is
    the descriptor the caller passes with the compiled filter.

    >>> from sandbox_profiles.model import Mount, SandboxProfile
    >>> p = SandboxProfile("s", ("/usr/bin/true",), "/", {}, (Mount("tmpfs", "/tmp"),))
    >>> render(p)[-6:]
    ['--tmpfs', '/tmp', '--chdir', '/', '--', '/usr/bin/true']
    """
    privileged = profile.run_as is not None
    namespaces = [ns for ns in profile.namespaces if not (privileged and ns == "user")]
    argv = [bwrap]
    for ns in namespaces:
        argv.append(f"--unshare-{ns}")
    if profile.disable_nested_userns and "user" in namespaces:
        argv.append("--disable-userns")
    if profile.die_with_parent:
        argv.append("--die-with-parent")
    if profile.new_session:
        argv.append("--new-session")
    if profile.drop_all_capabilities:
        argv += ["--cap-drop", "ALL"]
        if privileged:
            for cap in _SWITCH_CAPS:
                argv += ["--cap-add", cap]
    if "uts" in namespaces:
        argv += ["--hostname", profile.hostname]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    for mount in profile.mounts:
        if mount.mode is not None:
            argv += ["--perms", f"{mount.mode:04o}"]
        if mount.kind in _FLAGS:
            argv += [_FLAGS[mount.kind], mount.source or mount.dest, mount.dest]
        elif mount.kind == "symlink":
            argv += ["--symlink", mount.source or "", mount.dest]
        else:  # proc, dev, tmpfs, dir
            argv += [f"--{mount.kind}", mount.dest]
    argv += ["--chdir", profile.cwd, "--"]
    if profile.run_as is not None:
        uid, gid = profile.run_as
        argv += [
            setpriv,
            f"--reuid={uid}",
            f"--regid={gid}",
            "--clear-groups",
            "--bounding-set=-all",
            "--inh-caps=-all",
            "--",
        ]
    return [*argv, *profile.argv]


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
