"""Building a server's profile from its configuration: the safe defaults."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import Literal

from sandbox_profiles import autorun
from sandbox_profiles.discover import program_dirs
from sandbox_profiles.model import Limits, Mount, SandboxProfile
from sandbox_profiles.present import Protection, existing
from sandbox_profiles.records import frozen
from sandbox_profiles.ways import is_under, ways

# Path suffixes that stay read-only inside every writable root, at any depth (the name
# entries of the catalogue of what host tools load or run; the structural ones, git
# directories and virtualenvs, are found by present.existing and the guard).
ALWAYS_PROTECTED_NAMES: tuple[str, ...] = autorun.PROTECTED_NAMES

SYSTEM_MOUNTS: tuple[tuple[str, str], ...] = (
    ("/usr", "programs and libraries"),
    ("/bin", "programs (often a link into /usr)"),
    ("/sbin", "programs (often a link into /usr)"),
    ("/lib", "shared libraries (often a link into /usr)"),
    ("/lib64", "the dynamic loader (often a link into /usr)"),
)

# Only the parts of /etc programs need; never the host's passwd, shadow, or secrets.
ETC_FILES: tuple[str, ...] = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/nsswitch.conf",
    "/etc/mime.types",
    "/etc/os-release",
)

SANDBOX_HOME = "/tmp/home"
# Where a networked server finds the egress proxy: its socket, and the bridge's TCP port.
EGRESS_SOCKET = "/run/ironcurtain/egress.sock"
PROXY_PORT = 3128
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
# A server with brokered secrets trusts its egress proxy's certificate authority besides the
# system's: the bundle holding both is shown here, over the system's own bundles, and named
# by the variables TLS libraries read.
CA_BUNDLE = "/run/ironcurtain/ca.pem"
CA_VARIABLES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO")
SYSTEM_BUNDLES = (
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
)
NOT_THERE_YET = "denyRead (not there yet)"
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
WorkspaceAccess = Literal["write", "read", "none"]


@frozen
class ProfileRequest:
    """Plain inputs from the launcher: a server's resolved command and its sandbox block."""

    name: str
    command_path: str
    args: Sequence[str]
    env: Mapping[str, str]
    workspace: str
    cwd: str | None = None
    # How the workspace is shown: writable, read-only, or not at all; and why (the launcher
    # decides from the server's tool annotations). allowWrite still makes a path writable.
    workspace_access: WorkspaceAccess = "write"
    workspace_reason: str = ""
    allow_read: Sequence[str] = ()
    allow_write: Sequence[str] = ()
    # A grant named through a link (as named, where it is): shown where it is, and at the
    # name too, as a link, so a server told the name finds it.
    grant_links: Sequence[tuple[str, str]] = ()
    deny_read: Sequence[str] = ()
    deny_write: Sequence[str] = ()
    # ironcurtain's own files (config, policy, audit log): read-only wherever they appear.
    protected: Sequence[str] = ()
    # Directory with the generated passwd/group/hosts and the mask file.
    runtime_dir: str = ""
    search_path: Sequence[str] = ()
    host_env: Mapping[str, str] = field(default_factory=dict)
    # Set when the launcher runs as root: the unprivileged uid/gid the server runs as.
    run_as: tuple[int, int] | None = None
    # Files the command runs that are not the command (a script given to node).
    program_files: Sequence[str] = ()
    # The egress proxy's socket on the host (a networked server), and the Python that runs
    # the bridge to it inside the sandbox.
    egress_socket: str | None = None
    bridge_python: str = ""
    limits: Limits = field(default_factory=Limits)
    seccomp: bool = True
    # Directories no program directory may be, or hold (the home, ~/.local, ironcurtain's
    # state...), with what each is: host facts from the launcher. See discover.hidden_reason.
    never_shown: Mapping[str, str] = field(default_factory=dict)
    # The host file of the CA bundle a server with brokered secrets trusts (the system's
    # authorities and its egress proxy's), written by the launcher before it starts.
    ca_bundle: str | None = None


def workspace_mount(req: ProfileRequest) -> Mount | None:
    """The workspace's mount: writable, read-only or none (``workspace_access``), writable
    anyway when allowWrite names it.

    >>> workspace_mount(ProfileRequest("t", "/x", (), {}, "/ws", workspace_access="none")) is None
    True
    """
    why = f": {req.workspace_reason}" if req.workspace_reason else ""
    if req.workspace in req.allow_write:
        reason = "the session workspace, writable: allowWrite names it"
        return Mount("bind", req.workspace, req.workspace, reason)
    if req.workspace_access == "write":
        return Mount("bind", req.workspace, req.workspace, f"the session workspace, writable{why}")
    if req.workspace_access == "read":
        reason = f"the session workspace, read-only{why}"
        return Mount("ro-bind", req.workspace, req.workspace, reason)
    return None


