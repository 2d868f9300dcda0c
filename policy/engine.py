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

import re
from collections.abc import Mapping, Sequence
from urllib.parse import quote

from policy.compiled import (
    DomainCache,
    Rule,
    ToolInfo,
    compile_rule,
    domains_allowed,
    for_workspaces,
    misshapen_path_arg,
    names_match,
    paths_within,
    tool_info,
    url_domains,
    with_git_locations,
)
from policy.decision import UNKNOWN_TOOL, Decision, StructuralConfig, deny_protected
from policy.models import (
    CompiledPolicyFile,
    PromptAnnotation,
    ToolAnnotation,
    ToolAnnotationsFile,
)
from policy.paths import (
    canonical_path,
    iter_strings,
    looks_like_path,
)
from policy.permissions import Permissions
from policy.prepare import prepare_tool_args
from policy.roles import ArgumentRole
from policy.urls import domain_matches_allowlist, file_uri_path

_SEVERITY: Mapping[str, int] = {"allow": 0, "escalate": 1, "deny": 2}
# ``resources/read`` is evaluated as this tool, whose one argument is the resource's path.
RESOURCE_READ_TOOL = "resources/read"

# Roles that remove their target: deleting or moving away a directory that holds a protected
# path is as bad as touching the protected path itself. (Writing *into* an ancestor is not.)
_REMOVING_ROLES: frozenset[ArgumentRole] = frozenset({"delete-path"})


