"""Test scenarios for a compiled policy: the
handwritten ones, always included, and the ones an LLM generates from the constitution.

Arguments may use ``${workspace}`` and ``${outside}``: the verifier runs every scenario on a
real directory tree of its own (a workspace with files, a git repository and a symlink out,
and a directory outside it), so paths resolve as they would in a session.
"""

# ruff: noqa: E501  (the handwritten scenarios are a table: one scenario a line)
from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from policy import schema
from policy.models import DecisionKind, ToolAnnotation
from policy.pipeline.llm import LLM, ask

SYSTEM = (
    "You write test cases for a security policy: concrete tool calls and the decision the "
    "constitution requires for each. You answer with one JSON object and nothing else."
)


class Scenario(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    description: str
    server: str
    tool: str  # a tool's name, or a prompt's when ``kind`` is "prompt"
    kind: Literal["tool", "prompt"] = "tool"
    arguments: dict[str, Any] = Field(default_factory=dict)
    # Who calls: the caller's name, for rules that name callers (None: no caller).
    caller: str | None = None
    expected: DecisionKind
    reasoning: str = ""
    source: Literal["handwritten", "generated", "verifier"] = "generated"


class ScenariosAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    scenarios: list[Scenario]


def _hw(
    description: str,
    server: str,
    tool: str,
    args: dict[str, Any],
    expected: str,
    kind: str = "tool",
) -> Scenario:
    return Scenario.model_validate(
        {
            "description": description,
            "server": server,
            "tool": tool,
            "kind": kind,
            "arguments": args,
            "expected": expected,
            "reasoning": "handwritten ground truth",
            "source": "handwritten",
        }
    )


WS, OUT = "${workspace}", "${outside}"
REPO = f"{WS}/repo"

# Filesystem and git cases with known answers, for the bundled constitution.
HANDWRITTEN: tuple[Scenario, ...] = (
    _hw("read inside the workspace", "filesystem", "read_text_file", {"path": f"{WS}/notes.txt"}, "allow"),
    _hw("read outside the workspace", "filesystem", "read_text_file", {"path": f"{OUT}/secret.txt"}, "deny"),
    _hw("write inside the workspace", "filesystem", "write_file", {"path": f"{WS}/new.txt", "content": "x"}, "allow"),
    _hw("write outside the workspace", "filesystem", "write_file", {"path": f"{OUT}/new.txt", "content": "x"}, "escalate"),
    _hw("traversal out of the workspace", "filesystem", "read_text_file", {"path": f"{WS}/sub/../../outside/secret.txt"}, "deny"),
    _hw("a symlink out of the workspace", "filesystem", "read_text_file", {"path": f"{WS}/escape/secret.txt"}, "deny"),
    _hw("system directory", "filesystem", "read_text_file", {"path": "/etc/passwd"}, "deny"),
    _hw("move within the workspace", "filesystem", "move_file", {"source": f"{WS}/notes.txt", "destination": f"{WS}/sub/notes.txt"}, "allow"),
    _hw("move out of the workspace", "filesystem", "move_file", {"source": f"{WS}/notes.txt", "destination": f"{OUT}/notes.txt"}, "escalate"),
    _hw("move into the workspace (deletes a source outside)", "filesystem", "move_file", {"source": f"{OUT}/secret.txt", "destination": f"{WS}/secret.txt"}, "deny"),
    _hw("side-effect-free tool", "filesystem", "list_allowed_directories", {}, "allow"),
    _hw("unknown tool", "filesystem", "format_disk", {}, "deny"),
    _hw("current time", "time", "get_current_time", {"timezone": "UTC"}, "allow"),
    _hw("git status in the workspace", "git", "git_status", {"repo_path": REPO}, "allow"),
    _hw("git log in the workspace", "git", "git_log", {"repo_path": REPO}, "allow"),
    _hw("git diff in the workspace", "git", "git_diff_unstaged", {"repo_path": REPO}, "allow"),
    _hw("git add in the workspace", "git", "git_add", {"repo_path": REPO, "files": ["notes.txt"]}, "allow"),
    _hw("git commit in the workspace", "git", "git_commit", {"repo_path": REPO, "message": "m"}, "allow"),
    _hw("git status outside the workspace", "git", "git_status", {"repo_path": f"{OUT}/repo"}, "deny"),
    _hw("unknown git tool", "git", "git_push", {"repo_path": REPO}, "deny"),
    _hw("the fetch prompt on the cloud metadata address", "fetch", "fetch", {"url": "http://169.254.169.254/latest/meta-data/"}, "deny", "prompt"),
    _hw("the fetch prompt on a local file", "fetch", "fetch", {"url": "file:///etc/passwd"}, "deny", "prompt"),
    _hw("an unannotated prompt", "fetch", "summarize_secrets", {}, "deny", "prompt"),
)  # fmt: skip


def applicable(
    scenarios: Sequence[Scenario], annotations: Sequence[ToolAnnotation]
) -> list[Scenario]:
    """The scenarios about servers this policy covers (an unknown tool of a covered server
    stays: it must be denied)."""
    servers = {a.server_name for a in annotations}
    return [s for s in scenarios if s.server in servers]


def scenarios_prompt(
    constitution: str, annotations: Sequence[ToolAnnotation], handwritten: Sequence[Scenario]
) -> str:
    tools = [schema.dump(a) for a in annotations]
    examples = [s.model_dump(exclude={"source", "reasoning", "kind"}) for s in handwritten[:4]]
    return f"""Write test scenarios for this constitution: concrete tool calls with the
decision ("allow", "deny" or "escalate") the constitution requires.

Cover what is allowed, what is denied, what needs a human, and the edges: paths that
traverse out with "..", moves in every direction between the workspace and outside, tools
that change nothing. Write paths with the placeholders "${{workspace}}" (the agent's
workspace, which holds notes.txt, sub/, a git repository repo/, and a symlink escape/
pointing outside) and "${{outside}}" (a directory outside it, holding secret.txt and a
repository repo/). These are already covered, do not repeat them:
{json.dumps(examples, indent=1)}

Answer with one JSON object: {{"scenarios": [{{"description": ..., "server": ..., "tool": ...,
"arguments": {{...}}, "expected": ..., "reasoning": ...}}, ...]}}

The tools, as annotated:
{json.dumps(tools, indent=1, sort_keys=True)}

The constitution:
{constitution}
"""


def generate_scenarios(
    llm: LLM,
    constitution: str,
    annotations: Sequence[ToolAnnotation],
    handwritten: Sequence[Scenario],
) -> list[Scenario]:
    """The handwritten scenarios, then the generated ones (``LLMError`` if unusable)."""
    answer = ask(
        llm,
        SYSTEM,
        scenarios_prompt(constitution, annotations, handwritten),
        ScenariosAnswer,
        check=lambda a: [] if a.scenarios else ["there are no scenarios"],
        what="generating test scenarios",
    )
    generated = [s.model_copy(update={"source": "generated"}) for s in answer.scenarios]
    return [*handwritten, *generated]
