"""What the guard reports: a path it moved out of a writable root, something it could not
neutralise, and a root it cannot watch at all."""

from __future__ import annotations

from sandbox_profiles.records import frozen


class GuardError(Exception):
    """The guard cannot watch a writable root (inotify missing or out of watches)."""


@frozen
class Quarantined:
    """A file the guard moved out of a writable root: where it was, where it is, why."""

    path: str  # where it appeared
    moved_to: str  # where it is now
    why: str


@frozen
class GuardFailure:
    """Something in a writable root the guard could not neutralise."""

    root: str  # the writable root it happened in
    path: str
    reason: str