def _bind_host(path: str, reason: str, mounts: list[Mount]) -> None:
    if os.path.islink(path):
        mounts.append(Mount("symlink", path, os.readlink(path), reason))
    elif os.path.exists(path):
        mounts.append(Mount("ro-bind", path, path, reason))


def _bind_etc(path: str, mounts: list[Mount]) -> None:
    """A file of /etc as the host has it: a link stays a link when what it points at is in a
    system root the sandbox shows (``/etc/localtime -> /usr/share/zoneinfo/...``: programs
    read the zone's name from the link, and without it search every zone file for one with
    the same bytes); otherwise its content, read-only."""
    reason = "system configuration programs read"
    if os.path.islink(path):
        link = os.readlink(path)
        named = os.path.normpath(os.path.join(os.path.dirname(path), link))
        roots = [root for root, _ in SYSTEM_MOUNTS if not os.path.islink(root)]
        # Both what the link names and where it leads, so the link resolves in the sandbox.
        ends = (named, os.path.realpath(path))
        if all(any(is_under(end, root) for root in roots) for end in ends) and os.path.exists(path):
            mounts.append(Mount("symlink", path, link, reason))
            return
    if os.path.exists(path):
        mounts.append(Mount("ro-bind", path, path, reason))


def sandbox_env(req: ProfileRequest, command_dir: str) -> dict[str, str]:
    """The whole environment inside: declared ``env`` plus a minimal PATH, HOME, LANG, TERM,
    and for a networked server the proxy variables (which no declared value overrides)."""
    env = {
        "PATH": f"{command_dir}:{DEFAULT_PATH}",
        "HOME": SANDBOX_HOME,
        "LANG": req.host_env.get("LANG") or "C.UTF-8",
        "TERM": req.host_env.get("TERM") or "dumb",
    }
    env.update(req.env)
    if req.egress_socket:
        proxy = f"http://127.0.0.1:{PROXY_PORT}"
        for name in PROXY_VARIABLES:
            env[name] = env[name.lower()] = proxy
        for name in ("NO_PROXY", "no_proxy"):
            env.pop(name, None)
        env["NODE_USE_ENV_PROXY"] = "1"
    if req.ca_bundle:
        for name in CA_VARIABLES:
            env[name] = CA_BUNDLE
    return env


def _ca_mounts(req: ProfileRequest, mounts: list[Mount]) -> None:
    """The bundle trusting the egress proxy's authority, where TLS libraries look."""
    if not req.ca_bundle:
        return
    reason = "the CA bundle: the system's authorities and the egress proxy's (brokered secrets)"
    mounts.append(Mount("ro-bind", CA_BUNDLE, req.ca_bundle, reason))
    for path in SYSTEM_BUNDLES:
        if os.path.isfile(path) and not os.path.islink(path):
            mounts.append(Mount("ro-bind", path, req.ca_bundle, reason))


def first_missing(path: str) -> str:
    """The outermost component of ``path`` that does not exist (``path`` when it does).

    >>> first_missing("/nonexistent-ic/a/b")
    '/nonexistent-ic'
    """
    current = path
    while True:
        parent = os.path.dirname(current)
        if parent == current or os.path.lexists(parent):
            return current
        current = parent


def _parent_dirs(mounts: list[Mount]) -> list[Mount]:
    """The mounts, each preceded by ``dir`` entries for the parents it needs that nothing
    shows yet. bwrap would create them itself, but as root with mode 0700, which locks an
    unprivileged server out of its own program directory."""
    shown: list[str] = []  # host trees bound so far (their subdirectories exist)
    made = {"/"}
    out: list[Mount] = []
    for mount in mounts:
        parts = mount.dest.strip("/").split("/")
        for i in range(1, len(parts)):
            parent = "/" + "/".join(parts[:i])
            if parent in made or any(is_under(parent, s) for s in shown):
                continue
            out.append(Mount("dir", parent, reason=f"parent of {mount.dest}", mode=0o755))
            made.add(parent)
        out.append(mount)
        made.add(mount.dest)
        if mount.kind in ("ro-bind", "bind", "ro-bind-try"):
            shown.append(mount.dest)
    return out