_URI_START = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")  # RFC 3986's scheme
_URI_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


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
        permissions: Permissions | None = None,
        workspaces: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        """``workspaces``: each server's own workspace directories (canonical), where its
        rules ``within`` ``${workspace}`` apply as in the session's workspace."""
        # What a caller must hold for each tool and prompt (checked before this engine is
        # asked: a caller without it is refused whatever the rules say).
        self.permissions = permissions or Permissions()
        self.structural = structural or StructuralConfig()
        self._allowlists = {k: tuple(v) for k, v in (domain_allowlists or {}).items()}
        self._tools: dict[tuple[str, str], ToolInfo] = {}
        self._prompts: dict[tuple[str, str], ToolInfo] = {}
        for server, entry in annotations.servers.items():
            for ann in entry.tools:
                self._tools[(server, ann.tool_name)] = tool_info(ann, server)
            for prompt in entry.prompts:
                # A prompt never runs git: the server renders a text, so no git hooks.
                self._prompts[(server, prompt.prompt_name)] = tool_info(prompt)
        self._rules = [compile_rule(r, variables or {}) for r in policy.rules]
        self._server_rules = {
            server: [
                for_workspaces(r, c, variables or {}, own)
                for r, c in zip(policy.rules, self._rules, strict=True)
            ]
            for server, own in (workspaces or {}).items()
            if own
        }
        self._candidates: dict[tuple[str, str], tuple[Rule, ...]] = {}
        self._prompt_candidates: dict[tuple[str, str], tuple[Rule, ...]] = {}
        self._resource_infos: dict[str, ToolInfo] = {}

    @property
    def rules(self) -> list[Rule]:
        """The compiled rules, in order."""
        return list(self._rules)

    def workspaces(self, server: str) -> tuple[str, ...]:
        """The directories ``server``'s rules take for the workspace besides the session's."""
        rules = self._server_rules.get(server, ())
        return tuple(dict.fromkeys(w for r in rules for w, _ in r.more_within))

    def tool_annotations(self, server: str) -> list[ToolAnnotation]:
        """The annotations of ``server``'s tools."""
        found = []
        for (name, _), info in self._tools.items():
            if name == server:
                assert isinstance(info.annotation, ToolAnnotation)
                found.append(info.annotation)
        return found

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
        self,
        server: str,
        tool: str,
        args: Mapping[str, object],
        cwd: str | None = None,
        *,
        caller: str | None = None,
    ) -> tuple[Decision, dict[str, object]]:
        """Canonicalise raw arguments, evaluate them; returns the decision and the
        arguments to forward. ``caller``: the name of who calls (None: no caller; a rule
        that names callers does not apply)."""
        transport, for_policy = self.prepare(server, tool, args, cwd)
        return self.evaluate(server, tool, for_policy, cwd, caller=caller), transport

    def decide_prompt(
        self,
        server: str,
        prompt: str,
        args: Mapping[str, object],
        cwd: str | None = None,
        *,
        caller: str | None = None,
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
        verdict = self._evaluate(server, prompt, info, for_policy, cwd, True, caller)
        return verdict, transport

    def decide_resource_read(
        self, server: str, uri: str, cwd: str | None = None, *, caller: str | None = None
    ) -> tuple[Decision, str]:
        """A ``resources/read``: ``file://`` URIs are checked as a read-path (structural
        invariants, then the rules as tool ``resources/read`` with effect ``read``); other
        schemes are the server's own handles and pass. Returns the decision and the URI to
        forward (canonical for files).

        A URI must start with its scheme and hold no control character: URI parsers (the
        WHATWG one the TypeScript SDK uses) drop leading spaces and controls and remove
        tabs and newlines anywhere, so ``" file:///etc/passwd"`` or ``"fi\tle:..."`` would be
        a server's own handle here and a file there."""
        if not _URI_START.match(uri) or _URI_CONTROL.search(uri):
            why = "a URI must start with its scheme and hold no control characters"
            return Decision("deny", "structural-uri-shape", why), uri
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
            info = self._resource_infos[server] = tool_info(
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
            verdict = self._compiled(
                server, RESOURCE_READ_TOOL, info, args, cwd, {}, args, False, caller
            )
        return verdict, "file://" + quote(canonical)

    # -- evaluation -------------------------------------------------------------------------

    def evaluate(
        self,
        server: str,
        tool: str,
        args: Mapping[str, object],
        cwd: str | None = None,
        *,
        caller: str | None = None,
    ) -> Decision:
        """Evaluate canonical arguments (as returned by :meth:`prepare`)."""
        info = self._tools.get((server, tool))
        if info is None:
            return self._structural(None, args, cwd, UNKNOWN_TOOL) or UNKNOWN_TOOL
        return self._evaluate(server, tool, info, args, cwd, False, caller)

    def _evaluate(
        self,
        server: str,
        name: str,
        info: ToolInfo,
        args: Mapping[str, object],
        cwd: str | None,
        prompt: bool,
        caller: str | None = None,
    ) -> Decision:
        paths = args
        if info.path_args:
            misshapen = misshapen_path_arg(info, args)
            if misshapen is not None:
                return Decision(
                    "deny",
                    "structural-path-shape",
                    f"argument '{misshapen}' has a path role but is neither a string nor a "
                    "list of strings, so the path it names cannot be checked",
                )
            if info.git_args:
                located = with_git_locations(info, args)
                if isinstance(located, Decision):
                    return located
                paths = located
        verdict = self._structural(info, paths, cwd)
        if verdict is not None:
            return verdict
        domain_cache: DomainCache = {}
        gate = self._domain_gate(server, info, args, cwd, domain_cache)
        compiled = self._compiled(
            server, name, info, args, cwd, domain_cache, paths, prompt, caller
        )
        if gate is not None and _SEVERITY[gate.decision] > _SEVERITY[compiled.decision]:
            return gate
        return compiled

    def _structural(
        self,
        info: ToolInfo | None,
        args: Mapping[str, object],
        cwd: str | None,
        unknown: Decision = UNKNOWN_TOOL,
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
                        return deny_protected(key, label)
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
                            return deny_protected(key, label)
        if info is None:
            return unknown
        return None

    def _domain_gate(
        self,
        server: str,
        info: ToolInfo,
        args: Mapping[str, object],
        cwd: str | None,
        cache: DomainCache,
    ) -> Decision | None:
        if not info.url_args:
            return None
        allowed = self._allowlists.get(server, ())
        for arg, _roles, domains in url_domains(info, args, cwd, cache):
            if not all(domain_matches_allowlist(d, allowed) for d in domains):
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
        info: ToolInfo,
        args: Mapping[str, object],
        cwd: str | None,
        cache: DomainCache,
        paths: Mapping[str, object],
        prompt: bool,
        caller: str | None = None,
    ) -> Decision:
        """The first rule that matches; ``paths`` is ``args`` with git's places added.
        ``tool`` is a prompt's name when ``prompt``; a rule naming callers matches only
        a ``caller`` it names."""
        known = self._prompt_candidates if prompt else self._candidates
        candidates = known.get((server, tool))
        if candidates is None:
            candidates = known[(server, tool)] = self._static_matches(server, tool, info, prompt)
        for rule in candidates:
            if rule.caller is not None and (caller is None or rule.caller.match(caller) is None):
                continue
            if rule.path_roles is not None and not paths_within(rule, info, paths):
                continue
            if rule.domain_roles is not None and not domains_allowed(rule, info, args, cwd, cache):
                continue
            return Decision(rule.then, rule.name, rule.reason)
        return Decision("deny", "default-deny", "no policy rule matches this call")

    def _static_matches(
        self, server: str, name: str, info: ToolInfo, prompt: bool
    ) -> tuple[Rule, ...]:
        """The rules whose conditions on the tool or prompt itself (effect, server, name,
        side effects) hold, in order: only their argument conditions are left to each call.

        A rule that names tools or prompts applies only to those it names, in its own
        namespace: ``tool: ["fetch"]`` never matches the prompt ``fetch``."""
        ann = info.annotation
        return tuple(
            rule
            for rule in self._server_rules.get(server, self._rules)
            if (rule.effect is None or ann.effect in rule.effect)
            and (rule.server is None or server in rule.server)
            and names_match(rule, name, prompt)
            and (rule.side_effects is None or ann.side_effects == rule.side_effects)
        )
