"""What a session makes on the host before its servers start, and takes away after: the
workspace, the runtime directory, placeholders for paths the sandbox mounts that do not
exist yet, the audit log, and (running as root) access for the servers' user to the roots
they may write. A session leaves nothing behind that it created and never used."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable

from launcher.audit.log import AuditLog
from launcher.host import acl
from launcher.host.acl_ledger import AclLedger, replay_stale
from launcher.plan.config import warn
from launcher.plan.session_plan import SessionPlan
from launcher.shared import rundir
from launcher.shared.user_errors import StartupError
from sandbox_profiles.profile import write_runtime_files
from sandbox_profiles.ways import is_under

# What a server may do at a path, by the kind of the mount that decides what the path is.
_SEEN = {"bind": acl.WRITE, "ro-bind": acl.READ, "ro-bind-try": acl.READ}


def sandbox_view(plan: SessionPlan, roots: list[str]) -> Callable[[str], str | None]:
    """What the servers may do with a path below ``roots`` (:data:`acl.WRITE`,
    :data:`acl.READ`, or None: no server sees it, a ``denyRead`` mask hides it), the most
    any of them may. The mount that decides is the deepest whose destination holds the
    path, the last of those (as :func:`sandbox_profiles.ways.deepest_mount` finds it)."""
    views: list[list[tuple[str, str | None]]] = []
    for sp in plan.servers.values():
        if sp.profile is not None:
            views.append(
                [
                    (m.dest, _SEEN.get(m.kind))
                    for m in sp.profile.mounts
                    if any(is_under(m.dest, r) or is_under(r, m.dest) for r in roots)
                ]
            )

    def view(path: str) -> str | None:
        seen: set[str | None] = set()
        for mounts in views:
            deepest, kind = "", None
            for dest, what in mounts:
                if is_under(path, dest) and len(dest) >= len(deepest):
                    deepest, kind = dest, what
            seen.add(kind)
        return acl.WRITE if acl.WRITE in seen else acl.READ if acl.READ in seen else None

    return view


def writable_roots(plan: SessionPlan) -> list[str]:
    """Every directory some server's sandbox may write, once each."""
    roots: dict[str, None] = {}
    for sp in plan.servers.values():
        if sp.profile is not None:
            roots.update(dict.fromkeys(sp.profile.writable))
    return list(roots)


class HostFiles:
    def __init__(self, plan: SessionPlan) -> None:
        self.plan = plan
        self.placeholders: list[str] = []
        self.audit: AuditLog | None = None
        self._audit_existed = False
        self.ledger: AclLedger | None = None

    def prepare(self) -> AuditLog:
        """Make everything the servers and the session need; returns the open audit log.
        A plan for every caller has no places of its own: each caller's are made when it
        first calls (:meth:`make_places` of its plan's files)."""
        plan = self.plan
        try:
            replay_stale()  # what a killed session running as root left opened
        except OSError as exc:
            raise StartupError(f"cannot undo a killed session's ACL entries: {exc}") from None
        try:
            uid, gid = plan.run_as or (os.getuid(), os.getgid())
            rundir.sweep_stale()
            write_runtime_files(plan.runtime_dir, uid, gid)
            rundir.mark_origin(plan.runtime_dir)
            pid_file = os.path.join(plan.runtime_dir, rundir.PID_FILE)
            with open(pid_file, "w", encoding="utf-8") as pid:
                pid.write(str(os.getpid()))
        except OSError as exc:
            raise StartupError(f"cannot create {exc.filename}: {exc.strerror}") from None
        if not plan.per_caller:
            self.make_places()
        try:
            self._audit_existed = os.path.exists(plan.audit_path)
            self.audit = AuditLog(plan.audit_path, plan.session_id)
        except OSError as exc:
            raise StartupError(
                f"cannot open the audit log {plan.audit_path}: {exc.strerror}"
            ) from None
        return self.audit

    def make_places(self) -> None:
        """The places the servers use: the workspace (owner-only), placeholders for what
        their sandboxes mount that is not there yet, and (running as root) access for the
        servers' user to the roots they may write."""
        plan = self.plan
        try:
            if plan.create_workspace:
                os.makedirs(plan.workspace, mode=0o700, exist_ok=True)
            for sp in plan.servers.values():
                for path, is_dir in sp.placeholders:
                    if os.path.lexists(path):
                        continue
                    if is_dir:
                        os.makedirs(path)
                    else:
                        os.makedirs(os.path.dirname(path), exist_ok=True)
                        with open(path, "x", encoding="utf-8"):
                            pass
                    self.placeholders.append(path)
        except OSError as exc:
            raise StartupError(f"cannot create {exc.filename}: {exc.strerror}") from None
        if plan.run_as is not None:
            self._open_roots_to(plan.run_as)

    def _open_roots_to(self, identity: tuple[int, int]) -> None:
        """Running as root, servers run as ``identity``: let them at the workspace (and the
        allowWrite roots) for this session. A workspace this session created is simply
        given to them; an existing one owned by someone else gets ACL entries, recorded and
        undone at the end (:class:`AclLedger`), nobody's ownership changes."""
        plan = self.plan
        uid, gid = identity
        roots = writable_roots(plan)
        shown = any(
            m.dest == plan.workspace
            for sp in plan.servers.values()
            if sp.profile is not None
            for m in sp.profile.mounts
        )
        if shown and plan.workspace not in roots:
            roots.append(plan.workspace)  # shown read-only: still theirs to read
        opened: list[str] = []
        try:
            for root in roots:
                if root == plan.workspace and plan.create_workspace:
                    os.chown(root, uid, gid)
                elif os.stat(root).st_uid != uid:
                    opened.append(root)
            if opened:
                view = sandbox_view(plan, opened)
                self.ledger = AclLedger.open_roots(plan.session_id, uid, opened, view)
        except OSError as exc:
            raise StartupError(
                f"cannot give the sandbox's user (uid {uid}) access to {exc.filename or roots}: "
                f"{exc.strerror}.\nTo fix: use a workspace on a filesystem with ACLs, or "
                f"one owned by an ordinary user (servers then run as that user)"
            ) from None

    def close_access(self) -> None:
        """Undo what :meth:`_open_roots_to` opened (the servers have stopped)."""
        ledger, self.ledger = self.ledger, None
        if ledger is not None:
            try:
                ledger.close()
            except (OSError, ValueError, StartupError) as exc:
                warn(
                    f"cannot undo the ACL entries given to the sandbox's user ({exc}); "
                    f"the next start as root tries again ({ledger.path})"
                )

    def remove(self) -> None:
        """After the servers stopped: placeholders still empty, the runtime directory, the
        audit log closed (and removed if this session made it and wrote nothing), the
        workspace if this session made it and it is still empty."""
        plan = self.plan
        self.remove_places()
        if self.audit is not None:
            self.audit.close()
            if not self._audit_existed:
                with contextlib.suppress(OSError):
                    if os.path.getsize(plan.audit_path) == 0:
                        os.unlink(plan.audit_path)
        shutil.rmtree(plan.runtime_dir, ignore_errors=True)

    def remove_places(self) -> None:
        """What :meth:`make_places` made and nothing was put in: the ACL entries it gave,
        placeholders still empty, the workspace if it is still empty."""
        self.close_access()
        for path in reversed(self.placeholders):
            with contextlib.suppress(OSError):
                if os.path.isdir(path):
                    os.rmdir(path)  # only while still empty
                elif os.path.getsize(path) == 0:
                    os.unlink(path)
        self.placeholders = []
        if self.plan.create_workspace:
            with contextlib.suppress(OSError):
                os.rmdir(self.plan.workspace)  # only if still empty
