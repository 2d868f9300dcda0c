"""The guard's end-of-session sweep: every writable root checked once more against the
catalogue and the guard's own places, without relying on events, once the servers writing
there have stopped (what a settle that fell behind could not check is caught here)."""

from __future__ import annotations

import functools
import os
import stat
from typing import Protocol

from launcher.guard.places import Places
from launcher.host import nofollow
from launcher.host.nofollow import Parts
from launcher.host.oscalls import explain, open_up_path
from sandbox_profiles import autorun


class Unhandled(Exception):
    """Something at ``path`` in a writable root could not be checked or moved: ``reason``."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(reason)
        self.path = path
        self.reason = reason


class Keeper(Protocol):
    """What the sweep asks of the guard."""

    @property
    def places(self) -> Places: ...

    def check(self, root: str, parts: Parts, is_dir: bool, sibling: autorun.Exists) -> bool: ...

    def is_preexisting(self, root: str, parts: Parts, same_inode: bool = False) -> bool: ...

    def quarantine(self, root: str, parts: Parts, why: str) -> None: ...

    def git_made(self, root: str, parts: Parts, entry: autorun.Entry) -> bool: ...

    def fail(self, root: str, path: str, reason: str) -> None: ...


def sweep_root(keeper: Keeper, root: str) -> None:
    """Quarantine what in ``root`` must not be there and was not there at start; what
    cannot be read, checked or moved is a failure of that root."""

    def unreadable(path: str, exc: OSError) -> None:
        keeper.fail(root, path, f"the sweep cannot read it: {explain(exc)}")

    for path, entry in autorun.find(root, on_error=unreadable, open_up=open_up_path):
        parts = tuple(os.path.relpath(path, root).split("/"))
        try:
            if keeper.is_preexisting(root, parts) or keeper.git_made(root, parts, entry):
                continue
            keeper.quarantine(root, parts, f"{entry.match}: {entry.loaded_by} (sweep)")
        except Unhandled as exc:
            keeper.fail(root, exc.path, exc.reason)
    # The places the catalogue does not name, outermost first.
    for path in keeper.places.in_root(root):
        parts = tuple(os.path.relpath(path, root).split("/"))
        try:
            _sweep_place(keeper, root, parts)
        except Unhandled as exc:
            keeper.fail(root, exc.path, exc.reason)
        except OSError as exc:
            keeper.fail(root, path, f"the sweep cannot check it: {explain(exc)}")


def _sweep_place(keeper: Keeper, root: str, parts: Parts) -> None:
    try:
        with nofollow.dir_path(root, parts[:-1]) as directory:
            st = os.lstat(os.path.join(directory, parts[-1]))
    except OSError as exc:
        # Not there, a place on the way is not a directory, or is a symlink: each such
        # place is checked itself.
        if nofollow.gone(exc):
            return
        raise
    sibling = functools.partial(nofollow.lexists, root, parts[:-1])
    keeper.check(root, parts, stat.S_ISDIR(st.st_mode), sibling)
