"""The policy engine: structural invariants, then compiled rules, first match wins.

Plain data in, a :class:`Decision` out; no sockets, no subprocesses of its own (named git
remotes are resolved through the role registry's resolver, which tests can replace).

A path-role argument must be a string or a list of strings (anything else is refused:
``structural-path-shape``). For a tool that runs git, each path is also judged by where git
really works through it (the role registry's ``git_locations``: a ``.git`` file's git
directory, its common directory...): the structural invariants and the rules see those
places as more values of the same argument, and a place that cannot be known refuses the
call (``structural-git-location``). The arguments forwarded stay the ones the agent named.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import quote

from policy.models import (
    Annotation,
    CompiledPolicyFile,
    CompiledRule,
    PromptAnnotation,
    ToolAnnotation,
    ToolAnnotationsFile,
)
from policy.paths import (
    SYSTEM_ROOTS,
    UnknownLocationError,
    canonical_path,
    is_under,
    iter_strings,
    looks_like_path,
)
from policy.prepare import prepare_tool_args
from policy.roles import (
    ArgumentRole,
    GitLocations,
    get_path_roles,
    get_role_definition,
    get_url_roles,
    is_git_tool,
)
from policy.urls import domain_matches_allowlist, file_uri_path
from policy.variables import PlaceholderError, expand

DecisionKind = Literal["allow", "deny", "escalate"]
_SEVERITY: Mapping[str, int] = {"allow": 0, "escalate": 1, "deny": 2}
# ``resources/read`` is evaluated as this tool, whose one argument is the resource's path.
RESOURCE_READ_TOOL = "resources/read"

PATH_ROLES: frozenset[ArgumentRole] = frozenset(get_path_roles())
URL_ROLES: frozenset[ArgumentRole] = frozenset(get_url_roles())
# Roles that remove their target: deleting or moving away a directory that holds a protected
# path is as bad as touching the protected path itself. (Writing *into* an ancestor is not.)
_REMOVING_ROLES: frozenset[ArgumentRole] = frozenset({"delete-path"})


@dataclass(frozen=True, slots=True)
class Decision:
    decision: DecisionKind
    rule: str
    reason: str


_UNKNOWN_TOOL = Decision(
    "deny", "structural-unknown-tool", "tool has no annotation, so it is never called"
)


@dataclass(frozen=True)
class StructuralConfig:
    """Hard-coded protections, derived from the session's configuration, never compiled.

    ``protected`` maps canonical paths to a label used in reasons. ``state_dir`` is
    protected as a whole except for the ``exempt`` directories (this session's workspace).
    """

    protected: Mapping[str, str] = field(default_factory=dict)
    state_dir: str | None = None
    exempt: tuple[str, ...] = ()
    system_roots: tuple[str, ...] = SYSTEM_ROOTS
    # Every guarded directory as an exact path and as a prefix, so that the common answer
    # (the path is under none of them) is two C-level string tests, whatever their number.
    _guarded: _Prefixes = field(init=False, repr=False, compare=False)
    _system: _Prefixes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        guarded = [*self.protected, *([self.state_dir] if self.state_dir else [])]
        object.__setattr__(self, "_guarded", _Prefixes(guarded))
        object.__setattr__(self, "_system", _Prefixes(self.system_roots))

    def protected_label(self, path: str, removing: bool = False) -> str | None:
        if not self._guarded.covers(path) and not (removing and self._guarded.any_below(path)):
            return None
        for target, label in self.protected.items():
            if is_under(path, target) or (removing and is_under(target, path)):
                return label
        state = self.state_dir
        if (
            state is not None
            and (is_under(path, state) or (removing and is_under(state, path)))
            # An exemption only carves a directory out of the state dir, never the other
            # way round: a workspace that *contains* the state dir exempts nothing.
            and not any(
                is_under(path, e) and e != state and is_under(e, state) for e in self.exempt
            )
        ):
            return "ironcurtain's state directory"
        return None

    def system_root(self, path: str) -> str | None:
        """The system root ``path`` is in, if any."""
        if not self._system.covers(path):
            return None
        return next(root for root in self.system_roots if is_under(path, root))


class _Prefixes:
    """``covers(p)``: ``is_under(p, d)`` for some ``d`` of a fixed set, in two C calls."""

    def __init__(self, directories: Iterable[str]) -> None:
        dirs = list(directories)
        self.exact = frozenset(dirs)
        self.prefixes = tuple(os.sep if d == os.sep else d.rstrip(os.sep) + os.sep for d in dirs)

    def covers(self, path: str) -> bool:
        return path in self.exact or path.startswith(self.prefixes)

    def any_below(self, path: str) -> bool:
        """Whether some ``d`` is ``path`` or below it (removing ``path`` removes ``d``)."""
        below = os.sep if path == os.sep else path.rstrip(os.sep) + os.sep
        return path in self.exact or any(d.startswith(below) for d in self.exact)


@dataclass(frozen=True, slots=True)
class _ToolInfo:
    """An annotation (a tool's or a prompt's) with what each call needs precomputed."""

    annotation: Annotation
    path_args: tuple[tuple[str, frozenset[ArgumentRole]], ...]
    url_args: tuple[tuple[str, ArgumentRole, frozenset[ArgumentRole]], ...]
    path_roles_by_arg: Mapping[str, frozenset[ArgumentRole]]
    # Path arguments of a tool that runs git, with their roles' ``git_locations``.
    git_args: tuple[tuple[str, tuple[GitLocations, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class _Rule:
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


def _opt_set(values: Iterable[str] | None) -> frozenset[str] | None:
    return None if values is None else frozenset(values)


def _compile_rule(rule: CompiledRule, variables: Mapping[str, str]) -> _Rule:
    c = rule.condition
    try:
        within = canonical_path(expand(c.paths.within, variables)) if c.paths else ""
    except PlaceholderError as exc:
        raise PlaceholderError(f"rule '{rule.name}', its 'within': {exc}") from None
    return _Rule(
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
        within_prefix=os.sep if within == os.sep else within.rstrip(os.sep) + os.sep,
        domain_roles=frozenset(c.domains.roles) if c.domains else None,
        allowed=tuple(c.domains.allowed) if c.domains else (),
    )


class PolicyEngine:
    """Decides every tool call and every prompt: ``allow``, ``deny`` or ``escalate``.

    A prompt is decided exactly as a tool is, from its own annotation (the file's
    ``prompts``); tools and prompts are separate namespaces, in the annotations as in the
    rules' ``tool`` and ``prompt`` conditions.

    >>> engine = PolicyEngine(CompiledPolicyFile(rules=[]), ToolAnnotationsFile(servers={}))
    >>> engine.evaluate("fs", "read_file", {"path": "/tmp/x"}).rule
    'structural-unknown-tool'
    >>> engine.decide_prompt("fs", "summarize", {"path": "/tmp/x"})[0].rule
    'structural-unknown-prompt'
    """

    def __init__(
        self,
        policy: CompiledPolicyFile,
        annotations: ToolAnnotationsFile,
        structural: StructuralConfig | None = None,
        domain_allowlists: Mapping[str, Sequence[str]] | None = None,
        variables: Mapping[str, str] | None = None,
    ) -> None:
        self.structural = structural or StructuralConfig()
        self._allowlists = {k: tuple(v) for k, v in (domain_allowlists or {}).items()}
        self._tools: dict[tuple[str, str], _ToolInfo] = {}
        self._prompts: dict[tuple[str, str], _ToolInfo] = {}
        for server, entry in annotations.servers.items():
            for ann in entry.tools:
                self._tools[(server, ann.tool_name)] = self._tool_info(ann, server)
            for prompt in entry.prompts:
                # A prompt never runs git: the server renders a text, so no git hooks.
                self._prompts[(server, prompt.prompt_name)] = self._tool_info(prompt)
        self._rules = [_compile_rule(r, variables or {}) for r in policy.rules]
        self._candidates: dict[tuple[str, str], tuple[_Rule, ...]] = {}
        self._prompt_candidates: dict[tuple[str, str], tuple[_Rule, ...]] = {}
        self._resource_infos: dict[str, _ToolInfo] = {}

    @staticmethod
    def _tool_info(ann: Annotation, server: str | None = None) -> _ToolInfo:
        """``server`` is given for a tool, whose git use the role registry knows."""
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
        return _ToolInfo(ann, tuple(path_args), tuple(url_args), dict(path_args), tuple(git_args))

    def get_annotation(self, server: str, tool: str) -> ToolAnnotation | None:
        info = self._tools.get((server, tool))
        if info is None:
            return None
        assert isinstance(info.annotation, ToolAnnotation)
        return info.annotation

    def get_prompt_annotation(self, server: str, prompt: str) -> PromptAnnotation | None:
        info = self._prompts.get((server, prompt))
        if info is None:
            return None
        assert isinstance(info.annotation, PromptAnnotation)
        return info.annotation

    def prepare(
        self, server: str, tool: str, args: Mapping[str, object], cwd: str | None = None
    ) -> tuple[dict[str, object], dict[str, object]]:
        """``prepare_tool_args`` with this engine's annotation for the tool."""
        return prepare_tool_args(args, self.get_annotation(server, tool), cwd)

    def decide(
        self, server: str, tool: str, args: Mapping[str, object], cwd: str | None = None
    ) -> tuple[Decision, dict[str, object]]:
        """Canonicalise raw arguments, evaluate them; returns the decision and the
        arguments to forward."""
        transport, for_policy = self.prepare(server, tool, args, cwd)
        return self.evaluate(server, tool, for_policy, cwd), transport

    def decide_prompt(
        self, server: str, prompt: str, args: Mapping[str, object], cwd: str | None = None
    ) -> tuple[Decision, dict[str, object]]:
        """A ``prompts/get`` (or a completion of one of its arguments), decided as a tool
        call is: arguments prepared by their roles, the structural invariants (a prompt
        with no annotation is denied), then the rules that apply to prompts. Returns the
        decision and the arguments to forward.

        >>> engine = PolicyEngine(CompiledPolicyFile(rules=[]), ToolAnnotationsFile(servers={}))
        >>> engine.decide_prompt("fetch", "fetch", {"url": "https://x.org"})[0].reason
        "prompt 'fetch' of server 'fetch' has no annotation, so it is never called"
        """
        info = self._prompts.get((server, prompt))
        transport, for_policy = prepare_tool_args(args, info.annotation if info else None, cwd)
        if info is None:
            unknown = Decision(
                "deny",
                "structural-unknown-prompt",
                f"prompt '{prompt}' of server '{server}' has no annotation, so it is never called",
            )
            return self._structural(None, for_policy, cwd, unknown) or unknown, transport
        unnamed = sorted(k for k in args if k not in info.annotation.args)
        if unnamed:
            # A prompt declares its arguments: one its annotation gives no role was never
            # judged, so it is not passed on (a server can add one at any time).
            refused = Decision(
                "deny",
                "structural-unannotated-argument",
                f"argument {', '.join(map(repr, unnamed))} of prompt '{prompt}' has no role "
                "in its annotation",
            )
            return refused, transport
        return self._evaluate(server, prompt, info, for_policy, cwd, prompt=True), transport

    def decide_resource_read(
        self, server: str, uri: str, cwd: str | None = None
    ) -> tuple[Decision, str]:
        """A ``resources/read``: ``file://`` URIs are checked as a read-path (structural
        invariants, then the rules as tool ``resources/read`` with effect ``read``); other
        schemes are the server's own handles and pass. Returns the decision and the URI to
        forward (canonical for files)."""
        if uri[:5].lower() != "file:":
            return Decision("allow", "resource-not-a-file", "not a file:// resource"), uri
        path = file_uri_path(uri)
        if path is None:
            return (
                Decision("deny", "structural-remote-file-uri", "file URI names another host"),
                uri,
            )
        canonical = canonical_path(path, cwd)
        info = self._resource_infos.get(server)
        if info is None:
            info = self._resource_infos[server] = self._tool_info(
                ToolAnnotation(
                    tool_name=RESOURCE_READ_TOOL,
                    server_name=server,
                    effect="read",
                    side_effects=True,
                    args={"uri": ["read-path"]},
                )
            )
        args = {"uri": canonical}
        verdict = self._structural(info, args, cwd)
        if verdict is None:
            verdict = self._compiled(server, RESOURCE_READ_TOOL, info, args, cwd, {}, args, False)
        return verdict, "file://" + quote(canonical)

    # -- evaluation -------------------------------------------------------------------------

    def evaluate(
        self, server: str, tool: str, args: Mapping[str, object], cwd: str | None = None
    ) -> Decision:
        """Evaluate canonical arguments (as returned by :meth:`prepare`)."""
        info = self._tools.get((server, tool))
        if info is None:
            return self._structural(None, args, cwd, _UNKNOWN_TOOL) or _UNKNOWN_TOOL
        return self._evaluate(server, tool, info, args, cwd, prompt=False)

    def _evaluate(
        self,
        server: str,
        name: str,
        info: _ToolInfo,
        args: Mapping[str, object],
        cwd: str | None,
        prompt: bool,
    ) -> Decision:
        paths = args
        if info.path_args:
            misshapen = _misshapen_path_arg(info, args)
            if misshapen is not None:
                return Decision(
                    "deny",
                    "structural-path-shape",
                    f"argument '{misshapen}' has a path role but is neither a string nor a "
                    "list of strings, so the path it names cannot be checked",
                )
            if info.git_args:
                located = _with_git_locations(info, args)
                if isinstance(located, Decision):
                    return located
                paths = located
        verdict = self._structural(info, paths, cwd)
        if verdict is not None:
            return verdict
        domain_cache: dict[tuple[str, str], str] = {}
        gate = self._domain_gate(server, info, args, cwd, domain_cache)
        compiled = self._compiled(server, name, info, args, cwd, domain_cache, paths, prompt)
        if gate is not None and _SEVERITY[gate.decision] > _SEVERITY[compiled.decision]:
            return gate
        return compiled

    def _structural(
        self,
        info: _ToolInfo | None,
        args: Mapping[str, object],
        cwd: str | None,
        unknown: Decision = _UNKNOWN_TOOL,
    ) -> Decision | None:
        """The first invariant ``args`` break; ``unknown`` when there is no annotation."""
        structural = self.structural
        annotated = info.path_roles_by_arg if info else {}
        for key, value in args.items():
            roles = annotated.get(key)
            if roles is not None:
                removing = bool(roles & _REMOVING_ROLES)
                for path in iter_strings(value):
                    label = structural.protected_label(path, removing)
                    if label:
                        return _deny_protected(key, label)
                    root = structural.system_root(path)
                    if root is not None:
                        return Decision(
                            "deny",
                            "structural-system-root",
                            f"argument '{key}' points into the system directory {root}",
                        )
            else:
                # Defence in depth: anything that looks like a path, whatever its role.
                for text in iter_strings(value):
                    if looks_like_path(text):
                        label = structural.protected_label(canonical_path(text, cwd))
                        if label:
                            return _deny_protected(key, label)
        if info is None:
            return unknown
        return None

    @staticmethod
    def _domain_of(
        value: str,
        role: ArgumentRole,
        args: Mapping[str, object],
        cwd: str | None,
        cache: dict[tuple[str, str], str],
    ) -> str:
        """resolve_for_policy -> canonicalize -> prepare_for_policy."""
        key = (role, value)
        hit = cache.get(key)
        if hit is not None:
            return hit
        definition = get_role_definition(role)
        resolved = value
        if definition.resolve_for_policy is not None:
            resolved = definition.resolve_for_policy(value, args, cwd)
        normalised = definition.canonicalize(resolved, cwd, None)
        domain = (
            definition.prepare_for_policy(normalised)
            if definition.prepare_for_policy
            else normalised
        )
        cache[key] = domain
        return domain

    def _domain_gate(
        self,
        server: str,
        info: _ToolInfo,
        args: Mapping[str, object],
        cwd: str | None,
        cache: dict[tuple[str, str], str],
    ) -> Decision | None:
        if not info.url_args:
            return None
        allowed = self._allowlists.get(server, ())
        for arg, role, _roles in info.url_args:
            for value in iter_strings(args.get(arg)):
                domain = self._domain_of(value, role, args, cwd, cache)
                if not domain_matches_allowlist(domain, allowed):
                    return Decision(
                        "escalate",
                        "structural-untrusted-domain",
                        f"argument '{arg}' targets a domain outside this server's allowedDomains",
                    )
        return None

    def _compiled(
        self,
        server: str,
        tool: str,
        info: _ToolInfo,
        args: Mapping[str, object],
        cwd: str | None,
        cache: dict[tuple[str, str], str],
        paths: Mapping[str, object],
        prompt: bool,
    ) -> Decision:
        """The first rule that matches; ``paths`` is ``args`` with git's places added.
        ``tool`` is a prompt's name when ``prompt``."""
        known = self._prompt_candidates if prompt else self._candidates
        candidates = known.get((server, tool))
        if candidates is None:
            candidates = known[(server, tool)] = self._static_matches(server, tool, info, prompt)
        for rule in candidates:
            if rule.path_roles is not None and not self._paths_within(rule, info, paths):
                continue
            if rule.domain_roles is not None and not self._domains_allowed(
                rule, info, args, cwd, cache
            ):
                continue
            return Decision(rule.then, rule.name, rule.reason)
        return Decision("deny", "default-deny", "no policy rule matches this call")

    def _static_matches(
        self, server: str, name: str, info: _ToolInfo, prompt: bool
    ) -> tuple[_Rule, ...]:
        """The rules whose conditions on the tool or prompt itself (effect, server, name,
        side effects) hold, in order: only their argument conditions are left to each call.

        A rule that names tools or prompts applies only to those it names, in its own
        namespace: ``tool: ["fetch"]`` never matches the prompt ``fetch``."""
        ann = info.annotation
        return tuple(
            rule
            for rule in self._rules
            if (rule.effect is None or ann.effect in rule.effect)
            and (rule.server is None or server in rule.server)
            and _names_match(rule, name, prompt)
            and (rule.side_effects is None or ann.side_effects == rule.side_effects)
        )

    @staticmethod
    def _paths_within(rule: _Rule, info: _ToolInfo, args: Mapping[str, object]) -> bool:
        assert rule.path_roles is not None
        found = False
        for arg, roles in info.path_args:
            if roles & rule.path_roles:
                for path in iter_strings(args.get(arg)):
                    if path != rule.within and not path.startswith(rule.within_prefix):
                        return False
                    found = True
        return found

    def _domains_allowed(
        self,
        rule: _Rule,
        info: _ToolInfo,
        args: Mapping[str, object],
        cwd: str | None,
        cache: dict[tuple[str, str], str],
    ) -> bool:
        assert rule.domain_roles is not None
        found = False
        for arg, role, roles in info.url_args:
            if roles & rule.domain_roles:
                for value in iter_strings(args.get(arg)):
                    domain = self._domain_of(value, role, args, cwd, cache)
                    if not domain_matches_allowlist(domain, rule.allowed):
                        return False
                    found = True
        return found


def _names_match(rule: _Rule, name: str, prompt: bool) -> bool:
    if rule.tool is None and rule.prompt is None:
        return True
    names = rule.prompt if prompt else rule.tool
    return names is not None and name in names


def _misshapen_path_arg(info: _ToolInfo, args: Mapping[str, object]) -> str | None:
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


def _with_git_locations(
    info: _ToolInfo, args: Mapping[str, object]
) -> dict[str, object] | Decision:
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


def _deny_protected(arg: str, label: str) -> Decision:
    return Decision(
        "deny",
        "structural-protected-path",
        f"argument '{arg}' points into {label}, which is protected",
    )
