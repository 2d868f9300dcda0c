"""Tool annotations by an LLM: one question per server.

The prompt's role list comes from the role registry (``build_role_descriptions``), so a new
role teaches the annotator by itself. The answer must annotate every listed tool and every
argument of each, with registered roles only, and pass the heuristic validator (a path-like
argument needs a path role); otherwise it is asked again, then refused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from policy.annotate import validate
from policy.llm import LLM, ask
from policy.models import Effect, ToolAnnotation
from policy.roles import ArgumentRole, build_role_descriptions

SYSTEM = (
    "You classify the tools of an MCP server for a security policy engine. You answer with "
    "one JSON object and nothing else."
)


class _Annotated(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    tool_name: str = Field(alias="toolName")
    effect: Effect
    side_effects: bool = Field(alias="sideEffects")
    args: dict[str, list[ArgumentRole]] = Field(default_factory=dict)
    pii_fields: list[str] = Field(default_factory=list, alias="piiFields")


class AnnotatorAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tools: list[_Annotated]


def annotator_prompt(server: str, tools: Sequence[Mapping[str, Any]]) -> str:
    listing = [
        {
            "name": t.get("name"),
            "description": t.get("description", ""),
            "annotations": t.get("annotations") or {},
            "inputSchema": t.get("inputSchema") or {},
        }
        for t in tools
    ]
    return f"""Annotate every tool of the MCP server "{server}".

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


def problems_of(
    answer: AnnotatorAnswer, tools: Sequence[Mapping[str, Any]], server: str
) -> list[str]:
    """Everything that keeps an answer from being used, as lines to show the model."""
    listed = {str(t.get("name")): t for t in tools}
    given = [a.tool_name for a in answer.tools]
    problems = [f"tool '{n}' is not annotated" for n in listed if n not in given]
    problems += [f"tool '{n}' is not a tool of this server" for n in given if n not in listed]
    problems += [f"tool '{n}' is annotated twice" for n in set(given) if given.count(n) > 1]
    for annotated in answer.tools:
        tool = listed.get(annotated.tool_name)
        if tool is None:
            continue
        properties = (tool.get("inputSchema") or {}).get("properties") or {}
        extra = [a for a in annotated.args if a not in properties]
        problems += [f"{annotated.tool_name}: '{a}' is not one of its arguments" for a in extra]
        problems += [
            f"{annotated.tool_name}: '{a}' has no roles" for a, r in annotated.args.items() if not r
        ]
        problems += validate(tool, annotated.model_dump(by_alias=True))
    return problems


def annotate_tools(
    llm: LLM, server: str, tools: Sequence[Mapping[str, Any]]
) -> list[ToolAnnotation]:
    """The server's tools annotated by ``llm`` (asked again while the answer is unusable).

    Raises ``LLMError`` when no usable answer came."""
    answer = ask(
        llm,
        SYSTEM,
        annotator_prompt(server, tools),
        AnnotatorAnswer,
        check=lambda a: problems_of(a, tools, server),
        what=f"annotating the tools of '{server}'",
    )
    return [
        ToolAnnotation.model_validate({**a.model_dump(by_alias=True), "serverName": server})
        for a in answer.tools
    ]
