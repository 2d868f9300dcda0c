"""The seccomp filter every sandboxed server runs under, compiled with libseccomp.

Allow by default (a server is an ordinary program) and refuse what a contained program never
needs and what has a history of kernel escapes: debugging other processes, io_uring, eBPF,
perf, userfaultfd, the kernel keyring, new user namespaces, pushing input into a terminal,
and any foreign system-call ABI (x32, i386), which kills the process.

The binding (``pyseccomp``, ctypes over the system's libseccomp) is imported only when a
filter is compiled.
"""

from __future__ import annotations

import errno
from typing import Any

from sandbox_profiles.records import frozen

CLONE_NEWUSER = 0x10000000
TIOCSTI = 0x5412
TIOCLINUX = 0x541C

# Refused outright with EPERM.
DENIED_SYSCALLS: tuple[str, ...] = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "keyctl",
    "add_key",
    "request_key",
    "setns",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "mount",
    "umount2",
    "pivot_root",
    "open_by_handle_at",
    "fsopen",
    "fsmount",
    "move_mount",
    "open_tree",
    "pidfd_getfd",
)


class SeccompUnavailable(Exception):
    """libseccomp (or its binding) is missing on this machine."""


@frozen
class FilterRule:
    syscall: str
    action: str  # "EPERM", "ENOSYS"
    condition: str = ""  # human-readable argument condition, for `ironcurtain profile`


def filter_rules() -> list[FilterRule]:
    """The filter as data (what `ironcurtain profile` prints).

    >>> [r.syscall for r in filter_rules() if r.condition][:2]
    ['clone', 'unshare']
    """
    rules = [FilterRule(name, "EPERM") for name in DENIED_SYSCALLS]
    rules += [
        FilterRule("clone", "EPERM", "flags include CLONE_NEWUSER"),
        FilterRule("unshare", "EPERM", "flags include CLONE_NEWUSER"),
        # clone3 passes its flags in memory a filter cannot read: ENOSYS makes libc fall
        # back to clone, whose flags it can.
        FilterRule("clone3", "ENOSYS"),
        FilterRule("ioctl", "EPERM", "request is TIOCSTI (push terminal input)"),
        FilterRule("ioctl", "EPERM", "request is TIOCLINUX"),
    ]
    return rules


def _binding() -> Any:
    try:
        import pyseccomp
    except (ImportError, RuntimeError, OSError) as exc:  # RuntimeError: no libseccomp.so
        raise SeccompUnavailable(str(exc) or type(exc).__name__) from exc
    return pyseccomp


def available() -> str | None:
    """None when a filter can be compiled here, else why not."""
    try:
        compile_filter()
    except SeccompUnavailable as exc:
        return str(exc)
    return None


def compile_filter() -> bytes:
    """The filter as a classic BPF program, the format ``bwrap --seccomp FD`` reads."""
    sc = _binding()
    import tempfile

    try:
        flt = sc.SyscallFilter(sc.ALLOW)
        # Any other ABI than the native one (x32 on x86_64, i386 via int 0x80) is killed.
        flt.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)
        for name in DENIED_SYSCALLS:
            _add(sc, flt, sc.ERRNO(errno.EPERM), name)
        for name in ("clone", "unshare"):
            _add(
                sc,
                flt,
                sc.ERRNO(errno.EPERM),
                name,
                sc.Arg(0, sc.MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER),
            )
        _add(sc, flt, sc.ERRNO(errno.ENOSYS), "clone3")
        for request in (TIOCSTI, TIOCLINUX):
            _add(
                sc,
                flt,
                sc.ERRNO(errno.EPERM),
                "ioctl",
                sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, request),
            )
        with tempfile.TemporaryFile() as out:
            flt.export_bpf(out)
            out.seek(0)
            return out.read()
    except OSError as exc:
        raise SeccompUnavailable(f"libseccomp failed to build the filter: {exc}") from exc


def _add(sc: Any, flt: Any, action: int, name: str, *args: object) -> None:
    try:
        number = sc.resolve_syscall(sc.system_arch(), name)
    except (OSError, ValueError):
        return  # not a system call on this architecture (or too new for this libseccomp)
    if number < 0:
        return
    flt.add_rule(action, name, *args)
