"""The staging tree of a widened call, and the carry-over of what the call did to the
approved paths back to the host (:mod:`launcher.servers.widen` runs the server on it).

Every approved path is staged at its own absolute path below the staging root: a copy of
the host's file when the call may read it, an empty file of the same mode when it may only
replace or remove it, an empty directory for a directory moved or removed as a whole, a
copy of a directory only read (its directories, regular files and symlinks; never a
socket, a FIFO or a device, nothing behind a ``denyRead`` mask; bounded in entries and
bytes). After the call, exactly these changes reach the host: a file's new content (written
beside it and renamed over it, its mode and owner kept), a new directory (empty), a
removal, or a move (the host's own rename, so the content moved is the host's, onto a path
the call was approved to write). A host path that changed since it was staged is not
overwritten, and what is moved is checked to be what was staged. Every step opens the
staging tree and the host one component at a time without following a symlink, and a file
is opened non-blocking, so nothing a server plants (links, FIFOs, swapped directories)
redirects or holds the trusted process.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Sequence

from launcher.host.fdtree import (
    Snapshot,
    TooLarge,
    copy_fd,
    copy_tree,
    kind_now,
    lstat_at,
    open_file_at,
    parts,
    remove_tree,
    replace_at,
    same_content,
    snapshot,
    snapshot_at,
    walk,
)
from launcher.host.oscalls import DIR, NEW_FILE, READ_FILE, rename_noreplace
from launcher.relay.approving.grants import CannotWiden, Grant

# A file (a directory's files together) larger than this is not copied into a one-shot
# sandbox (the call fails instead), nor a file the call left larger back out of it.
MAX_STAGED_BYTES = 256 << 20
# A directory to read with more entries than this is not copied (the call fails instead).
MAX_STAGED_ENTRIES = 20_000


class Stage:
    """The staging root of one widened call."""

    def __init__(self, runtime_dir: str, server: str, run_as: tuple[int, int] | None) -> None:
        self.root = tempfile.mkdtemp(prefix=f"widen-{server}-", dir=runtime_dir)
        os.chmod(self.root, 0o755)
        self.run_as = run_as
        self.before: dict[str, Snapshot] = {}  # the host's paths, when staged
        self.staged: dict[str, Snapshot] = {}  # the staged paths, as staged
        self.hidden: tuple[str, ...] = ()  # what a copy of a directory leaves out

    def _mkdirs(self, path: str, writable: bool) -> str:
        """``path``'s directories below the staging root, each 0755 whatever the user's
        umask (run as root, the server is another user, who must be able to walk them)."""
        fd = os.open(self.root, DIR)
        try:
            for part in parts(path):
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                    made = True
                except FileExistsError:
                    made = False
                child = os.open(part, DIR, dir_fd=fd)
                os.close(fd)
                fd = child
                if made:
                    os.fchmod(fd, 0o755)
            if writable and self.run_as is not None:
                os.fchown(fd, *self.run_as)
        finally:
            os.close(fd)
        return self.root + path

    def prepare(
        self,
        grants: Sequence[Grant],
        roots: Sequence[str],
        cwd: str,
        hidden: Sequence[str] = (),
    ) -> None:
        """Make the skeleton (the standing roots, empty; the working directory) and stage
        every approved path, remembering what the host had and what was staged.
        ``hidden``: what no copy holds (the server's ``denyRead`` masks)."""
        self.hidden = tuple(hidden)
        for directory in (*roots, cwd):
            self._mkdirs(directory, writable=False)
        for grant in grants:
            if grant.staged:
                self._mkdirs(os.path.dirname(grant.path), writable=grant.changes)
                self._stage(grant)

    def _stage(self, grant: Grant) -> None:
        """Stage ``grant``'s path from the host, through descriptors: the staging tree is
        the server's (a kept instance runs meanwhile), so nothing here follows a link it
        planted."""
        self.before[grant.path] = snapshot(grant.path)
        parent, name = os.path.split(grant.path)
        kind = kind_now(grant.path)
        with walk(self.root, parts(parent)) as fd:
            if kind == "directory" and not grant.changes:
                self._copy_tree_in(grant, fd, name)
            elif kind == "directory":
                os.mkdir(name, 0o755, dir_fd=fd)  # moved or removed as a whole
            elif kind == "file":
                self._copy_in(grant, fd, name)
            if kind != "absent" and grant.changes and self.run_as is not None:
                os.chown(name, *self.run_as, dir_fd=fd, follow_symlinks=False)
        self.staged[grant.path] = snapshot_at(self.root, grant.path)

    def restage(self, grants: Sequence[Grant]) -> None:
        """Before a kept instance's next call: a path whose host or staged state is not
        what the last call left is staged afresh from the host (a directory only read,
        always: what changed inside it does not show on the directory)."""
        for grant in grants:
            if not grant.staged:
                continue
            host, staged = snapshot(grant.path), snapshot_at(self.root, grant.path)
            copied_dir = grant.kind == "directory" and not grant.changes
            same = (host, staged) == (self.before[grant.path], self.staged[grant.path])
            if same and not copied_dir:
                continue
            parent, name = os.path.split(grant.path)
            with walk(self.root, parts(parent)) as fd:
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    pass
                else:
                    if stat.S_ISDIR(st.st_mode):
                        shutil.rmtree(name, dir_fd=fd)
                    else:
                        os.unlink(name, dir_fd=fd)
            self._stage(grant)

    def settled(self, grants: Sequence[Grant]) -> None:
        """After a kept instance's call was carried over: host and staging agree now."""
        for grant in grants:
            if grant.staged:
                self.before[grant.path] = snapshot(grant.path)
                self.staged[grant.path] = snapshot_at(self.root, grant.path)

    def _copy_tree_in(self, grant: Grant, dir_fd: int, name: str) -> None:
        """The host's directory, as a copy (see :func:`~launcher.host.fdtree.copy_tree`); the call
        fails when it is too large to copy."""
        parent, host_name = os.path.split(grant.path)
        with walk("/", parts(parent)) as host_parent:
            src = os.open(host_name, DIR, dir_fd=host_parent)
        try:
            os.mkdir(name, 0o700, dir_fd=dir_fd)
            copy = os.open(name, DIR, dir_fd=dir_fd)
            try:
                budget = [MAX_STAGED_ENTRIES, MAX_STAGED_BYTES]
                copy_tree(src, copy, grant.path, self.hidden, budget, MAX_STAGED_ENTRIES)
                os.fchmod(copy, stat.S_IMODE(os.fstat(src).st_mode) & 0o777)
            finally:
                os.close(copy)
        except TooLarge as exc:
            raise CannotWiden(
                f"{grant.argument}: {grant.path} holds {exc}, more than a "
                "widened call may be given a copy of (give the server that directory with "
                "allowRead instead)"
            ) from None
        finally:
            os.close(src)

    def _copy_in(self, grant: Grant, dir_fd: int, name: str) -> None:
        """The host's file, as a copy when the call may read it (an empty file of the same
        mode when it may only replace or remove it)."""
        src = open_file_at("/", grant.path)
        try:
            st = os.fstat(src)
            if grant.reads and st.st_size > MAX_STAGED_BYTES:
                raise CannotWiden(
                    f"{grant.argument}: {grant.path} is {st.st_size} bytes, more than the "
                    f"{MAX_STAGED_BYTES >> 20} MiB a widened call may be given"
                )
            dst = os.open(name, NEW_FILE, 0o600, dir_fd=dir_fd)
            try:
                if grant.reads:
                    copy_fd(src, dst, MAX_STAGED_BYTES)
                os.fchmod(dst, stat.S_IMODE(st.st_mode) & 0o777 if grant.changes else 0o444)
            finally:
                os.close(dst)
        finally:
            os.close(src)

    def remove(self) -> None:
        remove_tree(self.root)

    def carry_over(self, grants: Sequence[Grant]) -> tuple[list[dict[str, object]], str | None]:
        """Carry what the call did to the approved paths over to the host. Returns a
        record per path it could change and, when nothing could be carried over, why."""
        staged = [g for g in grants if g.changes]
        changed = [g.path for g in staged if snapshot(g.path) != self.before[g.path]]
        if changed:
            why = (
                f"{', '.join(changed)} changed on the host while the approved call ran; "
                "nothing was written"
            )
            return [{**g.record(), "outcome": "not carried over"} for g in staged], why
        after = {g.path: lstat_at(self.root, g.path) for g in staged}
        outcomes: dict[str, str] = {}
        # What the host had when the path was staged (for a kept instance: after the last
        # call), not what it had when the call was planned.
        had = {g.path: self.before[g.path] for g in staged}
        removed = [g for g in staged if g.removes and had[g.path] and after[g.path] is None]
        # Only a path the call may write can be where something is moved to: a grant to
        # remove a path gives no right to make one there.
        appeared = [
            g
            for g in staged
            if g.access == "write" and had[g.path] is None and after[g.path] is not None
        ]
        try:
            if len(removed) == 1 and len(appeared) == 1 and self._moved(removed[0], appeared[0]):
                outcomes[removed[0].path] = outcomes[appeared[0].path] = "moved"
            for grant in staged:
                if grant.path not in outcomes:
                    outcomes[grant.path] = self._carry(grant, after[grant.path])
        except OSError as exc:
            done = [{**g.record(), "outcome": outcomes.get(g.path, "failed")} for g in staged]
            return done, f"the approved change could not be made on the host: {exc}"
        records = [{**g.record(), "outcome": outcomes[g.path]} for g in staged]
        odd = [p for p, outcome in outcomes.items() if outcome.startswith("not carried over")]
        if odd:
            return records, (
                "not carried over to the host: "
                + "; ".join(f"{p} ({outcomes[p].removeprefix('not carried over: ')})" for p in odd)
            )
        return records, None

    def _moved(self, source: Grant, target: Grant) -> bool:
        """The call moved ``source`` to ``target``: done on the host, by the host's own
        rename (the content moved is the host's; nothing of the instance's goes along).
        It is renamed to a hidden name beside the target first and checked to be what was
        staged (a server that reaches the source cannot have swapped in a symlink or a FIFO
        after the check), then to the target; anything else is put back."""
        st = lstat_at(self.root, target.path)
        assert st is not None
        was = self.before[source.path]
        assert was is not None
        is_dir = stat.S_ISDIR(was[0])
        want = stat.S_ISDIR if is_dir else stat.S_ISREG
        if not want(st.st_mode):
            return False
        src_parent, src_name = os.path.split(source.path)
        dst_parent, dst_name = os.path.split(target.path)
        temp = f".{dst_name}.ironcurtain-{secrets.token_hex(4)}"
        with walk("/", parts(src_parent)) as src_fd, walk("/", parts(dst_parent)) as dst_fd:
            try:
                rename_noreplace(src_fd, src_name, dst_fd, temp)
            except OSError as exc:
                if exc.errno != errno.EXDEV or is_dir:  # another filesystem
                    raise
                self._install(target.path, source.path, "/")
                os.unlink(src_name, dir_fd=src_fd)
                return True
            moved = os.stat(temp, dir_fd=dst_fd, follow_symlinks=False)
            if (moved.st_mode, moved.st_ino) != (was[0], was[1]):
                rename_noreplace(dst_fd, temp, src_fd, src_name)
                raise OSError(f"{source.path} was replaced while it was being moved")
            try:
                rename_noreplace(dst_fd, temp, dst_fd, dst_name)
            except OSError:
                rename_noreplace(dst_fd, temp, src_fd, src_name)
                raise
        return True

    def _carry(self, grant: Grant, after: os.stat_result | None) -> str:
        if snapshot_at(self.root, grant.path) == self.staged[grant.path]:
            return "unchanged"  # the call did nothing to it
        if after is not None and after.st_size > MAX_STAGED_BYTES and stat.S_ISREG(after.st_mode):
            return f"not carried over: larger than {MAX_STAGED_BYTES >> 20} MiB"
        if grant.access == "write" and after is not None and stat.S_ISREG(after.st_mode):
            return self._install(grant.path, grant.path, self.root)
        if grant.access == "write" and after is not None and stat.S_ISDIR(after.st_mode):
            if self.before[grant.path] is None:
                parent, name = os.path.split(grant.path)
                with walk("/", parts(parent)) as fd:
                    os.mkdir(name, 0o755, dir_fd=fd)
                return "directory created"
            return "unchanged"
        was = self.before[grant.path]
        if after is None and grant.removes and was is not None:
            parent, name = os.path.split(grant.path)
            with walk("/", parts(parent)) as fd:
                if stat.S_ISDIR(was[0]):
                    os.rmdir(name, dir_fd=fd)  # only an empty one: a tree is not removed
                else:
                    os.unlink(name, dir_fd=fd)
            return "removed"
        if after is not None and not (stat.S_ISREG(after.st_mode) or stat.S_ISDIR(after.st_mode)):
            return "not carried over: the server left something other than a file or a directory"
        return "unchanged"

    def _install(self, host_path: str, source_path: str, source_root: str) -> str:
        """Write the file ``source_root + source_path`` to ``host_path`` atomically (a
        temporary file beside it, renamed over it), keeping an existing file's mode and
        owner; "unchanged" when the content is the host's already."""
        src = open_file_at(source_root, source_path)
        try:
            parent, name = os.path.split(host_path)
            with walk("/", parts(parent)) as dir_fd:
                try:
                    old = os.open(name, READ_FILE, dir_fd=dir_fd)
                except FileNotFoundError:
                    old = None
                try:
                    if old is not None and same_content(old, src):
                        return "unchanged"
                    was = os.fstat(old) if old is not None else None
                finally:
                    if old is not None:
                        os.close(old)
                os.lseek(src, 0, os.SEEK_SET)
                # An existing file keeps its mode (and, as root, its owner); a new one gets
                # what the user's umask makes of 0666, as any file the user's own tools
                # create: never the mode bits the server chose (world-writable, set-id,
                # executable). The copy is bounded: a kept instance may grow it meanwhile.
                replace_at(
                    dir_fd,
                    name,
                    lambda out: copy_fd(src, out, MAX_STAGED_BYTES),
                    mode=None if was is None else stat.S_IMODE(was.st_mode) & 0o777,
                    owner=(was.st_uid, was.st_gid) if was and os.geteuid() == 0 else None,
                )
            return "written"
        finally:
            os.close(src)
