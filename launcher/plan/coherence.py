"""The policy and the sandboxes, checked against each other.

Two layers decide every call: the policy's rules and the server's sandbox. Where they
disagree the user gets a rule that cannot work or a mount that serves nothing:

- a rule that **allows** a path role within a directory the server's sandbox cannot reach
  that way (every call it allows fails there, with an error the agent cannot act on);
- a rule that **escalates** a write within a directory the server sees read-only: an
  approval cannot widen a read-only mount (:mod:`launcher.relay.approving.grants`), so
  every approval of it fails;
- an ``allowWrite`` or ``allowRead`` directory of a server whose tools take paths, that no
  rule allows or escalates a path of that kind in: it widens the sandbox for nothing.

Reported with the rule or the mount and how to fix it; nothing here refuses to start. Rules
are taken one at a time (a rule earlier in the list that would shadow a later one is not
followed), so what is reported is certain, and some dead rules go unreported.
"""

from __future__ import annotations

from collections.abc import Iterable

from launcher.plan.server_plan import ServerPlan
from launcher.plan.session_plan import SessionPlan
from policy.compiled import Rule
from policy.engine import PolicyEngine
from policy.models import ToolAnnotation
from sandbox_profiles.records import frozen
from sandbox_profiles.ways import deepest_mount, is_under

WRITES = frozenset({"write-path", "delete-path"})
READS = frozenset({"read-path"})
_HOST_VIEWS = ("ro-bind", "ro-bind-try", "bind")


@frozen(slots=True)
class Mismatch:
    subject: str  # "rule 'NAME'" or "server 'S' allowWrite DIR"
    text: str  # what is wrong, and how to fix it

    def __str__(self) -> str:
        return f"{self.subject}: {self.text}"


def _overlap(a: str, b: str) -> bool:
    return is_under(a, b) or is_under(b, a)


def _matches(rule: Rule, server: str, tool: ToolAnnotation) -> frozenset[str]:
    """The path roles of ``tool`` through which ``rule`` can match a call of it (empty:
    the rule never applies to it, or not through a path)."""
    if rule.server is not None and server not in rule.server:
        return frozenset()
    if rule.tool is None and rule.prompt is not None:
        return frozenset()
    if rule.tool is not None and tool.tool_name not in rule.tool:
        return frozenset()
    if rule.effect is not None and tool.effect not in rule.effect:
        return frozenset()
    if rule.side_effects is not None and tool.side_effects != rule.side_effects:
        return frozenset()
    roles = frozenset(r for rs in tool.args.values() for r in rs) & (WRITES | READS)
    return roles & rule.path_roles if rule.path_roles is not None else roles


def _can_write(sp: ServerPlan, directory: str) -> bool:
    assert sp.profile is not None
    return any(_overlap(directory, root) for root in sp.profile.writable)


def _can_read(sp: ServerPlan, directory: str) -> bool:
    assert sp.profile is not None
    return any(_overlap(directory, m.dest) for m in sp.profile.mounts if m.kind in _HOST_VIEWS)


def check(plan: SessionPlan, engine: PolicyEngine | None = None) -> list[Mismatch]:
    """Every mismatch between ``engine``'s rules (the plan's by default) and the sandboxes
    of the plan's servers."""
    engine = engine or plan.engine
    found: dict[str, Mismatch] = {}
    for name, sp in plan.servers.items():
        if sp.profile is None:
            continue  # unsandboxed: the policy is the only guard
        tools = engine.tool_annotations(name)
        found.update((str(m), m) for m in _rules(name, sp, engine.rules, tools))
        found.update((str(m), m) for m in _mounts(name, sp, engine.rules, tools))
    return list(found.values())


def _rules(
    name: str, sp: ServerPlan, rules: Iterable[Rule], tools: list[ToolAnnotation]
) -> Iterable[Mismatch]:
    for rule in rules:
        if rule.path_roles is None or rule.then == "deny":
            continue
        roles = frozenset().union(*(_matches(rule, name, t) for t in tools))
        if not roles:
            continue
        where = rule.within
        if rule.then == "allow" and roles & WRITES and not _can_write(sp, where):
            yield Mismatch(
                f"rule '{rule.name}'",
                f"allows writes within {where}, but server '{name}' cannot write there "
                f"(every call it allows there fails). To fix: add {where} to "
                f"mcpServers.{name}.sandbox.filesystem.allowWrite, or make the rule "
                "escalate (an approved call is given exactly the paths it names)",
            )
        elif rule.then == "allow" and roles & READS and not _can_read(sp, where):
            yield Mismatch(
                f"rule '{rule.name}'",
                f"allows reads within {where}, but server '{name}' cannot see it (every call "
                f"it allows there fails). To fix: add {where} to "
                f"mcpServers.{name}.sandbox.filesystem.allowRead, or make the rule escalate",
            )
        elif rule.then == "escalate" and roles & WRITES:
            mount = deepest_mount(sp.profile, where) if sp.profile else None
            if mount is not None and mount.kind in ("ro-bind", "ro-bind-try"):
                yield Mismatch(
                    f"rule '{rule.name}'",
                    f"escalates writes within {where}, which server '{name}' sees read-only "
                    f"({mount.reason or mount.dest}); no approval can make part of a read-only "
                    f"mount writable, so every approval fails. To fix: give {where} with "
                    "allowWrite instead of allowRead, or deny those writes",
                )


def _mounts(
    name: str, sp: ServerPlan, rules: list[Rule], tools: list[ToolAnnotation]
) -> Iterable[Mismatch]:
    if sp.config.sandbox is False:
        return
    if not any(r for t in tools for rs in t.args.values() for r in rs if r in WRITES | READS):
        return  # its mounts serve the program, not its tools' arguments
    fs = sp.config.sandbox.filesystem
    for kind, directories, wanted in (
        ("allowWrite", fs.allow_write, WRITES),
        ("allowRead", fs.allow_read, READS),
    ):
        for directory in directories:
            used = any(
                rule.then != "deny"
                and _matches(rule, name, tool) & wanted
                and (rule.path_roles is None or _overlap(rule.within, directory))
                for rule in rules
                for tool in tools
            )
            if not used:
                yield Mismatch(
                    f"server '{name}' {kind} {directory}",
                    f"no rule allows or escalates a call of '{name}' with a path there, so the "
                    f"mount serves no call. To fix: remove it from "
                    f"mcpServers.{name}.sandbox.filesystem.{kind}, or add a rule for it",
                )
