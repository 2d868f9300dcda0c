"""Models of the policy files (annotations and compiled rules, with the ``domains`` condition)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from policy.roles import ArgumentRole

Effect = Literal["read", "write", "delete", "move", "other"]
DecisionKind = Literal["allow", "deny", "escalate"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class ToolAnnotation(_Model):
    tool_name: str = Field(alias="toolName")
    server_name: str = Field(alias="serverName")
    effect: Effect
    side_effects: bool = Field(alias="sideEffects")
    args: dict[str, list[ArgumentRole]] = Field(default_factory=dict)
    # Argument names whose values identify a person: never logged in clear.
    pii_fields: list[str] = Field(default_factory=list, alias="piiFields")
    comment: str | None = None


class ServerAnnotations(_Model):
    tools: list[ToolAnnotation]


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
    tool: list[str] | None = None
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
