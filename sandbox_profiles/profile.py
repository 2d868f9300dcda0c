"""Building a server's profile from its configuration: the safe defaults of SPEC §6."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sandbox_profiles.discover import program_dirs
from sandbox_profiles.model import Mount, SandboxProfile

# Names that stay read-only inside every writable root: code that runs later, unsandboxed,
# on the user's behalf (git hooks, shell start-up files, editor and MCP client configs).
ALWAYS_PROTECTED_NAMES: tuple[str, ...] = (
    ".git/hooks",
    ".git/config",
    ".bashrc",
    ".bash_profile",
    ".profile",
    ".zshrc",
    ".zprofile",
    ".mcp.json",
    ".vscode",
    ".idea",
)

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
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True)
class ProfileRequest:
    """Plain inputs from the launcher: a server's resolved command and its sandbox block."""

    name: str
    command_path: str
    args: Sequence[str]
    env: Mapping[str, str]
    workspace: str
    cwd: str | None = None
    allow_read: Sequence[str] = ()
    allow_write: Sequence[str] = ()
    deny_read: Sequence[str] = ()
    deny_write: Sequence[str] = ()
    # ironcurtain's own files (config, policy, audit log): read-only wherever they appear.
    protected: Sequence[str] = ()
    # Directory with the generated passwd/group/hosts and the mask file.
    runtime_dir: str = ""
    search_path: Sequence[str] = ()
    host_env: Mapping[str, str] = field(default_factory=dict)


def _bind_host(path: str, reason: str, mounts: list[Mount]) -> None:
    if os.path.islink(path):
        mounts.append(Mount("symlink", path, os.readlink(path), reason))
    elif os.path.exists(path):
        mounts.append(Mount("ro-bind", path, path, reason))


def sandbox_env(req: ProfileRequest, command_dir: str) -> dict[str, str]:
    """The whole environment inside: declared ``env`` plus a minimal PATH, HOME, LANG, TERM."""
    env = {
        "PATH": f"{command_dir}:{DEFAULT_PATH}",
        "HOME": SANDBOX_HOME,
        "LANG": req.host_env.get("LANG") or "C.UTF-8",
        "TERM": req.host_env.get("TERM") or "dumb",
    }
    env.update(req.env)
    return env


def build_profile(req: ProfileRequest) -> SandboxProfile:
    mounts: list[Mount] = []
    for path, reason in SYSTEM_MOUNTS:
        _bind_host(path, reason, mounts)
    for path in ETC_FILES:
        if os.path.exists(path):
            mounts.append(Mount("ro-bind", path, path, "system configuration programs read"))
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
    mounts.append(Mount("proc", "/proc", reason="a fresh /proc: only the sandbox's processes"))
    mounts.append(Mount("dev", "/dev", reason="a minimal /dev: null, zero, random, tty"))
    mounts.append(Mount("tmpfs", "/tmp", reason="a private /tmp"))
    mounts.append(Mount("dir", SANDBOX_HOME, reason="an empty private HOME"))
    for path in req.allow_read:
        if os.path.exists(path):
            mounts.append(Mount("ro-bind", path, path, "allowRead"))
    writable = [req.workspace, *req.allow_write]
    mounts.append(Mount("bind", req.workspace, req.workspace, "the session workspace"))
    for path in req.allow_write:
        if os.path.exists(path):
            mounts.append(Mount("bind", path, path, "allowWrite"))
    # After the writable roots, so a program directory inside one stays read-only.
    for directory, reason in program_dirs(req.command_path, req.search_path):
        mounts.append(Mount("ro-bind", directory, directory, reason))
    for root in writable:
        for name in ALWAYS_PROTECTED_NAMES:
            path = os.path.join(root, name)
            if os.path.lexists(path) and not os.path.islink(path):
                mounts.append(Mount("ro-bind", path, path, f"always protected: {name}"))
    for path in req.deny_write:
        if os.path.exists(path):
            mounts.append(Mount("ro-bind", path, path, "denyWrite"))
    for path in req.protected:
        if os.path.exists(path) and any(
            path == r or path.startswith(r.rstrip("/") + "/") for r in writable
        ):
            mounts.append(Mount("ro-bind", path, path, "ironcurtain's own file"))
    for path in req.deny_read:
        if os.path.isdir(path):
            mounts.append(Mount("tmpfs", path, reason="denyRead: hidden behind an empty dir"))
        elif os.path.exists(path):
            mask = os.path.join(req.runtime_dir, "masked")
            mounts.append(Mount("mask-file", path, mask, "denyRead: an unreadable file"))
    command_dir = os.path.dirname(req.command_path)
    return SandboxProfile(
        name=req.name,
        argv=(req.command_path, *req.args),
        cwd=req.cwd or req.workspace,
        env=sandbox_env(req, command_dir),
        mounts=tuple(mounts),
        writable=tuple(writable),
    )


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
