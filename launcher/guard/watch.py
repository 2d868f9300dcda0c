"""Keeping what host tools load or run out of the writable roots during a session.

What is there when a server starts is mounted read-only in its sandbox. A sandboxed server
can still *create* such a file or directory, at any depth, where none existed (the
catalogue in ``sandbox_profiles.autorun`` says which). The guard watches every directory of
every writable root with inotify and moves such a path out into the session's quarantine
directory, and the session settles the guard before it returns each call's result, so the
call that made it returns only after it is gone.

It fails closed: whatever it cannot watch, list or move (any error, any depth or name
length, any permission bits, no descriptors left) is reported through ``on_failure``, and
the session stops every server that can write to that root. Directories a server made
unreadable or read-only get their owner's permissions back so they can be moved (the
launcher runs as their owner, or as root).

Moving is done through directory descriptors opened without following symlinks, one
component at a time, so a server that swaps a directory for a symlink cannot make the
trusted process move anything outside the root, and no path is ever too long to handle
(``launcher.host.nofollow``).
"""

from __future__ import annotations

import errno
import functools
import os
import time
from collections.abc import Callable, Iterable, Sequence

from launcher.guard.gitmade import GitMade
from launcher.guard.places import Places, inside, outermost
from launcher.guard.quarantine import QuarantineDir, QuarantineError
from launcher.guard.reports import GuardError as GuardError
from launcher.guard.reports import GuardFailure as GuardFailure
from launcher.guard.reports import Quarantined as Quarantined
from launcher.guard.sweep import Unhandled, sweep_root
from launcher.host import nofollow
from launcher.host.nofollow import Parts
from launcher.host.oscalls import (
    IN_ATTRIB,
    IN_CREATE,
    IN_DELETE,
    IN_DELETE_SELF,
    IN_DONT_FOLLOW,
    IN_IGNORED,
    IN_ISDIR,
    IN_MODIFY,
    IN_MOVE_SELF,
    IN_MOVED_TO,
    IN_ONLYDIR,
    IN_Q_OVERFLOW,
    explain,
    inotify_add_watch,
    inotify_events,
    inotify_init,
)
from sandbox_profiles import autorun

_MASK = IN_CREATE | IN_MOVED_TO | IN_MOVE_SELF | IN_DELETE_SELF
# Where a configuration git made is admitted by content: a change in place wakes the guard.
_CHANGES = IN_MODIFY | IN_ATTRIB | IN_DELETE
# Deeper trees than this below a root are not followed: the server that made one is stopped.
MAX_DEPTH = 400
# Seconds one settle may spend scanning: a server that changes the tree faster than it can be
# checked (a rename storm over a big tree) is stopped instead of keeping the guard behind.
BUDGET = 2.0


