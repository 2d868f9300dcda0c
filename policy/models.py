"""Models of the policy files (annotations and compiled rules, with the ``domains`` condition)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from policy.roles import ArgumentRole

Effect = Literal["read", "write", "delete", "move", "other"]
DecisionKind = Literal["allow", "deny", "escalate"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class Annotation(_Model):
    """What a tool or a prompt does, and the role of each of its arguments."""

    server_name: str = Field(alias="serverName")
    effect: Effect
    side_effects: bool = Field(alias="sideEffects")
    args: dict[str, list[ArgumentRole]] = Field(default_factory=dict)
    # Argument names whose values identify a person: never logged in clear.
    pii_fields: list[str] = Field(default_factory=list, alias="piiFields")
    comment: str | None = None
    # Written by an annotator and not yet checked by a person: a later run may replace it.
    draft: bool = False

    @property
    def name(self) -> str:
        raise NotImplementedError


class ToolAnnotation(Annotation):
    tool_name: str = Field(alias="toolName")

    @property
    def name(self) -> str:
        return self.tool_name


class PromptAnnotation(Annotation):
    """A prompt's annotation: a ``prompts/get`` is decided like a tool call with these
    roles (prompt arguments are always strings)."""

    prompt_name: str = Field(alias="promptName")

    @property
    def name(self) -> str:
        return self.prompt_name


class ServerAnnotations(_Model):
    tools: list[ToolAnnotation]
    prompts: list[PromptAnnotation] = Field(default_factory=list)


class ToolAnnotationsFile(_Model):
    generated_at: str | None = Field(default=None, alias="generatedAt")
    constitution_hash: str | None = Field(default=None, alias="constitutionHash")
    reviewed: bool | None = None
    servers: dict[str, ServerAnnotations]


class PathCondition(_Model):
    roles: list[ArgumentRole]
    within: str


class DomainCondition(_Model):
    roles: list[ArgumentRole]
    allowed: list[str]


class RuleCondition(_Model):
    effect: list[Effect] | None = None
    server: list[str] | None = None
    # Tools and prompts are separate namespaces: a rule naming tools applies to no prompt,
    # one naming prompts to no tool, one naming both to those tools and those prompts, and
    # one naming neither to every tool and prompt its other conditions hold for.
    tool: list[str] | None = None
    prompt: list[str] | None = None
    side_effects: bool | None = Field(default=None, alias="sideEffects")
    paths: PathCondition | None = None
    domains: DomainCondition | None = None


class CompiledRule(_Model):
    name: str
    description: str = ""
    principle: str = ""
    condition: RuleCondition = Field(alias="if")
    then: DecisionKind
    reason: str


class CompiledPolicyFile(_Model):
    generated_at: str | None = Field(default=None, alias="generatedAt")
    constitution_hash: str | None = Field(default=None, alias="constitutionHash")
    rules: list[CompiledRule]
