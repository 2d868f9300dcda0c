"""The policy in the form the engine evaluates fast: annotations with what each call needs
precomputed (:class:`ToolInfo`), compiled rules with their conditions as sets and their
``within`` made canonical (:class:`Rule`), the argument checks every call makes first, and
a rule's conditions on paths and domains.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace

from policy.decision import Decision, DecisionKind
from policy.globs import star_pattern
from policy.models import Annotation, CompiledRule
from policy.paths import UnknownLocationError, canonical_path, iter_strings
from policy.roles import (
    ArgumentRole,
    GitLocations,
    RoleDefinition,
    get_path_roles,
    get_role_definition,
    get_url_roles,
    is_git_tool,
)
from policy.urls import domain_matches_allowlist
from policy.variables import PlaceholderError, expand
from sandbox_profiles.records import frozen

PATH_ROLES: frozenset[ArgumentRole] = frozenset(get_path_roles())
URL_ROLES: frozenset[ArgumentRole] = frozenset(get_url_roles())


@frozen(slots=True)
class ToolInfo:
    """An annotation (a tool's or a prompt's) with what each call needs precomputed."""

    annotation: Annotation
    path_args: tuple[tuple[str, frozenset[ArgumentRole]], ...]
    url_args: tuple[tuple[str, ArgumentRole, frozenset[ArgumentRole]], ...]
    path_roles_by_arg: Mapping[str, frozenset[ArgumentRole]]
    # Path arguments of a tool that runs git, with their roles' ``git_locations``.
    git_args: tuple[tuple[str, tuple[GitLocations, ...]], ...] = ()


def tool_info(ann: Annotation, server: str | None = None) -> ToolInfo:
    """An annotation with what each call needs precomputed. ``server`` is given for a
    tool, whose git use the role registry knows."""
    path_args = []
    url_args = []
    git_args = []
    runs_git = server is not None and is_git_tool(server, ann.name)
    for arg, roles in ann.args.items():
        role_set = frozenset(roles)
        if role_set & PATH_ROLES:
            path_args.append((arg, role_set))
            hooks = dict.fromkeys(
                hook
                for role in roles
                if (hook := get_role_definition(role).git_locations) is not None
            )
            if runs_git and hooks:
                git_args.append((arg, tuple(hooks)))
        for role in roles:
            if role in URL_ROLES:
                url_args.append((arg, role, role_set))
                break
    return ToolInfo(ann, tuple(path_args), tuple(url_args), dict(path_args), tuple(git_args))


@frozen(slots=True)
class Rule:
    """One compiled policy rule, its conditions ready to match (None: not constrained)."""

    name: str
    then: DecisionKind
    reason: str
    effect: frozenset[str] | None
    server: frozenset[str] | None
    tool: frozenset[str] | None
    prompt: frozenset[str] | None
    side_effects: bool | None
    path_roles: frozenset[ArgumentRole] | None
    within: str
    within_prefix: str  # ``within`` and a separator: a path below it starts with this
    domain_roles: frozenset[ArgumentRole] | None
    allowed: tuple[str, ...]
    caller: re.Pattern[str] | None = None  # the callers' names it applies to (its globs)
    # Other directories its ``within`` stands for, each with its prefix: for one server, its
    # ``within`` written with ``${workspace}`` put for each of that server's own workspaces.
    more_within: tuple[tuple[str, str], ...] = ()


def _opt_set(values: Iterable[str] | None) -> frozenset[str] | None:
    return None if values is None else frozenset(values)


def _prefix(within: str) -> str:
    return os.sep if within == os.sep else within.rstrip(os.sep) + os.sep


def compile_rule(rule: CompiledRule, variables: Mapping[str, str]) -> Rule:
    c = rule.condition
    within = _within(rule, variables)
    return Rule(
        name=rule.name,
        then=rule.then,
        reason=rule.reason,
        effect=_opt_set(c.effect),
        server=_opt_set(c.server),
        tool=_opt_set(c.tool),
        prompt=_opt_set(c.prompt),
        side_effects=c.side_effects,
        path_roles=frozenset(c.paths.roles) if c.paths else None,
        within=within,
        within_prefix=_prefix(within),
        domain_roles=frozenset(c.domains.roles) if c.domains else None,
        allowed=tuple(c.domains.allowed) if c.domains else (),
        caller=callers_pattern(c.caller) if c.caller is not None else None,
    )


def _within(rule: CompiledRule, variables: Mapping[str, str]) -> str:
    paths = rule.condition.paths
    try:
        return canonical_path(expand(paths.within, variables)) if paths else ""
    except PlaceholderError as exc:
        raise PlaceholderError(f"rule '{rule.name}', its 'within': {exc}") from None


def for_workspaces(
    rule: CompiledRule, compiled: Rule, variables: Mapping[str, str], workspaces: Iterable[str]
) -> Rule:
    """``compiled`` (``rule`` compiled with ``variables``) for a server with workspaces of
    its own: a ``within`` naming ``${workspace}`` stands for each of them too (a call's
    paths may each lie in any of them).

    >>> from policy.models import PathCondition, RuleCondition
    >>> c = RuleCondition(paths=PathCondition(roles=["read-path"], within="${workspace}/src"))
    >>> r = CompiledRule(name="r", condition=c, then="allow", reason="")
    >>> base = compile_rule(r, {"workspace": "/nonexistent/ws"})
    >>> for_workspaces(r, base, {"workspace": "/nonexistent/ws"}, ["/nonexistent/p"]).more_within
    (('/nonexistent/p/src', '/nonexistent/p/src/'),)
    """
    paths = rule.condition.paths
    if paths is None or "${workspace}" not in paths.within:
        return compiled
    more = dict.fromkeys(_within(rule, {**variables, "workspace": w}) for w in workspaces)
    more.pop(compiled.within, None)
    return replace(compiled, more_within=tuple((w, _prefix(w)) for w in more))


def callers_pattern(globs: Iterable[str]) -> re.Pattern[str]:
    """One pattern for a rule's ``caller`` globs (case-sensitive, as names are).

    Only ``*`` is special: a caller's name may hold ``?`` or ``[``, which stand for
    themselves.

    >>> p = callers_pattern(["billing-*", "ops", "svc[prod]"])
    >>> [bool(p.match(n)) for n in ("billing-agent", "ops", "ops2", "Billing-agent")]
    [True, True, False, False]
    >>> [bool(p.match(n)) for n in ("svc[prod]", "svcp")]
    [True, False]
    """
    return star_pattern(globs)


def names_match(rule: Rule, name: str, prompt: bool) -> bool:
    if rule.tool is None and rule.prompt is None:
        return True
    names = rule.prompt if prompt else rule.tool
    return names is not None and name in names


def misshapen_path_arg(info: ToolInfo, args: Mapping[str, object]) -> str | None:
    """The first path-role argument whose value is neither a string nor a list of strings
    (a number, null, an object, a nested list): such a value is never canonicalised, so
    the call is refused rather than forwarded with a path nobody checked."""
    for arg, _roles in info.path_args:
        if arg not in args:
            continue
        value = args[arg]
        if isinstance(value, str):
            continue
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return arg
    return None


def with_git_locations(info: ToolInfo, args: Mapping[str, object]) -> dict[str, object] | Decision:
    """``args`` with, after each path of a tool that runs git, the places git really
    reaches through it; a refusal when one of them cannot be known."""
    view = dict(args)
    for arg, hooks in info.git_args:
        value = args.get(arg)
        names = [value] if isinstance(value, str) else value if isinstance(value, list) else []
        found: dict[str, None] = {}
        for name in names:
            assert isinstance(name, str)  # shapes were checked first
            for hook in hooks:
                try:
                    found.update(dict.fromkeys(hook(name)))
                except UnknownLocationError as e:
                    return Decision(
                        "deny",
                        "structural-git-location",
                        f"argument '{arg}' is given to git, and where git would read and "
                        f"write through it cannot be known: it {e}",
                    )
        extra = [place for place in found if place not in names]
        if extra:
            view[arg] = [*names, *extra]
    return view


# -- a rule's argument conditions, checked at each call ----------------------------------------


def _inside(path: str, within: str, prefix: str) -> bool:
    return path == within or path.startswith(prefix)


def paths_within(rule: Rule, info: ToolInfo, args: Mapping[str, object]) -> bool:
    """Whether every path ``args`` give a role the rule names lies within its ``within``
    (and there is at least one)."""
    assert rule.path_roles is not None
    found = False
    for arg, roles in info.path_args:
        if roles & rule.path_roles:
            for path in iter_strings(args.get(arg)):
                if not _inside(path, rule.within, rule.within_prefix) and not any(
                    _inside(path, w, p) for w, p in rule.more_within
                ):
                    return False
                found = True
    return found


# (role, value) -> the domains a URL argument reaches, kept for one call.
DomainCache = dict[tuple[str, str], tuple[str, ...]]


def domains_allowed(
    rule: Rule,
    info: ToolInfo,
    args: Mapping[str, object],
    cwd: str | None,
    cache: DomainCache,
) -> bool:
    """Whether every URL ``args`` give a role the rule names is on a domain it allows (and
    there is at least one)."""
    assert rule.domain_roles is not None
    found = False
    for _arg, roles, domains in url_domains(info, args, cwd, cache):
        if roles & rule.domain_roles:
            if not all(domain_matches_allowlist(d, rule.allowed) for d in domains):
                return False
            found = True
    return found


def url_domains(
    info: ToolInfo, args: Mapping[str, object], cwd: str | None, cache: DomainCache
) -> Iterator[tuple[str, frozenset[ArgumentRole], tuple[str, ...]]]:
    """(argument, its roles, the domains it reaches) for each URL value of a call, and for
    a URL argument the call leaves out whose role says what that stands for (no remote
    named: the remote git picks)."""
    context = in_repository(info, args)
    for arg, role, roles in info.url_args:
        definition = get_role_definition(role)
        value = args.get(arg)
        if context is None and (definition.resolve_for_policy or definition.resolve_absent):
            yield arg, roles, ("",)  # where it resolves depends on a repository not named
        elif value is None:
            if definition.resolve_absent is not None:
                key = (role, "")
                if key not in cache:
                    assert context is not None
                    urls = definition.resolve_absent(context, cwd, info.annotation.name)
                    cache[key] = _judged(definition, urls, cwd)
                yield arg, roles, cache[key]
        else:
            for each in iter_strings(value):
                yield arg, roles, domains_of(each, role, info, context or args, cwd, cache)


def in_repository(info: ToolInfo, args: Mapping[str, object]) -> Mapping[str, object] | None:
    """``args`` with ``repo_path`` set to the repository the call names (its ``repo_path``,
    ``path`` or first path argument); None when the tool takes a path and the call names
    none (the server then works where it was left, which cannot be known here)."""
    names = [arg for arg, _roles in info.path_args]
    for key in ("repo_path", "path", *names):
        value = args.get(key)
        if isinstance(value, str):
            return {**args, "repo_path": value}
    return None if names else args


def _judged(definition: RoleDefinition, urls: tuple[str, ...], cwd: str | None) -> tuple[str, ...]:
    """The domains of ``urls`` as the policy judges them; ``("",)`` (no domain) for none."""
    found = []
    for url in urls or ("",):
        normalised = definition.canonicalize(url, cwd, None)
        prepare = definition.prepare_for_policy
        found.append(prepare(normalised) if prepare else normalised)
    return tuple(found)


def domains_of(
    value: str,
    role: ArgumentRole,
    info: ToolInfo,
    args: Mapping[str, object],
    cwd: str | None,
    cache: DomainCache,
) -> tuple[str, ...]:
    """Every domain a URL argument reaches, as the policy judges it: resolved (a named git
    remote, a rewritten URL: each place git would contact for this tool's operation),
    canonicalised, prepared by its role; ``cache`` keeps them for the call."""
    key = (role, value)
    hit = cache.get(key)
    if hit is not None:
        return hit
    definition = get_role_definition(role)
    resolved: tuple[str, ...] = (value,)
    if definition.resolve_for_policy is not None:
        resolved = definition.resolve_for_policy(value, args, cwd, info.annotation.name)
    cache[key] = _judged(definition, resolved, cwd)
    return cache[key]
