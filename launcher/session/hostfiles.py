"""What a session makes on the host before its servers start, and takes away after: the
workspace, the runtime directory, placeholders for paths the sandbox mounts that do not
exist yet, the audit log, and (running as root) access for the servers' user to the roots
they may write. A session leaves nothing behind that it created and never used."""

from __future__ import annotations

import contextlib
import os
import shutil

from launcher.audit.log import AuditLog
from launcher.host import acl
from launcher.plan.session_plan import SessionPlan
from launcher.shared import rundir
from launcher.shared.errors import StartupError
from sandbox_profiles import write_runtime_files


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

    def prepare(self) -> AuditLog:
        """Make everything the servers and the session need; returns the open audit log.
        A plan for every caller has no places of its own: each caller's are made when it
        first calls (:meth:`make_places` of its plan's files)."""
        plan = self.plan
        try:
            uid, gid = plan.run_as or (os.getuid(), os.getgid())
            rundir.sweep_stale()
            write_runtime_files(plan.runtime_dir, uid, gid)
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
        """Running as root, servers run as ``identity``: make the workspace (and allowWrite
        roots) theirs to use. A workspace this session created is simply given to them; an
        existing one owned by someone else gets an ACL entry, nobody's ownership changes."""
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
        for root in roots:
            try:
                if root == plan.workspace and plan.create_workspace:
                    os.chown(root, uid, gid)
                elif os.stat(root).st_uid != uid:
                    acl.grant(root, uid)
            except OSError as exc:
                raise StartupError(
                    f"cannot give the sandbox's user (uid {uid}) access to {root}: "
                    f"{exc.strerror}.\nTo fix: use a workspace on a filesystem with ACLs, or "
                    f"one owned by an ordinary user (servers then run as that user)"
                ) from None

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
        """What :meth:`make_places` made and nothing was put in: placeholders still empty,
        the workspace if it is still empty."""
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
