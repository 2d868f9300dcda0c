"""An approved call that needs more than its server's standing sandbox runs in a one-shot
instance of that server whose sandbox holds exactly the approved paths.

The one-shot sandbox is the standing profile with three changes:

- its root is a *staging* directory of ironcurtain's (in the session's runtime directory);
  every approved path is staged there at its own absolute path, as a copy of what the host
  has (a directory being moved or removed is staged empty; a directory only read is copied
  without its sockets, FIFOs and devices);
- the standing writable roots (the workspace, ``allowWrite``) are not mounted at all, and
  no host directory is mounted that the standing sandbox does not have, so the instance
  can change nothing of the host directly, and reaches no socket of the host's it could
  not reach before;
- a server that is told its directories on its command line (the filesystem server) is
  also told the directories of the approved paths.

After the call answers, the instance is stopped, then what the call did to the approved
paths is carried over to the host, and nothing else (:mod:`launcher.servers.staging`). An instance
approved for the session is kept for the identical calls after it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import glob
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from launcher.host.machine import PLATFORM
from launcher.plan.server_plan import client_capabilities
from launcher.plan.session_plan import SessionPlan
from launcher.plan.workspace import homes, moved_places
from launcher.relay.approving.grants import SYSTEM_PLACES, CannotWiden, Grant, plan_grants
from launcher.relay.seams import Carried
from launcher.servers.connection import ServerConnection
from launcher.servers.eras import REFUSED_PATIENCE
from launcher.servers.staging import Stage
from launcher.shared import dirs, rundir
from launcher.shared.jsonrpc import Message
from sandbox_profiles.model import Mount, SandboxProfile
from sandbox_profiles.ways import is_under
from sandbox_profiles.writable_roots import root_problem

START_TIMEOUT = 60.0


def widened_profile(
    profile: SandboxProfile, grants: Sequence[Grant], stage_root: str, roots: Sequence[str]
) -> SandboxProfile:
    """The one-shot profile: the standing one on a staging root (which holds every approved
    path, as a copy), without its writable roots; the directories of the approved paths
    added to a command line that lists the server's directories. Nothing of the host's is
    mounted that the standing sandbox does not mount."""
    staged = [g.path for g in grants if g.staged]

    def kept(mount: Mount) -> bool:
        if any(is_under(mount.dest, root) for root in profile.writable):
            return False  # the writable roots, and what is mounted inside them
        return not (mount.kind == "tmpfs" and any(is_under(p, mount.dest) for p in staged))

    mounts = [
        Mount("bind", "/", stage_root, "one-shot root: staged copies of the approved paths"),
        *(m for m in profile.mounts if kept(m)),
    ]
    argv = list(profile.argv)
    if any(a in roots for a in argv[1:]):
        argv += [d for d in grant_dirs(grants) if not any(is_under(d, a) for a in argv[1:])]
    return dataclasses.replace(
        profile, mounts=tuple(mounts), argv=tuple(argv), writable=(), guarded=()
    )


def grant_dirs(grants: Sequence[Grant]) -> list[str]:
    """The directories a server that works in named directories must be told of to reach
    the grants: a directory only read itself, the directory holding anything else."""
    return list(
        dict.fromkeys(
            g.path if g.kind == "directory" and not g.changes else os.path.dirname(g.path)
            for g in grants
        )
    )


def judge_moved_directory(grants: Sequence[Grant]) -> None:
    """A call that moves a directory puts all it holds where it is moved: that place is
    judged as a writable root is (:func:`root_problem`), so a directory of the workspace,
    whose ``config.toml`` or ``direnvrc`` matched nothing there, is never moved to be
    ``.cargo``, ``.config/direnv``, ``.git`` or ``node_modules``. :class:`CannotWiden`
    when it would be."""
    if not any(g.kind == "directory" and g.removes for g in grants):
        return
    for grant in grants:
        if grant.access == "write" and grant.kind == "absent":
            why = root_problem(grant.path, homes(grant.path), moved_places())
            if why is not None:
                raise CannotWiden(
                    f"{grant.argument}: a directory moved to {grant.path} brings all it holds "
                    f"there, and {grant.path} {why}; no approval moves a directory there"
                )


class OneShot:
    """A started one-shot instance and what it may carry over. A *kept* one (approved for
    the session) serves every identical call after the first: it is not stopped after a
    call, and its changes are carried over while it runs (every step of the carry-over
    opens the staging tree without following a symlink, so the running server cannot
    redirect it; it can only change what the approved paths get, which the approval
    covers)."""

    def __init__(
        self,
        conn: ServerConnection,
        stage: Stage,
        grants: Sequence[Grant],
        forget: Callable[[OneShot], None] = lambda _: None,
    ) -> None:
        self.conn = conn
        self.stage = stage
        self.grants = tuple(grants)
        self.kept = False
        self.busy = True
        self._forget = forget

    async def stop(self) -> None:
        await self.conn.stop()

    def release(self) -> None:
        """A kept instance's call is over: the staging agrees with the host again, and the
        next identical call may use it."""
        self.stage.settled(self.grants)
        self.busy = False

    def discard(self) -> None:
        self.kept = False
        self._forget(self)
        self.stage.remove()

    def commit(self) -> tuple[list[dict[str, object]], str | None]:
        """Carry the call's changes to the approved paths over to the host (the instance
        has stopped, unless kept)."""
        return self.stage.carry_over(self.grants)


class Widener:
    """Widened calls for the servers of one session plan."""

    def __init__(
        self,
        plan: SessionPlan,
        on_notification: Callable[[ServerConnection, Message], None] | None = None,
        carried: Callable[[], Carried | None] = lambda: None,
    ) -> None:
        self.plan = plan
        self.on_notification = on_notification
        self._carried = carried
        self.platform = PLATFORM
        self._live: set[OneShot] = set()
        self._kept: dict[str, OneShot] = {}  # by the session approval they serve
        own = {
            str(dirs.config_dir()): "ironcurtain's configuration",
            str(dirs.state_dir()): "ironcurtain's state (audit logs, pins, workspaces)",
            plan.runtime_dir: "the session's runtime directory",
        }
        # Canonical, as the arguments are (a symlinked ~/.config must not let one through),
        # and as named, in case the place is made later through another path.
        self.own = {
            **own,
            **{os.path.realpath(p): what for p, what in own.items()},
            **SYSTEM_PLACES,
        }

    def carried(self) -> Carried | None:
        """Who must know what the trusted process writes for an approved call."""
        return self._carried()

    def off_limits(self) -> dict[str, str]:
        """Every place no approval opens: ironcurtain's own, every session's runtime
        directory (its approvals and egress sockets), the kernel's and the devices'."""
        others = {
            os.path.realpath(path): "another ironcurtain session's runtime directory"
            for base in rundir.bases()
            for path in glob.glob(os.path.join(glob.escape(base), rundir.PREFIX + "*"))
        }
        return {**others, **self.own}

    def grants(self, server: str, tool: str, arguments: Mapping[str, object]) -> list[Grant]:
        """What the call needs beyond the server's standing sandbox (empty: nothing);
        :class:`CannotWiden` when no approval could give it."""
        sp = self.plan.servers.get(server)
        annotation = self.plan.engine.get_annotation(server, tool)
        if sp is None or sp.profile is None or annotation is None:
            return []
        roles = {arg: frozenset(r) for arg, r in annotation.args.items()}
        grants = plan_grants(sp.profile, roles, arguments, self.off_limits())
        judge_moved_directory(grants)
        if grants and self.platform != "linux":
            # The one-shot sandbox stands on mounts (a staging root); Seatbelt has none.
            raise CannotWiden(
                f"the call needs paths beyond its server's sandbox, and on {self.platform} "
                "an approval cannot give a sandbox more paths for one call (give the server "
                "those directories with allowRead/allowWrite instead)"
            )
        return grants

    async def start(
        self, server: str, grants: Sequence[Grant], keep: str | None = None, era: str | None = None
    ) -> OneShot:
        """A one-shot instance for the call, started and initialised. ``keep``: the
        session approval the call was made under; the instance kept for it serves the call
        when it is running and idle (its staging refreshed from the host), and a new one is
        kept for it otherwise. ``era``: the one the server is spoken to in for the call's
        client (a server of both eras whose config names none is opened offering it first)."""
        kept = self._kept.get(keep) if keep else None
        if kept is not None and kept.conn.running and not kept.busy:
            kept.busy = True
            try:
                await asyncio.to_thread(kept.stage.restage, kept.grants)
            except Exception:
                await self._drop(kept)
                raise
            return kept
        one_shot = await self._start_new(server, grants, era)
        if keep and (kept is None or not kept.busy):
            if kept is not None:
                await self._drop(kept)
            one_shot.kept = True
            self._kept[keep] = one_shot
        return one_shot

    async def close(self) -> None:
        """Stop every instance still running (the session ends)."""
        for one_shot in list(self._live):
            await self._drop(one_shot)

    async def _drop(self, one_shot: OneShot) -> None:
        try:
            await one_shot.stop()
        finally:
            one_shot.discard()

    def _forget(self, one_shot: OneShot) -> None:
        self._live.discard(one_shot)
        for key, kept in list(self._kept.items()):
            if kept is one_shot:
                del self._kept[key]

    async def _start_new(self, server: str, grants: Sequence[Grant], era: str | None) -> OneShot:
        sp = self.plan.servers[server]
        assert sp.profile is not None
        stage = Stage(self.plan.runtime_dir, server, sp.profile.run_as)
        conn: ServerConnection | None = None
        try:
            hidden = [m.dest for m in sp.profile.mounts if m.reason.startswith("denyRead")]
            # In a thread: a directory's copy can take a while, and other calls go on.
            await asyncio.to_thread(
                stage.prepare, grants, sp.profile.writable, sp.profile.cwd, hidden
            )
            profile = widened_profile(sp.profile, grants, stage.root, sp.roots)
            spec = dataclasses.replace(sp.launch, profile=profile)
            # Told as roots too: a server that takes its directories from roots/list (the
            # filesystem server replaces its own with them) must not lose the grants.
            client = client_capabilities(sp)
            extra = tuple({"uri": Path(d).as_uri(), "name": d} for d in grant_dirs(grants))
            client = dataclasses.replace(client, roots=(*client.roots, *extra))
            twin = era is not None and sp.config.era is None
            if era is not None and twin:
                client = dataclasses.replace(client, era=era)
            conn = ServerConnection(spec, self.on_notification, client)
            if twin:  # its standing instance serves that era: this one is given a start's time
                conn.patience = REFUSED_PATIENCE
            await asyncio.wait_for(self._start(conn), START_TIMEOUT)
        except BaseException as exc:
            if conn is not None:
                await conn.stop()
            stage.remove()
            if isinstance(exc, Exception) and conn is not None and conn.stderr_tail:
                tail = "; ".join(conn.stderr_tail[-3:])
                why = f"{exc or type(exc).__name__} (its last output: {tail})"
                raise RuntimeError(why) from None
            raise
        one_shot = OneShot(conn, stage, grants, self._forget)
        self._live.add(one_shot)
        return one_shot

    @staticmethod
    async def _start(conn: ServerConnection) -> None:
        await conn.start()
        await conn.initialize()
