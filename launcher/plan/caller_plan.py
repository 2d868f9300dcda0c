"""One caller's plan in a session whose plan is for every caller (over HTTP with callers,
the workspace or a server's config naming ``${caller}``): the session planned again with
``${caller}`` standing for the caller's name made safe for a path, so its workspace, its
servers' sandboxes and working directories, and what the policy takes for the workspace
are all the caller's own. What does not depend on the caller (the policy files, the
sandbox and seccomp checks, the session's directories and audit log) is the session's."""

from __future__ import annotations

from dataclasses import replace

from launcher.host.machine import sandbox_identity
from launcher.plan.config import CALLER
from launcher.plan.session_plan import SessionPlan, plan_from
from launcher.plan.workspace import check_workspace, leads_elsewhere, workspace_for
from launcher.shared.caller_identity import Caller
from launcher.shared.user_errors import ConfigError
from policy.loader import json_path


def plan_for_caller(base: SessionPlan, caller: Caller) -> SessionPlan:
    """``caller``'s plan of the session planned as ``base`` (a plan for every caller);
    refused as the session's start would be (:class:`OptionError`, :class:`ConfigError`)
    when its workspace cannot be used."""
    opts = base.options
    assert opts is not None and base.per_caller
    workspace = workspace_for(opts.workspace, base.session_id, caller.path_name)
    check_workspace(workspace, opts.workspace)
    run_as = sandbox_identity(workspace) if base.run_as is not None else None
    plan = plan_from(opts, base.session_id, workspace, run_as, None, (caller, base.gateway), base)
    for where, template, _, _ in own_dirs(base, plan):
        if leads_elsewhere(template, caller.path_name):
            raise ConfigError(
                str(plan.config.path),
                where,
                f"{template.replace(CALLER, caller.path_name)} leads elsewhere through a "
                "symbolic link; a caller's directory must be where ${caller} puts it",
            )
    return replace(plan, caller=None)  # a plan's caller is a session's one caller (stdio)


def own_dirs(base: SessionPlan, plan: SessionPlan) -> list[tuple[str, str, str, bool]]:
    """The ``allowRead`` and ``allowWrite`` directories of ``plan`` (one caller's) that name
    ``${caller}`` in ``base``: each one's JSON path, as ``base`` has it, as ``plan`` has it,
    and whether it is writable."""
    found = []
    for name, sp in plan.servers.items():
        ours, every = sp.config.sandbox, base.servers[name].config.sandbox
        if ours is False or every is False:
            continue
        for field, alias in (("allow_read", "allowRead"), ("allow_write", "allowWrite")):
            pairs = zip(
                getattr(every.filesystem, field), getattr(ours.filesystem, field), strict=True
            )
            for i, (template, path) in enumerate(pairs):
                if CALLER in template:
                    loc = (plan.config.key, name, "sandbox", "filesystem", alias, i)
                    found.append((json_path(loc), template, path, field == "allow_write"))
    return found
