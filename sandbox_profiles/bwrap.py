"""The bubblewrap rendering of a :class:`SandboxProfile`: an argv, nothing spawned."""

from __future__ import annotations

from sandbox_profiles.model import SandboxProfile

_FLAGS = {
    "ro-bind": "--ro-bind",
    "ro-bind-try": "--ro-bind-try",
    "bind": "--bind",
    "mask-file": "--ro-bind",
}


def render(profile: SandboxProfile, bwrap: str = "bwrap") -> list[str]:
    """The full argv to start the profile's command under bubblewrap.

    The environment is not on it: the caller starts bwrap with ``profile.env`` as its whole
    environment (bwrap hands it down), so no secret appears on any argv.

    >>> from sandbox_profiles.model import Mount, SandboxProfile
    >>> p = SandboxProfile("s", ("/usr/bin/true",), "/", {}, (Mount("tmpfs", "/tmp"),))
    >>> render(p)[-6:]
    ['--tmpfs', '/tmp', '--chdir', '/', '--', '/usr/bin/true']
    """
    argv = [bwrap]
    for ns in profile.namespaces:
        argv.append(f"--unshare-{ns}")
    if profile.disable_nested_userns and "user" in profile.namespaces:
        argv.append("--disable-userns")
    if profile.die_with_parent:
        argv.append("--die-with-parent")
    if profile.new_session:
        argv.append("--new-session")
    if profile.drop_all_capabilities:
        argv += ["--cap-drop", "ALL"]
    if "uts" in profile.namespaces:
        argv += ["--hostname", profile.hostname]
    for mount in profile.mounts:
        if mount.kind in _FLAGS:
            argv += [_FLAGS[mount.kind], mount.source or mount.dest, mount.dest]
        elif mount.kind == "symlink":
            argv += ["--symlink", mount.source or "", mount.dest]
        else:  # proc, dev, tmpfs, dir
            argv += [f"--{mount.kind}", mount.dest]
    argv += ["--chdir", profile.cwd, "--"]
    return [*argv, *profile.argv]
