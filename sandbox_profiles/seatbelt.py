"""The Seatbelt (macOS ``sandbox-exec``) rendering of a :class:`SandboxProfile`: SBPL text.

macOS has no mount namespace, so the model's mounts become path rules:

- a read-only mount is an ``allow file-read*``, a writable one ``allow file-read*`` and
  ``allow file-write*``; parents the sandbox creates become ``file-read-metadata``;
- a read-only mount *inside* a writable root (protected names, ``denyWrite``, ironcurtain's
  own files) is a ``deny file-write*``, and the always-protected names get a regex deny for
  every depth of every writable root, which needs no watcher on macOS;
- a ``denyRead`` mask is a ``deny file-read*``;
- mounts that *replace* a host path (the generated ``/etc/passwd``) have no Seatbelt form and
  are left out: macOS answers user lookups through opendirectoryd instead.

Every deny comes after every allow (in SBPL the last matching rule wins). Paths under
``/tmp``, ``/var`` and ``/etc`` are emitted both as given and in their ``/private`` form.
The private ``/tmp`` is the directory passed as ``-D TMPDIR=...`` to ``sandbox-exec``.
"""

from __future__ import annotations

import re
from dataclasses import field

from sandbox_profiles.autorun import PROTECTED_PATTERNS, PROTECTED_SUFFIXES
from sandbox_profiles.model import Mount, SandboxProfile
from sandbox_profiles.profile import ALWAYS_PROTECTED_NAMES, EGRESS_SOCKET, PROXY_PORT
from sandbox_profiles.records import mutable
from sandbox_profiles.ways import PINNED, is_under

# What any macOS program needs to start: the dyld shared cache, frameworks, system libraries.
MACOS_SYSTEM_READ: tuple[str, ...] = (
    "/usr/lib",
    "/usr/share",
    "/System/Library",
    "/System/Cryptexes",
    "/Library/Apple",
    "/private/var/db/dyld",
    "/private/var/db/timezone",
    "/private/etc/ssl",
)
MACOS_DEVICES: tuple[str, ...] = (
    "/dev/null",
    "/dev/zero",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
)
MACH_SERVICES: tuple[str, ...] = (
    "com.apple.system.logger",
    "com.apple.system.notification_center",
    "com.apple.system.opendirectoryd.libinfo",
    "com.apple.trustd.agent",
)
_PRIVATE = ("/tmp", "/var", "/etc")


def sbpl_string(value: str) -> str:
    """A string literal for SBPL.

    >>> sbpl_string('a"b')
    '"a\\\\"b"'
    """
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def both_forms(path: str) -> list[str]:
    """``path`` and, for the directories macOS links into ``/private``, the other form.

    >>> both_forms("/tmp/ws"), both_forms("/private/var/x"), both_forms("/Users/a")
    (['/tmp/ws', '/private/tmp/ws'], ['/private/var/x', '/var/x'], ['/Users/a'])
    """
    for top in _PRIVATE:
        if is_under(path, top):
            return [path, "/private" + path]
        if is_under(path, "/private" + top):
            return [path, path[len("/private") :]]
    return [path]


def _filters(kind: str, paths: list[str]) -> list[str]:
    seen: list[str] = []
    for path in paths:
        for form in both_forms(path):
            item = f"({kind} {sbpl_string(form)})"
            if item not in seen:
                seen.append(item)
    return seen


def _rule(action: str, operations: str, filters: list[str], comment: str) -> list[str]:
    if not filters:
        return []
    lines = [f";; {comment}"] if comment else []
    lines.append(f"({action} {operations}")
    lines += [f"    {f}" for f in filters]
    lines[-1] += ")"
    return lines


def protected_name_regex(root: str, name: str) -> str:
    """A regex matching ``name`` at any depth below ``root``, and everything inside it, for
    an SBPL ``#"..."`` literal (which takes backslashes as they are and cannot hold ``"``).

    The name is matched whatever its case (a Mac's file system folds case, and the host
    tool finds ``.GIT/hooks`` as ``.git/hooks``); a ``*`` in it (``*.pth``,
    ``mise.*.toml``) stands for any characters but ``/``.

    >>> print(protected_name_regex("/ws", ".git/hooks"))
    ^/ws/(.*/)?\\.[gG][iI][tT]/[hH][oO][oO][kK][sS](/.*)?$
    >>> print(protected_name_regex("/ws", "*.pth"))
    ^/ws/(.*/)?[^/]*\\.[pP][tT][hH](/.*)?$
    >>> print(protected_name_regex("/ws", "mise.*.toml"))
    ^/ws/(.*/)?[mM][iI][sS][eE]\\.[^/]*\\.[tT][oO][mM][lL](/.*)?$
    """
    if '"' in root:
        raise ValueError(f"a writable root with a double quote cannot be expressed: {root!r}")
    return f"^{_escape(root.rstrip('/'))}/(.*/)?{_name_regex(name)}(/.*)?$"


def _name_regex(name: str) -> str:
    out = []
    for char in name:
        if char == "*":
            out.append("[^/]*")
        elif char.lower() != char.upper():
            out.append(f"[{char.lower()}{char.upper()}]")
        else:
            out.append(_escape(char))
    return "".join(out)


def _escape(text: str) -> str:
    return re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\1", text)


