"""What ``ironcurtain run`` starts before its event loop and the relay's modules exist: the
host's files (the audit log among them), the ``--http`` socket, the guard's watches, the
egress proxies' listening sockets, and every server's process.

A server's start-up (an interpreter, a Node program) is most of the time a session takes to
be ready, so it is begun as soon as the plan is complete (the config and the policy read and
validated, the profiles and the seccomp filter built): what the relay needs besides
(asyncio, the gate, the approvals socket, the client transport) is loaded and set up while
the servers start, on the other core. Nothing here writes to a server: its first input is
the ``initialize`` the session sends once it has taken the process over, so a session that
fails before then stops servers that have received nothing (:meth:`Prestarted.abandon`).

Only the standard library and the planning modules are imported here.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import socket
import subprocess
from dataclasses import field

from launcher.audit.log import AuditLog
from launcher.guard.watch import Guard, GuardError
from launcher.host.no_dumps import keep_from_dumps
from launcher.host.oscalls import wide_table_fd
from launcher.host.session_ca import SessionCA, write_bundle
from launcher.plan.session_plan import SessionPlan
from launcher.session.hostfiles import HostFiles, writable_roots
from launcher.shared import dirs
from launcher.shared.user_errors import StartupError
from launcher.transports.http.listener import listen_http
from sandbox_profiles.records import mutable


def kill(proc: subprocess.Popen[bytes]) -> None:
    """Stop a server that was never spoken to: its whole process group, at once."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def _not_yet(_: object) -> None:
    """The guard's callbacks until the session takes it over (nothing settles it before)."""


@mutable
class Prestarted:
    """What :func:`prestart` made, for the session to take over (or abandon)."""

    files: HostFiles
    audit: AuditLog
    guard: Guard | None
    listeners: dict[str, socket.socket] = field(default_factory=dict)  # egress, by server
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    http: socket.socket | None = None  # --http: bound and listening
    # The session CA of each server with brokered secrets (its bundle written for its sandbox).
    authorities: dict[str, SessionCA] = field(default_factory=dict)

    def drop_unadopted(self) -> None:
        """Stop the servers and close the sockets the session has not taken over (the
        servers have received nothing)."""
        for proc in self.procs.values():
            kill(proc)
        self.procs.clear()
        for listener in self.listeners.values():
            path = listener.getsockname()
            listener.close()
            with contextlib.suppress(OSError):
                os.unlink(path)
        self.listeners.clear()
        if self.http is not None:
            self.http.close()
            self.http = None

    def abandon(self) -> None:
        """The session failed before it took any of this over: the servers stopped, the
        sockets closed, what was made for them removed."""
        self.drop_unadopted()
        if self.guard is not None:
            self.guard.close()
        self.audit.close()
        self.files.remove()


def raise_descriptor_limit(wanted: int = 65536) -> None:
    """Raise this process's soft limit on open descriptors (up to its hard limit), so what
    servers make it hold (proxy connections, watched directories) cannot exhaust it; the
    egress proxy caps connections per server on top of that."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def prestart(plan: SessionPlan) -> Prestarted:
    """Everything a server needs to exist before it starts, then the servers, in this order:
    the host's files, the ``--http`` socket, the guard watching every root a server may
    write (before any can), the egress sockets (bound into the sandboxes), the processes.
    On any failure what was made is undone and :class:`StartupError` says what failed."""
    raise_descriptor_limit()
    wide_table_fd()  # now, while this process has one thread
    if any(sp.secrets or sp.remote is not None for sp in plan.servers.values()):
        keep_from_dumps()  # it holds secrets' values, or will hold a remote server's token
    files = HostFiles(plan)
    try:
        audit = files.prepare()
    except BaseException:
        files.remove()  # what was made before the failure: the workspace, the runtime dir
        raise
    made = Prestarted(files, audit, None)
    try:
        if plan.http_port is not None:
            # A port that cannot be had is a mistake to say before anything has started.
            made.http = listen_http(plan.http_port, plan.http_bind)
        made.guard = _guard(plan)
        for name, sp in plan.servers.items():
            if sp.egress is not None and sp.egress_socket is not None:
                made.listeners[name] = egress_listener(name, sp.egress_socket)
            if sp.secrets and sp.ca_bundle is not None:
                hosts = sorted({host for b in sp.secrets for host, _ in b.hosts})
                made.authorities[name] = authority(name, sp.ca_bundle, hosts)
        # Planned for every caller, each caller's servers start when it first calls.
        starting = {} if plan.per_caller else plan.servers
        for name, sp in starting.items():
            if sp.remote is not None:
                continue  # reached where it runs, once the session's loop is up
            try:
                made.procs[name] = sp.launch.spawn()
            except OSError as exc:
                raise StartupError(f"server '{name}' failed to start: {exc}") from None
    except BaseException:
        made.abandon()
        raise
    return made


def _guard(plan: SessionPlan) -> Guard | None:
    """The guard over the roots servers may write (planned for every caller: none yet, each
    caller's added when it first calls)."""
    servers = {} if plan.per_caller else plan.servers
    roots = writable_roots(plan) if servers else []
    if not roots and not plan.per_caller:
        return None
    guarded = [p for sp in servers.values() for p in sp.guarded]
    anchored = [p for sp in servers.values() for p in sp.anchored]
    quarantine = os.path.join(str(dirs.state_dir()), "quarantine", plan.session_id)
    guard: Guard | None = None
    try:
        guard = Guard(roots, guarded, quarantine, _not_yet, _not_yet, anchored)
        guard.start()
    except GuardError as exc:
        if guard is not None:
            guard.close()
        raise StartupError(f"cannot watch the workspace for protected files: {exc}") from None
    return guard


def authority(server: str, bundle: str, hosts: list[str]) -> SessionCA:
    """A CA of its own for a server with brokered secrets, valid for its secrets' hosts
    alone, written into the bundle its sandbox trusts (bound in as it starts)."""
    ca = SessionCA(server, hosts)
    try:
        write_bundle(ca, bundle)
    except OSError as exc:
        raise StartupError(
            f"cannot write the CA bundle for '{server}' at {bundle}: {exc.strerror}"
        ) from None
    return ca


def egress_listener(server: str, path: str) -> socket.socket:
    """The egress proxy's socket for ``server``, listening (connections wait in its backlog
    until the proxy serves them)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        # Reachable only through the runtime directory (owner-only) and the sandbox it is
        # bound into; the sandbox's uid must be able to connect.
        os.chmod(path, 0o666)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise StartupError(
            f"cannot start the egress proxy for '{server}' at {path}: {exc.strerror}"
        ) from None
    sock.setblocking(False)
    return sock


__all__ = ["Prestarted", "authority", "egress_listener", "kill", "prestart"]
