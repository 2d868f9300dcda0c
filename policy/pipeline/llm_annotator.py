"""Annotations by an LLM: one question per server, for its tools and its prompts.

The question's role list comes from the role registry (``build_role_descriptions``), so a
new role teaches the annotator by itself. The answer must annotate every listed tool and
prompt and every argument of each, with registered roles only, and pass the heuristic
validator (a path-like argument needs a path role); otherwise it is asked again, then
refused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from policy import schema
from policy.models import Effect, PromptAnnotation, ServerAnnotations, ToolAnnotation
from policy.pipeline.heuristic import arguments_of, relative_paths, validate
from policy.pipeline.llm import LLM, ask
from policy.roles import ArgumentRole, build_role_descriptions

SYSTEM = (
    "You classify the tools of an MCP server for a security policy engine. You answer with "
    "one JSON object and nothing else."
)


class _AnnotatedFields(BaseModel):
    """What the model says of a tool or a prompt, its name aside."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    effect: Effect
    side_effects: bool = Field(alias="sideEffects")
    args: dict[str, list[ArgumentRole]] = Field(default_factory=dict)
    pii_fields: list[str] = Field(default_factory=list, alias="piiFields")


class _Annotated(_AnnotatedFields):
    tool_name: str = Field(alias="toolName")

    @property
    def name(self) -> str:
        return self.tool_name


class _AnnotatedPrompt(_AnnotatedFields):
    prompt_name: str = Field(alias="promptName")

    @property
    def name(self) -> str:
        return self.prompt_name


class AnnotatorAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tools: list[_Annotated]
    prompts: list[_AnnotatedPrompt] = Field(default_factory=list)


def _tool_listing(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """What the question shows of each tool."""
    return [
        {
            "name": t.get("name"),
            "description": t.get("description", ""),
            "annotations": t.get("annotations") or {},
            "inputSchema": t.get("inputSchema") or {},
        }
        for t in tools
    ]


def _with_prompts(question: str, prompts: Sequence[Mapping[str, Any]]) -> str:
    """The question with the part about the server's prompts."""
    prompt_listing = [
        {
            "name": p.get("name"),
            "description": p.get("description", ""),
            "arguments": p.get("arguments") or [],
        }
        for p in prompts
    ]
    return f"""{question}
The server also has prompts: a client asks the server to render one with string
arguments, and the server does what rendering takes (it may read a file or fetch a URL
named by an argument). Annotate every prompt as a tool, in "prompts" of the same JSON
object, with "promptName" (its name, exactly as listed) in place of "toolName" and "args"
for EVERY one of its arguments: {{"tools": [...], "prompts": [{{"promptName": ...,
"effect": ..., "sideEffects": ..., "args": {{...}}, "piiFields": [...]}}, ...]}}

The prompts:
{json.dumps(prompt_listing, indent=1, sort_keys=True)}
"""


def annotator_prompt(
    server: str, tools: Sequence[Mapping[str, Any]], prompts: Sequence[Mapping[str, Any]] = ()
) -> str:
    """The question for one server; the part about prompts only when it has some (so the
    question about a server without prompts, and its cached answer, stay as they were)."""
    listing = _tool_listing(tools)
    question = f"""Annotate every tool of the MCP server "{server}".

For each tool give:
- "toolName": its name, exactly as listed;
- "effect": one of "read", "write", "delete", "move", "other" (what it does to the resources
  it names);
- "sideEffects": true if calling it changes state OR discloses anything from a resource it
  names (a tool that reads a file has side effects); false only for pure queries that name
  no resource (the time, the server's own settings);
- "args": for EVERY property of its input schema, the list of roles that apply (one or
  more; "none" if no other applies);
- "piiFields": arguments whose values identify a person (emails, names, phone numbers),
  else [].

Argument roles:
{build_role_descriptions()}

The source of a move is both read and deleted: give it "read-path" and "delete-path". A tool
that edits a file reads it too: "read-path" and "write-path". A repository path a tool
changes is a "write-path".

Answer with one JSON object: {{"tools": [{{"toolName": ..., "effect": ..., "sideEffects": ...,
"args": {{...}}, "piiFields": [...]}}, ...]}}

The tools:
{json.dumps(listing, indent=1, sort_keys=True)}
"""
    if not prompts:
        return question
    return _with_prompts(question, prompts)


def _problems_of_kind(
    kind: str, listed: Mapping[str, Mapping[str, Any]], annotated: Sequence[Any]
) -> list[str]:
    """``annotated`` answers about ``kind`` ("tool" or "prompt"), checked against what the
    server lists: each exactly once, every argument with roles, nothing invented."""
    given = [a.name for a in annotated]
    problems = [f"{kind} '{n}' is not annotated" for n in listed if n not in given]
    problems += [f"{kind} '{n}' is not a {kind} of this server" for n in given if n not in listed]
    problems += [f"{kind} '{n}' is annotated twice" for n in set(given) if given.count(n) > 1]
    for answer in annotated:
        item = listed.get(answer.name)
        if item is None:
            continue
        arguments = arguments_of(item)
        extra = [a for a in answer.args if a not in arguments]
        problems += [f"{answer.name}: '{a}' is not one of its arguments" for a in extra]
        problems += [f"{answer.name}: '{a}' has no roles" for a, r in answer.args.items() if not r]
        problems += validate(item, answer.model_dump(by_alias=True))
    return problems


def problems_of(
    answer: AnnotatorAnswer,
    tools: Sequence[Mapping[str, Any]],
    server: str,
    prompts: Sequence[Mapping[str, Any]] = (),
) -> list[str]:
    """Everything that keeps an answer from being used, as lines to show the model."""
    problems = _problems_of_kind("tool", {str(t.get("name")): t for t in tools}, answer.tools)
    problems += _problems_of_kind(
        "prompt", {str(p.get("name")): p for p in prompts}, answer.prompts
    )
    return problems


def annotate_server(
    llm: LLM,
    server: str,
    tools: Sequence[Mapping[str, Any]],
    prompts: Sequence[Mapping[str, Any]] = (),
) -> ServerAnnotations:
    """The server's tools and prompts annotated by ``llm`` (asked again while the answer is
    unusable), as drafts.

    Raises ``LLMError`` when no usable answer came."""
    answer = ask(
        llm,
        SYSTEM,
        annotator_prompt(server, tools, prompts),
        AnnotatorAnswer,
        check=lambda a: problems_of(a, tools, server, prompts),
        what=f"annotating the tools of '{server}'",
    )
    extra = {"serverName": server, "draft": True}
    listed = {str(t.get("name")): t for t in tools}

    def relative(a: _Annotated) -> dict[str, object]:
        found = relative_paths(server, listed[a.tool_name], a.args)
        return {"relativeTo": found} if found else {}

    return ServerAnnotations(
        tools=[
            schema.validate(ToolAnnotation, {**a.model_dump(by_alias=True), **relative(a), **extra})
            for a in answer.tools
        ],
        prompts=[
            schema.validate(PromptAnnotation, {**a.model_dump(by_alias=True), **extra})
            for a in answer.prompts
        ],
    )