def _base_mounts(req: ProfileRequest, mounts: list[Mount]) -> None:
    """The system: its read-only trees, /etc, a fresh /proc and /dev, a private /tmp and HOME."""
    for path, reason in SYSTEM_MOUNTS:
        _bind_host(path, reason, mounts)
    for path in ETC_FILES:
        _bind_etc(path, mounts)
    if req.runtime_dir:
        for name in ("passwd", "group", "hosts"):
            mounts.append(
                Mount(
                    "ro-bind",
                    f"/etc/{name}",
                    os.path.join(req.runtime_dir, name),
                    f"generated /etc/{name}: only the sandbox's own user, no host accounts",
                )
            )
    _ca_mounts(req, mounts)
    mounts.append(Mount("proc", "/proc", reason="a fresh /proc: only the sandbox's processes"))
    mounts.append(Mount("dev", "/dev", reason="a minimal /dev: null, zero, random, tty"))
    mounts.append(Mount("tmpfs", "/dev/shm", reason="private shared memory", mode=0o1777))
    mounts.append(Mount("tmpfs", "/tmp", reason="a private /tmp", mode=0o1777))
    mounts.append(Mount("dir", SANDBOX_HOME, reason="an empty private HOME", mode=0o1777))


def _root_mounts(req: ProfileRequest, mounts: list[Mount]) -> tuple[list[str], Mount | None]:
    """What the server may read and write, and the grants' links; (the writable roots, the
    workspace's mount)."""
    for path in req.allow_read:
        if os.path.exists(path):
            mounts.append(Mount("ro-bind", path, path, "allowRead"))
    writable = [p for p in dict.fromkeys(req.allow_write) if os.path.exists(p)]
    ws_mount = workspace_mount(req)
    if ws_mount is not None:
        mounts.append(ws_mount)
        if ws_mount.kind == "bind" and req.workspace not in writable:
            writable.insert(0, req.workspace)
    for path in writable:
        if path != req.workspace:
            mounts.append(Mount("bind", path, path, "allowWrite"))
    shown_trees = [m.dest for m in mounts if m.kind in ("ro-bind", "bind")]
    for named, real in req.grant_links:
        if os.path.exists(real) and not any(named == t or is_under(named, t) for t in shown_trees):
            mounts.append(Mount("symlink", named, real, "the grant as it is named: a link"))
    return writable, ws_mount


def _program_mounts(req: ProfileRequest, mounts: list[Mount]) -> tuple[str, ...]:
    """The directories of the programs the sandbox runs (behind the network bridge when there
    is egress), read-only; the command line that runs them."""
    argv: tuple[str, ...] = (req.command_path, *req.args)
    program_files = list(req.program_files)
    if req.egress_socket:
        bridge = os.path.join(os.path.dirname(os.path.abspath(__file__)), "netbridge.py")
        python = req.bridge_python or "/usr/bin/python3"
        argv = (python, "-I", "-S", bridge, str(PROXY_PORT), EGRESS_SOCKET, "--", *argv)
        program_files += [python, bridge]
        mounts.append(
            Mount("bind", EGRESS_SOCKET, req.egress_socket, "the egress proxy: the only way out")
        )
    programs: list[tuple[str, str]] = []
    for program in (req.command_path, *program_files):
        for directory, reason in program_dirs(program, req.search_path, 0, req.never_shown):
            if not any(is_under(directory, d) for d, _ in programs):
                programs.append((directory, reason))
    for path, reason in programs:
        if os.path.islink(path) and not os.path.isdir(path):
            mounts.append(Mount("symlink", path, os.readlink(path), reason))  # shown alone
        else:
            mounts.append(Mount("ro-bind", path, path, reason))
    return argv


def _deny_read_mount(req: ProfileRequest, path: str, bound: list[str]) -> Mount | None:
    """How one denyRead path is hidden: a directory behind an empty one, a file behind an
    unreadable one, a path not there yet inside a shown tree by its first missing part."""
    if os.path.isdir(path):
        return Mount("tmpfs", path, reason="denyRead: hidden behind an empty dir", mode=0o555)
    if os.path.lexists(path):
        mask = os.path.join(req.runtime_dir, "masked")
        return Mount("mask-file", path, mask, "denyRead: an unreadable file")
    if any(is_under(path, b) for b in bound):
        # Not there yet, but inside a tree the server sees: the launcher puts a
        # placeholder at the first missing component (an empty file when that is the
        # path itself, else an empty directory) and this hides whatever appears there.
        missing = first_missing(path)
        reason = f"{NOT_THERE_YET}: {path}"
        if missing == path:
            mask = os.path.join(req.runtime_dir, "masked")
            return Mount("mask-file", path, mask, reason)
        return Mount("tmpfs", missing, reason=reason, mode=0o555)
    return None


