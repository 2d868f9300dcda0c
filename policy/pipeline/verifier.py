"""The policy verifier: every scenario through the real engine, then
an LLM judge reads the results, for up to three rounds.

The judge may ask for more scenarios to probe a gap; they run in the next round. The policy
passes when no handwritten scenario fails (they are ground truth, whatever the judge says)
and the judge's last word is "pass".
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from policy import schema
from policy.engine import PolicyEngine
from policy.models import CompiledRule
from policy.pipeline.llm import LLM, ask
from policy.pipeline.scenarios import Scenario
from policy.variables import PlaceholderError, expand
from sandbox_profiles.records import frozen, mutable

MAX_ROUNDS = 3
SYSTEM = (
    "You review a compiled security policy against its constitution, from the decisions "
    "the real policy engine made on test scenarios. You answer with one JSON object and "
    "nothing else."
)


class JudgeAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    verdict: Literal["pass", "fail"]
    analysis: str
    new_scenarios: list[Scenario] = Field(default_factory=list, alias="newScenarios")


@frozen
class Result:
    scenario: Scenario
    actual: str
    rule: str

    @property
    def passed(self) -> bool:
        return self.actual == self.scenario.expected


@mutable
class Verification:
    passed: bool = False
    rounds: list[tuple[list[Result], JudgeAnswer]] = field(default_factory=list)

    @property
    def failures(self) -> list[Result]:
        return [r for results, _ in self.rounds for r in results if not r.passed]

    @property
    def scenarios(self) -> list[Scenario]:
        return [r.scenario for results, _ in self.rounds for r in results]


@contextmanager
def scenario_tree() -> Iterator[dict[str, str]]:
    """A real directory tree for the scenarios' placeholders: a workspace (notes.txt, sub/,
    a git repository repo/, a symlink escape/ to outside) and a directory outside it."""
    with tempfile.TemporaryDirectory(prefix="ironcurtain-verify-") as root:
        root = os.path.realpath(root)
        ws, outside = os.path.join(root, "workspace"), os.path.join(root, "outside")
        for directory in (f"{ws}/sub", f"{ws}/repo", f"{outside}/repo"):
            os.makedirs(directory)
        for path in (f"{ws}/notes.txt", f"{outside}/secret.txt"):
            with open(path, "w", encoding="utf-8") as handle:
                handle.write("x\n")
        os.symlink(outside, f"{ws}/escape")
        for repo in (f"{ws}/repo", f"{outside}/repo"):
            subprocess.run(["git", "init", "-q", repo], check=False, capture_output=True)
        yield {"workspace": ws, "outside": outside}


def _fill(value: Any, places: dict[str, str]) -> Any:
    if isinstance(value, str):
        try:
            return expand(value, places)
        except PlaceholderError:
            return value  # a placeholder the tree has no place for: the call names it as is
    if isinstance(value, list):
        return [_fill(v, places) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, places) for k, v in value.items()}
    return value


def execute(
    engine: PolicyEngine, scenarios: Sequence[Scenario], places: dict[str, str]
) -> list[Result]:
    results = []
    for scenario in scenarios:
        arguments = _fill(scenario.arguments, places)
        decide = engine.decide_prompt if scenario.kind == "prompt" else engine.decide
        decision, _ = decide(
            scenario.server,
            scenario.tool,
            arguments,
            cwd=places["workspace"],
            caller=scenario.caller,
        )
        results.append(Result(scenario, decision.decision, decision.rule))
    return results


def judge_prompt(
    constitution: str, rules: Sequence[CompiledRule], results: Sequence[Result], round_: int
) -> str:
    table = [
        {
            "description": r.scenario.description,
            "call": f"{r.scenario.server}/{r.scenario.tool}"
            + (" (prompt)" if r.scenario.kind == "prompt" else "")
            + (f" by caller {r.scenario.caller}" if r.scenario.caller else ""),
            "arguments": r.scenario.arguments,
            "expected": r.scenario.expected,
            "actual": r.actual,
            "rule": r.rule,
            "source": r.scenario.source,
            "ok": r.passed,
        }
        for r in results
    ]
    compiled = [schema.dump(r) for r in rules]
    return f"""Round {round_} of at most {MAX_ROUNDS}. The real policy engine decided these
test scenarios under the compiled rules below. Rules named "structural-..." are the engine's
own invariants (protected paths, system directories, unknown tools), applied first.

For every scenario where the decision differs from the expectation, say whether the rule or
the expectation is wrong (handwritten expectations are ground truth). Look for rules that
shadow narrower ones and for principles of the constitution no scenario tested. If you
suspect a gap, add scenarios to probe it ("newScenarios", same form as the scenarios: with
"${{workspace}}" and "${{outside}}" placeholders). Give "verdict": "pass" only when the
compiled rules implement the constitution faithfully.

Answer with one JSON object: {{"verdict": "pass"|"fail", "analysis": ..., "newScenarios": [...]}}

Results:
{json.dumps(table, indent=1)}

Compiled rules:
{json.dumps(compiled, indent=1)}

The constitution:
{constitution}
"""


def verify(
    llm: LLM,
    constitution: str,
    rules: Sequence[CompiledRule],
    engine: PolicyEngine,
    scenarios: Sequence[Scenario],
    places: dict[str, str],
    on_round: Callable[[int, list[Result]], None] | None = None,
) -> Verification:
    """Run, judge, probe: at most :data:`MAX_ROUNDS` rounds."""
    verification = Verification()
    batch = list(scenarios)
    for round_ in range(1, MAX_ROUNDS + 1):
        results = execute(engine, batch, places)
        if on_round is not None:
            on_round(round_, results)
        answer = ask(
            llm,
            SYSTEM,
            judge_prompt(constitution, rules, results, round_),
            JudgeAnswer,
            what=f"judging the policy (round {round_})",
        )
        verification.rounds.append((results, answer))
        batch = [s.model_copy(update={"source": "verifier"}) for s in answer.new_scenarios]
        if not batch:
            break
    handwritten_ok = not any(r.scenario.source == "handwritten" for r in verification.failures)
    verification.passed = handwritten_ok and verification.rounds[-1][1].verdict == "pass"
    return verification
