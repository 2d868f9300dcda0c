"""Where a session's servers work: the workspace given, or one of ironcurtain's own, and
the places it must never be. A workspace given as ``/srv/work/${caller}`` is each caller's
own: ``${caller}`` stands for the caller's name made safe for a path
(:func:`launcher.shared.callers.path_name`)."""

from __future__ import annotations

import os

from launcher.plan.config import CALLER
from launcher.shared import dirs, rundir
from launcher.shared.errors import OptionError
from policy.paths import resolve_real_path
from sandbox_profiles.ways import is_under

NEEDS_CALLER = (
    "names ${caller}, the caller's name, and this session has no caller: give "
    "{caller_file}, or {oidc_issuer} and {oidc_audience} with {http_port}"
)
_CALLER_OPTIONS = ("caller_file", "oidc_issuer", "oidc_audience", "http_port")


def workspace_for(given: str | None, session_id: str, caller: str | None) -> str:
    """The real path of the session's workspace: ``given`` (``${caller}`` in it replaced by
    ``caller``: a caller's name made safe for a path, or :data:`CALLER` itself in a plan
    for every caller), else a new one in ironcurtain's state directory.

    >>> workspace_for("/srv/work/${caller}/files", "s", "billing-agent")
    '/srv/work/billing-agent/files'
    """
    if not given:
        return resolve_real_path(str(dirs.state_dir() / "workspaces" / session_id))
    expanded = given
    if CALLER in given:
        if caller is None:
            raise OptionError("workspace", given, NEEDS_CALLER, mentions=_CALLER_OPTIONS)
        expanded = given.replace(CALLER, caller)
    workspace = resolve_real_path(os.path.expanduser(expanded))
    if caller not in (None, CALLER) and CALLER in given and leads_elsewhere(given, caller):
        raise OptionError(
            "workspace",
            expanded,
            "leads elsewhere through a symbolic link; a caller's workspace must be a "
            "directory where ${caller} puts it",
        )
    if os.path.exists(workspace) and not os.path.isdir(workspace):
        raise OptionError("workspace", expanded, "exists and is not a directory")
    return workspace


def leads_elsewhere(template: str, caller: str) -> bool:
    """Whether ``template`` with ``${caller}`` put in is not where the name puts it: a
    symbolic link on the way (to another caller's directory, or out of the directory that
    holds them all).

    >>> leads_elsewhere("/nonexistent/${caller}/files", "bob")
    False
    """
    real = resolve_real_path(os.path.expanduser(template.replace(CALLER, caller)))
    where = resolve_real_path(os.path.expanduser(template)).replace(CALLER, caller)
    return real != os.path.normpath(where)


def check_workspace(workspace: str, given: str | None) -> None:
    """A workspace in ironcurtain's state directory is one of its workspaces, or nothing:
    a server may write its whole workspace, and the rest of that directory (audit logs,
    tool pins, the validated config and policy read at the next start) must stay out of
    its reach."""
    state = resolve_real_path(str(dirs.state_dir()))
    workspaces = os.path.join(state, "workspaces")
    if is_under(workspace, state) and not (
        is_under(workspace, workspaces) and workspace != workspaces
    ):
        raise OptionError(
            "workspace",
            given,
            f"is in ironcurtain's state directory {state}, whose audit logs, tool pins and "
            "validated files a server working there could rewrite; use a directory outside "
            f"it (or one of {workspaces}/*)",
        )
    for base in rundir.bases():
        if is_under(os.path.realpath(base), workspace):
            raise OptionError(
                "workspace",
                given,
                f"holds {base}, where every ironcurtain session keeps its sockets "
                "(approvals, egress proxies), which a server working there could connect "
                "to; use a directory inside it",
            )
