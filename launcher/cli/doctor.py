"""``ironcurtain doctor``: can this machine sandbox? One line per check."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from collections.abc import Callable

from launcher.host.machine import MACOS, SECCOMP_FIX, sandbox_problem
from sandbox_profiles.bwrap import SETPRIV
from sandbox_profiles.launch import SANDBOX_EXEC
from sandbox_profiles.records import frozen

OK, WARN, FAIL = "ok", "warn", "FAIL"


@frozen
class Check:
    status: str
    name: str
    detail: str
    fix: str = ""


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return None


def check_bwrap() -> Check:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return Check(
            FAIL, "bubblewrap", "bwrap is not installed", "sudo apt-get install bubblewrap"
        )
    try:
        done = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=5)
        version = done.stdout.strip() or "unknown version"
    except (OSError, subprocess.SubprocessError) as exc:
        return Check(FAIL, "bubblewrap", f"{bwrap} does not run: {exc}")
    return Check(OK, "bubblewrap", f"{version} at {bwrap}")


def check_userns() -> Check:
    """Whether an ordinary user can create the user namespace bwrap needs."""
    if _read("/proc/sys/kernel/unprivileged_userns_clone") == "0":
        return Check(
            WARN if os.geteuid() == 0 else FAIL,
            "user namespaces",
            "disabled for ordinary users (kernel.unprivileged_userns_clone=0)",
            "sudo sysctl -w kernel.unprivileged_userns_clone=1",
        )
    if _read("/proc/sys/user/max_user_namespaces") == "0":
        return Check(
            WARN if os.geteuid() == 0 else FAIL,
            "user namespaces",
            "disabled (user.max_user_namespaces=0)",
            "sudo sysctl -w user.max_user_namespaces=15000",
        )
    restricted = _read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1"
    problem = None
    if shutil.which("bwrap") and os.geteuid() != 0:
        problem = sandbox_problem(privileged=False)
    if problem:
        return Check(
            FAIL,
            "user namespaces",
            problem,
            "AppArmor restricts them: sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"
            " or give bwrap an AppArmor profile that allows userns"
            if restricted
            else "sudo sysctl -w kernel.unprivileged_userns_clone=1",
        )
    note = " (AppArmor restricts them, but bwrap is allowed)" if restricted else ""
    who = "as root, servers are sandboxed without one" if os.geteuid() == 0 else "usable"
    return Check(OK, "user namespaces", who + note)


def check_sandbox_start() -> Check:
    root = os.geteuid() == 0
    if shutil.which("bwrap") is None:
        return Check(FAIL, "sandbox start", "skipped: no bwrap")
    problem = sandbox_problem(privileged=root)
    if problem:
        return Check(FAIL, "sandbox start", problem)
    how = "privileged bwrap, servers switched to an unprivileged uid" if root else "bwrap"
    return Check(OK, "sandbox start", f"a test sandbox started ({how})")


def check_setpriv() -> Check:
    if os.geteuid() != 0:
        return Check(OK, "drop root", "not needed: not running as root")
    if os.access(SETPRIV, os.X_OK):
        return Check(OK, "drop root", f"{SETPRIV}: servers run as an unprivileged uid")
    return Check(FAIL, "drop root", f"{SETPRIV} is missing", "sudo apt-get install util-linux")


def check_seccomp() -> Check:
    from sandbox_profiles import seccomp

    status = _read("/proc/self/status") or ""
    if "Seccomp:" not in status:
        return Check(FAIL, "seccomp", "this kernel has no seccomp support")
    problem = seccomp.available()
    if problem:
        fix = f"{SECCOMP_FIX}; or pass --allow-no-seccomp to sandbox without the system-call filter"
        return Check(FAIL, "seccomp", problem, fix)
    return Check(
        OK, "seccomp", f"filter of {len(seccomp.filter_rules())} rules builds (libseccomp)"
    )


def check_limits() -> Check:
    if shutil.which("prlimit"):
        return Check(OK, "resource limits", "prlimit found (sandbox.limits can be used)")
    return Check(
        WARN,
        "resource limits",
        "prlimit missing: sandbox.limits cannot be applied",
        "sudo apt-get install util-linux",
    )


def check_inotify() -> Check:
    watches = _read("/proc/sys/fs/inotify/max_user_watches")
    if watches is None:
        return Check(FAIL, "inotify", "not available: protected names cannot be watched")
    return Check(OK, "inotify", f"up to {watches} watched directories per user")


def check_seatbelt() -> Check:
    if os.access(SANDBOX_EXEC, os.X_OK):
        return Check(OK, "sandbox-exec", SANDBOX_EXEC)
    return Check(FAIL, "sandbox-exec", "not found (it ships with macOS)")


def check_bundled_servers() -> Check:
    """Which of the bundled default config's servers are installed (the others are left
    out when it is used, each named with the command that adds it)."""
    from launcher.plan import bundled
    from launcher.plan.programs import search_path

    commands = bundled.bundled_commands()
    absent = bundled.missing(commands, search_path())
    there = [name for name in commands if name not in absent]
    if not absent:
        return Check(OK, "bundled servers", f"all installed: {', '.join(there)}")
    fixes = dict.fromkeys(why.split("; to add it: ", 1)[-1] for why in absent.values())
    return Check(
        WARN,
        "bundled servers",
        f"not installed: {', '.join(absent)} (the bundled config starts "
        f"{', '.join(there) or 'none of them'})",
        "; ".join(fixes),
    )


def checks() -> list[Callable[[], Check]]:
    if MACOS:
        return [check_seatbelt]
    return [
        check_bwrap,
        check_userns,
        check_sandbox_start,
        check_setpriv,
        check_seccomp,
        check_limits,
        check_inotify,
        check_bundled_servers,
    ]


def run_checks() -> int:
    """Print every check; 0 when this machine can sandbox, 3 when it cannot."""
    print(f"ironcurtain doctor: {platform.system()} {platform.release()} ({platform.machine()})")
    failed = False
    for check in checks():
        result = check()
        print(f"{result.status:<5} {result.name:<16} {result.detail}")
        if result.fix:
            print(f"{'':<5} {'':<16} fix: {result.fix}")
        failed |= result.status == FAIL
    print("this machine cannot sandbox MCP servers" if failed else "this machine can sandbox")
    return 3 if failed else 0
