"""Models of the policy files (annotations and compiled rules, with the ``domains`` condition).

Plain frozen dataclasses: reading them needs no pydantic. Their JSON names and the rules a
file must follow are in their annotations, for :mod:`policy.schema` to validate and write
them with (unknown keys are refused)."""

from __future__ import annotations

from dataclasses import field
from typing import Annotated, Literal

from policy.roles import ArgumentRole
from policy.schema import pyd
from sandbox_profiles.records import frozen

Effect = Literal["read", "write", "delete", "move", "other"]
DecisionKind = Literal["allow", "deny", "escalate"]

# What pydantic validates each class with: unknown keys refused, Python names accepted too.
_STRICT = {"extra": "forbid", "populate_by_name": True}


@frozen(kw_only=True)
class Annotation:
    """What a tool or a prompt does, and the role of each of its arguments."""

    __pydantic_config__ = _STRICT

    server_name: Annotated[str, pyd.Field(alias="serverName")]
    effect: Effect
    side_effects: Annotated[bool, pyd.Field(alias="sideEffects")]
    args: dict[str, list[ArgumentRole]] = field(default_factory=dict)
    # Argument -> the argument naming the directory its relative paths start from (the
    # repository a tool that runs git works in): judged there, forwarded as given.
    relative_to: Annotated[dict[str, str], pyd.Field(alias="relativeTo")] = field(
        default_factory=dict
    )
    # Argument names whose values identify a person: never logged in clear.
    pii_fields: Annotated[list[str], pyd.Field(alias="piiFields")] = field(default_factory=list)
    comment: str | None = None
    # Written by an annotator and not yet checked by a person: a later run may replace it.
    draft: bool = False

    @property
    def name(self) -> str:
        raise NotImplementedError


@frozen(kw_only=True)
class ToolAnnotation(Annotation):
    """A tool's annotation."""

    tool_name: Annotated[str, pyd.Field(alias="toolName")]

    @property
    def name(self) -> str:
        return self.tool_name


@frozen(kw_only=True)
class PromptAnnotation(Annotation):
    """A prompt's annotation: a ``prompts/get`` is decided like a tool call with these
    roles (prompt arguments are always strings)."""

    prompt_name: Annotated[str, pyd.Field(alias="promptName")]

    @property
    def name(self) -> str:
        return self.prompt_name


@frozen(kw_only=True)
class ServerAnnotations:
    """One server's annotated tools and prompts."""

    __pydantic_config__ = _STRICT

    tools: list[ToolAnnotation]
    prompts: list[PromptAnnotation] = field(default_factory=list)


@frozen(kw_only=True)
class ToolAnnotationsFile:
    """``tool-annotations.json``: the annotations of every server."""

    __pydantic_config__ = _STRICT

    generated_at: Annotated[str | None, pyd.Field(alias="generatedAt")] = None
    constitution_hash: Annotated[str | None, pyd.Field(alias="constitutionHash")] = None
    reviewed: bool | None = None
    servers: dict[str, ServerAnnotations]


@frozen(kw_only=True)
class PathCondition:
    """A rule's ``paths``: every argument with one of ``roles`` lies within ``within``."""

    __pydantic_config__ = _STRICT

    roles: list[ArgumentRole]
    within: str


@frozen(kw_only=True)
class DomainCondition:
    """A rule's ``domains``: every URL argument with one of ``roles`` is on ``allowed``."""

    __pydantic_config__ = _STRICT

    roles: list[ArgumentRole]
    allowed: list[str]


@frozen(kw_only=True)
class RuleCondition:
    """A rule's ``if``: every condition given holds (none given: always)."""

    __pydantic_config__ = _STRICT

    effect: list[Effect] | None = None
    server: list[str] | None = None
    # Tools and prompts are separate namespaces: a rule naming tools applies to no prompt,
    # one naming prompts to no tool, one naming both to those tools and those prompts, and
    # one naming neither to every tool and prompt its other conditions hold for.
    tool: list[str] | None = None
    prompt: list[str] | None = None
    side_effects: Annotated[bool | None, pyd.Field(alias="sideEffects")] = None
    paths: PathCondition | None = None
    domains: DomainCondition | None = None
    # Globs on the caller's name; such a rule never matches a request without a caller.
    caller: list[Annotated[str, pyd.Field(min_length=1)]] | None = None


@frozen(kw_only=True)
class CompiledRule:
    """A compiled rule: when its condition holds, its decision (``then``) applies."""

    __pydantic_config__ = _STRICT

    name: str
    description: str = ""
    principle: str = ""
    condition: Annotated[RuleCondition, pyd.Field(alias="if")]
    then: DecisionKind
    reason: str


@frozen(kw_only=True)
class CompiledPolicyFile:
    """``compiled-policy.json``: the rules, the first that applies decides."""

    __pydantic_config__ = _STRICT

    generated_at: Annotated[str | None, pyd.Field(alias="generatedAt")] = None
    constitution_hash: Annotated[str | None, pyd.Field(alias="constitutionHash")] = None
    rules: list[CompiledRule]