def _deny_mounts(req: ProfileRequest, mounts: list[Mount], writable: list[str]) -> None:
    """denyWrite and ironcurtain's own files read-only, denyRead hidden."""
    bound = [m.dest for m in mounts if m.kind in ("ro-bind", "bind")]
    for path in req.deny_write:
        if os.path.exists(path):
            mounts.append(Mount("ro-bind", path, path, "denyWrite"))
    for path in req.protected:
        if os.path.exists(path) and any(is_under(path, r) for r in writable):
            mounts.append(Mount("ro-bind", path, path, "ironcurtain's own file"))
    for path in req.deny_read:
        mount = _deny_read_mount(req, path, bound)
        if mount is not None:
            mounts.append(mount)


def _pin(
    mounts: list[Mount], roots_end: int, protection: Protection, writable: list[str]
) -> list[str]:
    """Pin the way to each path shown by place inside a writable root (the pins go in after
    the roots); the paths anchored."""
    by_place = [
        m.dest
        for m in mounts[roots_end:]
        if m.kind in ("ro-bind", "mask-file", "tmpfs") and m.dest not in protection.by_name
    ]
    # The links followed; one inside what is read-only by name cannot change, the way its
    # target is named by can.
    for link in protection.via:
        if any(is_under(link, kept) for kept in protection.by_name if kept != link):
            try:
                target = os.readlink(link)
            except OSError:
                continue  # gone since: nothing leads through it
            link = os.path.normpath(os.path.join(os.path.dirname(link), target))
        by_place.append(link)
    pins, anchored = ways(by_place, writable)
    mounts[roots_end:roots_end] = pins
    return anchored


def build_profile(req: ProfileRequest) -> SandboxProfile:
    mounts: list[Mount] = []
    _base_mounts(req, mounts)
    writable, ws_mount = _root_mounts(req, mounts)
    roots_end = len(mounts)  # what is shown inside a writable root comes after this
    # After the writable roots, so a program directory inside one stays read-only.
    argv = _program_mounts(req, mounts)
    # What host tools would load or run from a writable root, and what that points at:
    # read-only when there, quarantined when it appears.
    home = req.host_env.get("HOME", "")
    protection = existing(writable, home, req.host_env.get("XDG_CONFIG_HOME"))
    for path, reason in protection.read_only.items():
        mounts.append(Mount("ro-bind", path, path, reason))
    guarded = [
        p
        for p in (*req.deny_write, *req.protected, *protection.guarded)
        if not os.path.lexists(p) and any(is_under(p, r) for r in writable)
    ]
    _deny_mounts(req, mounts, writable)
    anchored = _pin(mounts, roots_end, protection, writable)
    command_dir = os.path.dirname(req.command_path)
    return SandboxProfile(
        name=req.name,
        argv=argv,
        network="proxy" if req.egress_socket else "none",
        cwd=req.cwd or (req.workspace if ws_mount is not None else SANDBOX_HOME),
        env=sandbox_env(req, command_dir),
        mounts=tuple(_parent_dirs(mounts)),
        writable=tuple(writable),
        run_as=req.run_as,
        seccomp=req.seccomp,
        limits=req.limits,
        guarded=tuple(guarded),
        anchored=tuple(anchored),
    )


def placeholders(profile: SandboxProfile) -> list[tuple[str, bool]]:
    """(path, is a directory) the launcher creates empty on the host before start, and
    removes after while still empty, so a denyRead path that is not there yet has something
    to be mounted over."""
    return [
        (m.dest, m.kind == "tmpfs") for m in profile.mounts if m.reason.startswith(NOT_THERE_YET)
    ]


def guarded_paths(req: ProfileRequest, profile: SandboxProfile) -> list[str]:
    """Paths inside writable roots that must not come into being (denyWrite, ironcurtain's
    own files, what a git configuration includes): the launcher watches for them and
    quarantines them."""
    return list(profile.guarded)


def write_runtime_files(runtime_dir: str, uid: int, gid: int) -> None:
    """The passwd/group/hosts the sandbox sees, and the unreadable mask file."""
    os.makedirs(runtime_dir, mode=0o700, exist_ok=True)
    files = {
        "passwd": f"sandbox:x:{uid}:{gid}:sandbox:{SANDBOX_HOME}:/bin/sh\n",
        "group": f"sandbox:x:{gid}:\n",
        "hosts": "127.0.0.1 localhost\n::1 localhost\n",
    }
    if uid != 0:
        files["passwd"] = f"root:x:0:0:root:/root:/bin/sh\n{files['passwd']}"
    for name, text in files.items():
        path = os.path.join(runtime_dir, name)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(path, 0o644)
    mask = os.path.join(runtime_dir, "masked")
    with open(mask, "w", encoding="utf-8"):
        pass
    os.chmod(mask, 0)
