"""Which directories ``wrap`` may give a wrapped server's sandbox from its entry's own
arguments, decided without asking (wrap writes at once).

A project's entry is the project's to shape, and a project may be hostile: a path it names
becomes a mount only when its real path lies inside the project (a ``./keys`` link to
``~/.ssh``, ``~/.config`` or ``/run`` named outright, ``..``: none is mounted). For every
entry, the user's own included, some places are never mounted: the home and any directory
holding it, ``~/.ssh`` (and anything in it) and any directory holding a ``.ssh``, ``~/.config``
and ``~/.local`` and what holds them, ironcurtain's own configuration and state (and
anything in them), the directories where sessions keep their sockets, the kernel's and the
runtime's trees (``/proc``, ``/sys``, ``/dev``, ``/run``), and ``/etc`` writable. A writable
mount is judged whole as ``run`` judges every writable root
(:func:`sandbox_profiles.writable_roots.root_problem`): never a home or what holds one, a
catalogue entry (``.git/hooks``, ``.vscode``, ``.claude``), a git directory or a virtualenv,
nor anything inside them. The list of
directories a server is never shown is the planner's
(:func:`launcher.plan.server_plan.never_shown`); this adds what holds by identity, so a
bind mount of the home at another path is still the home.
"""

from __future__ import annotations

import os
from pathlib import Path

from launcher.clients.files.path_identity import holds_home, identity, within
from launcher.shared import dirs
from sandbox_profiles.discover import hidden_reason
from sandbox_profiles.ways import is_under
from sandbox_profiles.writable_roots import root_problem

# Said of a directory no writable root may be, by wrap or by hand.
NEVER_WRITABLE = "never writable by a server, not even granted by hand"


def refusal(mount: str, writable: bool, home: Path) -> str | None:
    """Why ``mount`` (a directory, absolute) must not be given to a wrapped server, as
    "MOUNT is ..." wording; None when it may."""
    from launcher.plan.server_plan import RUNTIME_TREES, never_shown  # the planner's own lists
    from launcher.plan.workspace import homes, moved_places

    if holds_home(mount, home):
        return "is or holds your home directory"
    if writable:  # a writable root judged whole, as run judges it
        places = moved_places()
        judged = root_problem(mount, {str(home): "your home directory", **homes(mount)}, places)
        if judged is not None:
            return f"{judged}, {NEVER_WRITABLE}"
    hidden = never_shown()
    reason = hidden_reason(mount, hidden)
    if reason is not None:
        return reason[3:] if reason.startswith("it ") else f"is {reason}"
    for place, label in hidden.items():
        if identity(place) is not None and within(place, mount):
            return f"holds {label} ({place})"
    own = {str(dirs.config_dir()): "ironcurtain's configuration",
           str(dirs.state_dir()): "ironcurtain's state (its records, backups, tokens)",
           str(home / ".ssh"): "your SSH directory"}  # fmt: skip
    for place, label in own.items():
        if within(mount, place) or is_under(os.path.realpath(mount), os.path.realpath(place)):
            return f"is in {label} ({place})"
    if ".ssh" in Path(os.path.realpath(mount)).parts:
        return "is in an SSH directory"
    real = os.path.realpath(mount)
    for tree in (*RUNTIME_TREES, "/var/run"):
        if within(mount, tree) or is_under(real, tree):
            return f"is in {tree} (the system's sockets, devices or processes)"
    if writable and (within(mount, "/etc") or is_under(real, "/etc")):
        return "is in /etc (the system's settings: never writable)"
    return None
