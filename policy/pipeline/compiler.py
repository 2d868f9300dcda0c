"""The constitution compiler: the constitution and the tool
annotations in, an ordered rule chain out.

Structural invariants (protected paths, system roots, unknown tools, the domain gate) are
the engine's own and never compiled: the prompt says so, and :func:`structural_problems`
refuses a rule chain that tries (a rule named for them, or a path condition on a protected
or system directory).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict

from policy import schema
from policy.decision import StructuralConfig
from policy.models import CompiledRule, PromptAnnotation, ToolAnnotation
from policy.paths import canonical_path, is_under
from policy.pipeline.llm import LLM, ask
from policy.variables import PlaceholderError, expand

SYSTEM = (
    "You compile a natural-language security constitution into declarative policy rules "
    "for a policy engine that checks every tool call an AI agent makes. You answer with one "
    "JSON object and nothing else."
)


class CompilerAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rules: list[CompiledRule]


def compiler_prompt(
    constitution: str,
    annotations: Sequence[ToolAnnotation],
    directories: Mapping[str, str],
    allowed_domains: Mapping[str, Sequence[str]],
    prompts: Sequence[PromptAnnotation] = (),
) -> str:
    tools = [schema.dump(a) for a in annotations]
    places = "\n".join(f"- {label}: {path}" for label, path in directories.items())
    domains = json.dumps(dict(allowed_domains), sort_keys=True)
    return f"""Compile this constitution into an ordered list of rules.

The engine evaluates rules in order; the first rule whose conditions all hold decides
("allow", "deny" or "escalate" to a human); when none matches, the call is denied.

A rule: {{"name": kebab-case, "description": ..., "principle": the constitution principle it
implements, "if": {{conditions}}, "then": "allow"|"deny"|"escalate", "reason": short, never
quoting argument values}}. Conditions (all optional; omitted means any):
- "effect": list of "read", "write", "delete", "move", "other";
- "server": list of server names; "tool": list of tool names;{_PROMPT_CONDITION if prompts else ""}
- "sideEffects": true or false;
- "paths": {{"roles": [path roles], "within": directory}}: holds when every argument with
  one of those roles is inside the directory (and there is at least one);
- "domains": {{"roles": [url roles], "allowed": [domain patterns]}}: holds when every such
  argument's domain matches ("*" any name, "*.example.com").
"Outside a directory" is a later rule without the "paths" condition (rule order).

Directories (use these exact strings in "within"; the workspace is a new directory each
session, so write it as the placeholder, literally):
{places}

Each server's allowedDomains (the engine already escalates URLs outside them):
{domains}

Do NOT compile the structural invariants: protecting IronCurtain's own configuration,
policy, audit log and state, the system directories (/etc, /proc, /sys, /dev, /boot), and
denying unknown tools are enforced by the engine before any rule. No rule may mention them.

Answer with one JSON object: {{"rules": [...]}}

The tools, as annotated:
{json.dumps(tools, indent=1, sort_keys=True)}
{_prompts_part(prompts)}
The constitution:
{constitution}
"""


_PROMPT_CONDITION = """
- "prompt": list of prompt names. Tools and prompts are separate namespaces: a rule with
  "tool" applies to no prompt, one with "prompt" to no tool, one with both to the tools and
  prompts it names, one with neither to every tool and prompt;"""


def _prompts_part(prompts: Sequence[PromptAnnotation]) -> str:
    if not prompts:
        return ""
    listed = [schema.dump(a) for a in prompts]
    return f"""
The prompts, as annotated (a prompt is decided like a tool: its effect, its arguments'
roles; a rule meant for a tool and the prompt that does the same must name both):
{json.dumps(listed, indent=1, sort_keys=True)}
"""


def structural_problems(
    rules: Sequence[CompiledRule], structural: StructuralConfig, variables: Mapping[str, str]
) -> list[str]:
    """Rules that try to do the engine's structural work: one named for it, or one whose
    path condition is about a protected or system directory (the workspace, exempt from
    the state directory's protection, is fine)."""
    problems = []
    for rule in rules:
        if rule.name.startswith("structural"):
            problems.append(f"rule '{rule.name}': structural rules are the engine's, not compiled")
        if rule.condition.paths is None:
            continue
        try:
            within = canonical_path(expand(rule.condition.paths.within, variables))
        except PlaceholderError as exc:
            problems.append(f"rule '{rule.name}': its 'within' cannot be used: {exc}")
            continue
        state = structural.state_dir
        inside_state = (
            state is not None
            and is_under(within, state)
            and not any(is_under(within, e) for e in structural.exempt)
        )
        if inside_state or any(
            is_under(within, p) for p in (*structural.protected, *structural.system_roots)
        ):
            problems.append(
                f"rule '{rule.name}': its 'within' ({rule.condition.paths.within}) is a "
                "protected or system directory, which only the engine's invariants decide"
            )
    return problems


def compile_constitution(
    llm: LLM,
    constitution: str,
    annotations: Sequence[ToolAnnotation],
    directories: Mapping[str, str],
    allowed_domains: Mapping[str, Sequence[str]],
    structural: StructuralConfig,
    variables: Mapping[str, str],
    prompts: Sequence[PromptAnnotation] = (),
) -> list[CompiledRule]:
    """The rule chain for ``constitution`` (its tools' and prompts' annotations given);
    ``LLMError`` when no usable answer came."""
    tool_names = {a.tool_name for a in annotations}
    prompt_names = {a.prompt_name for a in prompts}
    servers = {a.server_name for a in (*annotations, *prompts)}

    def check(answer: CompilerAnswer) -> list[str]:
        problems = structural_problems(answer.rules, structural, variables)
        names = [r.name for r in answer.rules]
        problems += [f"rule name '{n}' is used twice" for n in set(names) if names.count(n) > 1]
        for rule in answer.rules:
            for server in rule.condition.server or ():
                if server not in servers:
                    problems.append(f"rule '{rule.name}': no server is called '{server}'")
            for tool in rule.condition.tool or ():
                if tool not in tool_names:
                    problems.append(f"rule '{rule.name}': no tool is called '{tool}'")
            for prompt in rule.condition.prompt or ():
                if prompt not in prompt_names:
                    problems.append(f"rule '{rule.name}': no prompt is called '{prompt}'")
        if not answer.rules:
            problems.append("there are no rules")
        return problems

    answer = ask(
        llm,
        SYSTEM,
        compiler_prompt(constitution, annotations, directories, allowed_domains, prompts),
        CompilerAnswer,
        check=check,
        what="compiling the constitution",
    )
    return answer.rules