class Guard:
    """One inotify instance over all writable roots of a session."""

    def __init__(
        self,
        roots: Sequence[str],
        guarded: Iterable[str],
        quarantine_dir: str,
        on_quarantine: Callable[[Quarantined], None],
        on_failure: Callable[[GuardFailure], None] | None = None,
        anchored: Iterable[str] = (),
    ) -> None:
        self.roots = [r.rstrip("/") or "/" for r in roots]
        self.places = Places(self.roots, guarded, anchored)
        self.on_quarantine = on_quarantine
        self.on_failure = on_failure
        self.quarantined: list[Quarantined] = []
        self.failures: list[GuardFailure] = []
        # The user's own, present at start (by identity, so a replacement is not): left alone.
        self.preexisting: dict[str, tuple[int, int, int]] = {}
        try:
            self.fd = inotify_init()
        except OSError as exc:
            raise GuardError(f"inotify is not available: {exc.strerror}") from None
        self._watched: dict[int, tuple[str, Parts]] = {}
        self._store = QuarantineDir(quarantine_dir)
        self._started = False
        self.budget = BUDGET
        self._deadline = float("inf")
        self._behind: set[str] = set()  # roots whose events this settle could not keep up with
        # Paths the trusted process is writing for a call a human approved, with what was
        # there when it began: left alone until it is done, then what it wrote is taken as
        # the user's (:meth:`expect`, :meth:`accept`).
        self._expected: dict[str, tuple[int, int, int] | None] = {}
        # What git lays down in a repository it makes: admitted by content.
        self.made = GitMade(self.quarantine, self.fail)

    # -- watching --------------------------------------------------------------------------

    def start(self) -> None:
        """Watch every directory below every root. What is there already is the user's:
        existing entries are mounted read-only instead, and left alone here."""
        for root in self.roots:
            self._take(root)
        self._started = True

    def add_roots(
        self, roots: Iterable[str], guarded: Iterable[str], anchored: Iterable[str]
    ) -> list[str]:
        """Watch ``roots`` too from now on (a caller's workspace, made when it first calls),
        with the places their servers protect; what is in them now is taken as :meth:`start`
        takes what is there at start. Returns the roots that were not watched yet; a
        :class:`GuardError` when one of them cannot be watched (none of them is then)."""
        new = [r for r in dict.fromkeys(r.rstrip("/") or "/" for r in roots) if r not in self.roots]
        before = self.places
        self.roots += new
        self.places = Places(self.roots, [*before.guarded, *guarded], [*before.anchored, *anchored])
        self._started = False
        try:
            for root in new:
                self._take(root)
        except GuardError:
            self.roots = [r for r in self.roots if r not in new]
            self._watched = {wd: w for wd, w in self._watched.items() if w[0] not in new}
            self.places = before
            raise
        finally:
            self._started = True
        return new

    def _take(self, root: str) -> None:
        """Watch ``root`` and what is below it, as the user's own."""
        try:
            self._scan(root, ())
        except Unhandled as exc:
            raise GuardError(f"{exc.path}: {exc.reason}") from None
        # The places the scan does not reach (inside what it leaves alone, or past a
        # symlink, which is not followed) are known by identity too.
        for path in self.places.known_by_identity(root):
            if path not in self.preexisting:
                parts = tuple(path[len(root.rstrip("/")) + 1 :].split("/"))
                try:
                    identity = nofollow.identity(root, parts)
                except OSError:
                    continue
                if identity is not None:
                    self.preexisting[path] = identity

    def _add_watch(self, root: str, parts: Parts) -> bool:
        """Watch ``root/parts``; False when it is gone or is not a directory any more."""
        wd, err = self._watch(root, parts)
        if err == errno.EACCES:  # its owner made it unreadable: the launcher is its owner
            nofollow.open_up_at(root, parts)
            wd, err = self._watch(root, parts)
        if wd < 0:
            if err in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                return False  # gone again, or replaced by a symlink (not followed)
            where = os.path.join(root, *parts)
            if err == errno.ENOSPC:
                raise Unhandled(
                    where,
                    "out of inotify watches; raise the limit with "
                    "sudo sysctl -w fs.inotify.max_user_watches=1048576",
                )
            raise Unhandled(where, f"cannot watch it: {os.strerror(err)}")
        self._watched[wd] = (root, parts)
        return True

    def _watch(self, root: str, parts: Parts) -> tuple[int, int]:
        with nofollow.dir_path(root, parts) as path:
            follow = path.startswith("/proc/self/fd/")
            flags = _MASK | IN_ONLYDIR | (0 if follow else IN_DONT_FOLLOW)
            if os.path.join(root, *parts) in self.made.holders:
                flags |= _CHANGES
            return inotify_add_watch(self.fd, path, flags)

    def _list(self, root: str, parts: Parts) -> list[tuple[str, bool]] | None:
        try:
            return nofollow.entries(root, parts)
        except nofollow.Unreadable as exc:
            raise Unhandled(os.path.join(root, *parts), str(exc)) from None

    def _scan(self, root: str, top: Parts) -> None:
        """Check ``root/top`` and everything below it; watch each directory first, then
        list it, so nothing created in between is missed."""
        stack = [top]
        while stack:
            parts = stack.pop()
            if time.monotonic() > self._deadline:
                self._behind.add(root)
                raise Unhandled(
                    root,
                    f"the guard fell behind: the tree changed faster than it could be checked "
                    f"within {self.budget:g} s",
                )
            if len(parts) > MAX_DEPTH:
                raise Unhandled(
                    os.path.join(root, *parts),
                    f"a directory tree deeper than {MAX_DEPTH} levels",
                )
            if not self._add_watch(root, parts):
                continue
            entries = self._list(root, parts)
            if entries is None:
                continue
            names = {name for name, _ in entries}
            for name, is_dir in entries:
                child = (*parts, name)
                if self.check(root, child, is_dir, names.__contains__):
                    continue
                if is_dir:
                    stack.append(child)
            if names & _MARKERS:
                self._check_git_dir(root, parts, names.__contains__)

    def check(self, root: str, parts: Parts, is_dir: bool, sibling: autorun.Exists) -> bool:
        """Quarantine ``root/parts`` if it must not exist. True when it is a catalogue entry
        or a guarded path: moved away, or (before start, or the user's own) left alone and
        not to be descended into."""
        entry = autorun.match(parts, is_dir, sibling)
        if entry is None and is_dir and nofollow.lexists(root, parts, "pyvenv.cfg"):
            entry = autorun.VENV_ENTRY  # as the sweep and the read-only mounts see it
        path = os.path.join(root, *parts)
        if entry is None and self.made.in_hooks(path):
            return self.made.check_hook(root, parts, whole=False)
        # final: not descended into (left alone as the user's, or moved away)
        kept = (
            (f"{entry.match}: {entry.loaded_by}", True) if entry else self.places.why(path, is_dir)
        )
        if kept is None:
            return False
        why, final = kept
        if path in self._expected:
            return final  # the trusted process is writing it for an approved call
        if not self._started:
            identity = nofollow.identity(root, parts)
            if identity is not None:
                self.preexisting[path] = identity
                if entry is not None and self.made.note_start(root, parts, entry):
                    self._add_watch(root, parts[:-1])  # its changes in place seen too
        elif not self.is_preexisting(root, parts, same_inode=not final and is_dir):
            if entry is not None and self._git_made(root, parts, entry, is_dir):
                # git's own: a hooks directory is descended into, and watched (unless what
                # was in it moved it out)
                return path not in self.made.hooks_dirs
            self.quarantine(root, parts, why)
            return True
        return final

    def _git_made(self, root: str, parts: Parts, entry: autorun.Entry, is_dir: bool) -> bool:
        """Whether ``root/parts`` is what git lays down in a repository it makes (see
        ``launcher.guard.gitmade``); a configuration admitted makes its directory's watch
        see changes in place."""
        if not self.made.admit(root, parts, entry, is_dir):
            return False
        if os.path.dirname(os.path.join(root, *parts)) in self.made.holders:
            self._add_watch(root, parts[:-1])
        return True

    def git_made(self, root: str, parts: Parts, entry: autorun.Entry) -> bool:
        """For the sweep: whether ``root/parts`` is, strictly, what git lays down (a hooks
        directory's entries that are not are moved out). Only for a session's guard."""
        if not self._started:
            return False
        try:
            with nofollow.dir_path(root, parts[:-1]) as directory:
                is_dir = os.path.isdir(os.path.join(directory, parts[-1])) and not os.path.islink(
                    os.path.join(directory, parts[-1])
                )
        except OSError:
            return False
        return self.made.admit(root, parts, entry, is_dir, whole=True)

    def expect(self, paths: Iterable[str]) -> None:
        """The trusted process is about to write ``paths`` (an approved call's change, carried
        over from its one-shot instance): they are left alone until :meth:`accept`."""
        for path in map(os.path.normpath, paths):
            located = self._located(path)
            self._expected[path] = located and _identity(*located)

    def accept(self, paths: Iterable[str], wrote: bool = True) -> None:
        """What the trusted process wrote at ``paths`` is the user's from now on (as what was
        there at start: a replacement of it is not); no longer expected. Only what it wrote:
        what is there as it was when it began (it wrote nothing: a sandbox's file made before
        it), what is not a regular file (a symlink, a directory: the carry-over writes files),
        and everything when ``wrote`` is false (the carry-over failed: what changed meanwhile
        is a sandbox's) is checked as any other path, and moved out unless the user's from the
        start."""
        for path in map(os.path.normpath, paths):
            before = self._expected.pop(path, None)
            located = self._located(path)
            if located is None:
                continue
            identity = _identity(*located)
            if identity is None:
                self.preexisting.pop(path, None)
            elif wrote and identity != before and nofollow.is_regular(*located):
                self.preexisting[path] = identity
            elif not self.is_preexisting(*located):
                self.preexisting.pop(path, None)
                self.quarantine(
                    *located, "an agent instruction file the approved call did not write"
                )

    def _located(self, path: str) -> tuple[str, Parts] | None:
        """(root, parts) of ``path`` in a root, or None."""
        root = next((r for r in self.roots if inside(path, r)), None)
        if root is None:
            return None
        return root, tuple(path[len(root.rstrip("/")) + 1 :].split("/"))

    def is_preexisting(self, root: str, parts: Parts, same_inode: bool = False) -> bool:
        """Whether ``root/parts`` is what was there at start. A directory kept by identity
        (on the way to a protected path) is compared by inode alone: its change time moves
        with every entry made in it."""
        known = self.preexisting.get(os.path.join(root, *parts))
        now = nofollow.identity(root, parts)
        if known is None or now is None:
            return False
        return known[:2] == now[:2] if same_inode else known == now

    def _check_git_dir(self, root: str, parts: Parts, has: autorun.Exists) -> None:
        """A directory that has just become one git takes for a repository: what in it git
        would read or run goes, unless it was the user's before the session."""
        if not self._started or not autorun.is_git_dir(has):
            return
        entry = autorun.GIT_DIR_ENTRY
        for member in autorun.GIT_DIR_MEMBERS:
            if not has(member) or self.is_preexisting(root, (*parts, member)):
                continue
            at = (*parts, member)
            path = os.path.join(root, *at)
            is_dir = member == "hooks" and nofollow.entries(root, at) is not None
            known = self.made.hooks_dirs.get(path)
            if known is not None and known == _identity(root, at):
                continue  # admitted already, and watched
            if self._git_made(root, at, entry, is_dir):
                if path in self.made.hooks_dirs:
                    self._scan(root, at)
                continue
            self.quarantine(root, at, f"{member}: {entry.loaded_by}")

    # -- events ----------------------------------------------------------------------------

    def settle(self) -> None:
        """Handle every event queued so far. Events are queued by the system call that
        caused them, so after a server has answered a call, all it did is here. It spends at
        most ``budget`` seconds scanning: a root it cannot keep up with is reported as a
        failure (once), the rest of its events are drained, and :meth:`sweep` is then the way
        to catch up, once the servers writing there are stopped."""
        self._deadline = time.monotonic() + self.budget
        self._behind = set()
        try:
            self._drain()
            self.made.recheck()
        except Exception as exc:  # a fault of the guard itself is never taken as handled
            self._fail_all(f"the guard failed: {exc!r}")
        finally:
            self._deadline = float("inf")

    def _drain(self) -> None:
        """Handle the events queued so far, within the settle's budget."""
        while True:
            if time.monotonic() > self._deadline:
                # Events keep coming faster than they are handled: stop the writers.
                for root in self.roots:
                    if root not in self._behind:
                        self._behind.add(root)
                        self.fail(root, root, "the guard fell behind: events kept coming")
                return
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return
            except OSError as exc:
                for root in self.roots:
                    self.fail(root, root, f"cannot read its inotify events: {explain(exc)}")
                return
            self._handle(data)

    def _fail_all(self, reason: str) -> None:
        for root in self.roots:
            self.fail(root, root, reason)

    @property
    def fell_behind(self) -> bool:
        """Whether the last settle left roots unchecked (a sweep catches up)."""
        return bool(self._behind)

    def _handle(self, data: bytes) -> None:
        rescan: list[tuple[str, Parts]] = []
        touched: dict[tuple[str, Parts], None] = {}
        for wd, mask, name in inotify_events(data):
            if mask & IN_Q_OVERFLOW:
                rescan = [(root, ()) for root in self.roots]
                continue
            if mask & IN_IGNORED:
                self._watched.pop(wd, None)
                continue
            where = self._watched.get(wd)
            if where is None or not name:
                continue
            root, parent = where
            if not mask & (IN_CREATE | IN_MOVED_TO):
                continue
            if mask & IN_ISDIR:
                rescan.append((root, (*parent, name)))
            else:
                self._guarded_call(root, (*parent, name), self._check_new)
            if name.lower() in _MARKERS:
                touched[(root, parent)] = None
        for root, parts in outermost(rescan):
            self._guarded_call(root, parts, self._check_new_dir)
        for root, parts in touched:
            self._guarded_call(root, parts, self._recheck_git_dir)

    def _guarded_call(self, root: str, parts: Parts, work: Callable[[str, Parts], None]) -> None:
        if root in self._behind:
            return  # reported once; the sweep after the writers stop catches up
        try:
            work(root, parts)
        except Unhandled as exc:
            self.fail(root, exc.path, exc.reason)
        except OSError as exc:  # anything unforeseen: never taken as handled
            self.fail(root, os.path.join(root, *parts), explain(exc))

    def _check_new(self, root: str, parts: Parts) -> None:
        self.check(root, parts, False, functools.partial(nofollow.lexists, root, parts[:-1]))

    def _check_new_dir(self, root: str, parts: Parts) -> None:
        if parts and self.check(
            root, parts, True, functools.partial(nofollow.lexists, root, parts[:-1])
        ):
            return
        self._scan(root, parts)

    def _recheck_git_dir(self, root: str, parts: Parts) -> None:
        entries = self._list(root, parts)
        if entries is not None:
            self._check_git_dir(root, parts, {name for name, _ in entries}.__contains__)

    def fail(self, root: str, path: str, reason: str) -> None:
        failure = GuardFailure(root, path, reason)
        self.failures.append(failure)
        if self.on_failure is not None:
            self.on_failure(failure)

    # -- the end-of-session sweep ----------------------------------------------------------

    def sweep(self) -> list[Quarantined]:
        """Check every root against the catalogue once more, without relying on events, and
        quarantine what appeared during the session and is still there."""
        before = len(self.quarantined)
        try:
            for root in self.roots:
                sweep_root(self, root)
            self.made.recheck(whole=True)
        except Exception as exc:  # as in settle: said, never taken as handled
            self._fail_all(f"the sweep failed: {exc!r}")
        return self.quarantined[before:]

    # -- quarantine ------------------------------------------------------------------------

    def quarantine(self, root: str, parts: Parts, why: str) -> None:
        """Move ``root/parts`` into the quarantine directory without following symlinks on
        the way. Nothing to do when it is not there (any more) as a real path inside
        ``root``; ``Unhandled`` when it is there and cannot be moved."""
        if not parts:
            return
        try:
            moved_to = self._store.move_from(root, parts, why)
        except QuarantineError as exc:
            raise Unhandled(os.path.join(root, *parts), str(exc)) from None
        if moved_to is None:
            return
        record = Quarantined(os.path.join(root, *parts), moved_to, why)
        self.quarantined.append(record)
        self.on_quarantine(record)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


_MARKERS = autorun.GIT_DIR_MARKERS | {"HEAD"}


def _identity(root: str, parts: Parts) -> tuple[int, int, int] | None:
    try:
        return nofollow.identity(root, parts)
    except OSError:
        return None  # not there as a real path: nothing of it is the user's