@mutable
class _RuleSets:
    """A profile's mounts sorted by the rule each becomes."""

    read: list[str] = field(default_factory=lambda: list(MACOS_SYSTEM_READ))
    write: list[str] = field(default_factory=list)
    metadata: list[str] = field(default_factory=list)
    deny_write: list[tuple[str, str]] = field(default_factory=list)
    deny_read: list[tuple[str, str, bool]] = field(default_factory=list)  # path, reason, is a dir
    skipped: list[Mount] = field(default_factory=list)


def _places(profile: SandboxProfile) -> _RuleSets:
    rules = _RuleSets()
    for mount in profile.mounts:
        dest = mount.dest
        if mount.kind in ("ro-bind", "ro-bind-try"):
            if mount.source and mount.source != dest:
                rules.skipped.append(mount)
            elif any(is_under(dest, w) for w in profile.writable):
                rules.deny_write.append((dest, mount.reason))
            else:
                rules.read.append(dest)
        elif mount.kind == "bind" and dest == EGRESS_SOCKET:
            continue  # on macOS the proxy is reached over loopback TCP, below
        elif mount.kind == "bind" and mount.reason.startswith(PINNED):
            continue  # a path rule denies by path: a renamed directory takes none with it
        elif mount.kind == "bind" and mount.source and mount.source != dest:
            rules.skipped.append(mount)  # another tree shown at dest: no rule can say that
        elif mount.kind == "bind":
            rules.read.append(dest)
            rules.write.append(dest)
        elif mount.kind == "symlink":
            rules.read.append(dest)  # on macOS these (/bin, /sbin) are real directories
        elif mount.kind == "dir":
            rules.metadata.append(dest)
        elif mount.kind == "mask-file":
            rules.deny_read.append((dest, mount.reason, False))
        elif mount.kind == "tmpfs" and mount.reason.startswith("denyRead"):
            rules.deny_read.append((dest, mount.reason, True))
        # proc, dev, the private /tmp and /dev/shm: the device list and (param "TMPDIR")
    return rules


def _allows(profile: SandboxProfile, rules: _RuleSets) -> list[str]:
    """The header and every allow rule."""
    lines = [
        "(version 1)",
        f";; ironcurtain profile for server {profile.name!r} (generated; do not edit)",
        "(deny default)",
        "",
        ";; processes: start programs from readable places, nothing else",
        "(allow process-fork)",
        "(allow process-exec",
        *[f"    {f}" for f in _filters("subpath", rules.read)],
        ")",
        "(allow signal (target same-sandbox))",
        "(allow sysctl-read)",
        "(allow ipc-posix-shm)",
        "(allow mach-lookup",
        *[f"    (global-name {sbpl_string(s)})" for s in MACH_SERVICES],
        ")",
        "",
    ]
    lines += _rule("allow", "file-read*", _filters("subpath", rules.read), "read allowlist")
    lines += _rule(
        "allow",
        "file-read* file-write*",
        [*_filters("subpath", rules.write), '(subpath (param "TMPDIR"))'],
        "writable: the workspace, allowWrite, the private TMPDIR",
    )
    lines += _rule(
        "allow",
        "file-read* file-write-data file-ioctl",
        _filters("literal", list(MACOS_DEVICES)),
        "devices",
    )
    lines += _rule(
        "allow",
        "file-read-metadata",
        [
            '(literal "/")',
            *_filters("literal", sorted(set(rules.metadata))),
        ],
        "parent directories on the way to allowed paths",
    )
    if profile.network == "proxy":
        lines += [
            ";; network: only the egress proxy's port (no other route; deny default covers it)",
            f'(allow network-outbound (remote ip "localhost:{PROXY_PORT}"))',
        ]
    return lines


def _denies(profile: SandboxProfile, rules: _RuleSets) -> list[str]:
    """The deny rules, after every allow so they win, and the mounts no rule can say."""
    lines: list[str] = []
    lines += ["", ";; ---- denies: after every allow, so they win ----"]
    if profile.network == "none":
        lines.append("(deny network*)")
    lines.append("(deny appleevent-send)")
    for root in profile.writable:
        regexes = [
            f'(regex #"{protected_name_regex(form, name)}")'
            for form in both_forms(root)
            for name in ALWAYS_PROTECTED_NAMES
        ] + [
            f'(regex #"{protected_name_regex(form, suffix)}")'
            for form in both_forms(root)
            for suffix in (*PROTECTED_SUFFIXES, *PROTECTED_PATTERNS)
        ]
        lines += _rule("deny", "file-write*", regexes, f"always-protected names in {root}")
    for path, reason in rules.deny_write:
        lines += _rule("deny", "file-write*", _filters("subpath", [path]), reason)
    for path, reason, is_dir in rules.deny_read:
        kind = "subpath" if is_dir else "literal"
        lines += _rule("deny", "file-read* file-write*", _filters(kind, [path]), reason)
    for mount in rules.skipped:
        lines.append(
            f";; not expressible in Seatbelt: {mount.dest} <- {mount.source} ({mount.reason})"
        )
    return lines


def render(profile: SandboxProfile) -> str:
    """The SBPL profile for ``sandbox-exec -p``."""
    rules = _places(profile)
    lines = _allows(profile, rules) + _denies(profile, rules)
    return "\n".join(lines) + "\n"
