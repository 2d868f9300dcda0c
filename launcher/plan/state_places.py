"""ironcurtain's state directory (audit logs, tool pins, quarantined files, wrap's records
and backups, the --http token, caches, the default workspaces) and the sandboxes: whatever
is there but the workspaces stays read-only inside every writable root, whether it is there
yet or not."""

from __future__ import annotations

import os
from collections.abc import Mapping

from launcher.plan.config_schema import ServerConfig
from sandbox_profiles.ways import is_under

# What ironcurtain keeps in its state directory besides the workspaces (audit logs, tool
# pins, quarantined files, wrap's records and backups, the --http token, caches), whether
# there yet or not.
STATE_DIRS = ("audit", "pins", "quarantine", "wrap", "cache")
STATE_PARTS = (*STATE_DIRS, "http-token")


def state_protected(state: str, workspace: str) -> list[str]:
    """What of ironcurtain's state directory ``state`` stays read-only inside any writable
    root: all of it, or, when ``workspace`` is one of its workspaces, all but those.

    >>> state_protected("/s", "/ws")
    ['/s']
    """
    if not is_under(workspace, state):
        return [state]
    try:
        present = set(os.listdir(state))
    except OSError:
        present = set()
    return [
        os.path.join(state, name) for name in sorted((present | set(STATE_PARTS)) - {"workspaces"})
    ]


def writable_holds(path: str, workspace: str, servers: Mapping[str, ServerConfig]) -> bool:
    """Whether the workspace or a server's ``allowWrite`` holds ``path``."""
    roots = [workspace] + [
        os.path.realpath(os.path.expanduser(p))
        for server in servers.values()
        if server.sandbox
        for p in server.sandbox.filesystem.allow_write
    ]
    return any(is_under(path, root) for root in roots)


def uncovered(protected: list[str]) -> list[str]:
    """``protected`` less what lies in a directory of it that is there (mounted read-only
    whole). What ironcurtain writes during the session (its audit log) is then kept by that
    mount alone: kept by the guard, as a path that must not appear, it would be moved away
    the moment ironcurtain made it.

    >>> uncovered(["/etc", "/etc/nonexistent.conf", "/nonexistent-x", "/nonexistent-x/y"])
    ['/etc', '/nonexistent-x', '/nonexistent-x/y']
    """
    there = [p for p in protected if os.path.isdir(p)]
    return (
        [p for p in protected if not any(p != d and is_under(p, d) for d in there)]
        if there
        else protected
    )
