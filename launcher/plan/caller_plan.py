"""One caller's plan in a session whose plan is for every caller (over HTTP with callers,
the workspace or a server's config naming ``${caller}``): the session planned again with
``${caller}`` standing for the caller's name made safe for a path, so its workspace, its
servers' sandboxes and working directories, and what the policy takes for the workspace
are all the caller's own. What does not depend on the caller (the policy files, the
sandbox and seccomp checks, the session's directories and audit log) is the session's."""

from __future__ import annotations

from launcher.host.machine import sandbox_identity
from launcher.plan.session_plan import SessionPlan, plan_from
from launcher.plan.workspace import check_workspace, workspace_for
from launcher.shared.callers import Caller


def plan_for_caller(base: SessionPlan, caller: Caller) -> SessionPlan:
    """``caller``'s plan of the session planned as ``base`` (a plan for every caller);
    refused as the session's start would be (:class:`OptionError`, :class:`ConfigError`)
    when its workspace cannot be used."""
    opts = base.options
    assert opts is not None and base.per_caller
    workspace = workspace_for(opts.workspace, base.session_id, caller.path_name)
    check_workspace(workspace, opts.workspace)
    run_as = sandbox_identity(workspace) if base.run_as is not None else None
    return plan_from(opts, base.session_id, workspace, run_as, None, (caller, base.gateway), base)
