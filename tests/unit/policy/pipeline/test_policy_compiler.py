"""The policy pipeline's parts in process, on recorded or scripted answers: a handwritten
scenario's failure fails whatever the judge says, ``ask`` feeds back what was wrong and gives
up after a bound, compiled rules may not do the engine's structural work, the commands say
what they need without an API key, and progress is shown on a terminal only. (The pipeline
end to end, with the real reference servers: ``tests/sandbox/test_compile_policy.py``.)"""

from __future__ import annotations

import json
from typing import Any

import pytest

from launcher.authoring.compile import Progress
from policy import schema
from policy.loader import bundled_policy_dir
from policy.pipeline.llm import LLMError, ask
from policy.pipeline.scenarios import HANDWRITTEN
from tests.llm_replay import Replay
from tests.support.cli import ironcurtain
from tests.support.home import Home, in_process
from tests.support.paths import TESTS

BUNDLED = bundled_policy_dir()


@pytest.fixture
def env(user: Home, monkeypatch: pytest.MonkeyPatch) -> Home:
    """The in-process commands see this user's XDG directories (and no real API key)."""
    return in_process(user, monkeypatch)


def test_a_handwritten_failure_fails_even_when_the_judge_says_pass(env: Home) -> None:
    """Handwritten scenarios are ground truth: the judge cannot wave them through."""
    from policy.engine import PolicyEngine
    from policy.loader import load_policy_dir
    from policy.models import CompiledPolicyFile
    from policy.pipeline.scenarios import applicable
    from policy.pipeline.verifier import scenario_tree, verify

    files = load_policy_dir(BUNDLED)
    wrong = json.loads((TESTS / "data" / "llm" / "wrong-rule" / "compile.json").read_text())
    rules = json.loads(wrong["content"][0]["text"])["rules"]
    policy = schema.validate(CompiledPolicyFile, {"rules": rules})
    judge = Replay("bundled")  # judge-1 says "pass"
    with scenario_tree() as places:
        engine = PolicyEngine(policy, files.annotations, variables=places)
        flat = [a for s in files.annotations.servers.values() for a in s.tools]
        result = verify(
            judge.llm(), "c", policy.rules, engine, applicable(HANDWRITTEN, flat), places
        )
    assert not result.passed
    assert [r.scenario.description for r in result.failures] == [
        "read outside the workspace",
        "traversal out of the workspace",
        "a symlink out of the workspace",
        "git status outside the workspace",
        # a prompt is decided like a tool: the over-broad read rule lets it read too
        "the fetch prompt on the cloud metadata address",
        "the fetch prompt on a local file",
    ]
    # And with the bundled rules, the same judge and scenarios pass.
    with scenario_tree() as places:
        engine = PolicyEngine(files.policy, files.annotations, variables=places)
        result = verify(
            judge.llm(), "c", files.policy.rules, engine, applicable(HANDWRITTEN, flat), places
        )
    assert result.passed, [(r.scenario.description, r.actual) for r in result.failures]


def test_ask_feeds_back_what_was_wrong_and_gives_up_after_a_bound() -> None:
    from pydantic import BaseModel

    class Answer(BaseModel):
        n: int

    class Scripted:
        model = "m"

        def __init__(self, answers: list[str]) -> None:
            self.answers = answers
            self.prompts: list[str] = []

        def complete(self, system: str, prompt: str) -> str:
            self.prompts.append(prompt)
            return self.answers.pop(0)

    llm = Scripted(['{"n": "x"}', 'sure! {"n": 3}'])
    assert ask(llm, "s", "p", Answer).n == 3
    assert "n: Input should be a valid integer" in llm.prompts[1]
    llm = Scripted(["no"] * 3)
    with pytest.raises(LLMError, match="after 3 attempts"):
        ask(llm, "s", "p", Answer)
    assert len(llm.prompts) == 3


def test_compiled_rules_may_not_do_the_engines_structural_work() -> None:
    from policy.decision import StructuralConfig
    from policy.models import CompiledRule
    from policy.pipeline.compiler import structural_problems

    structural = StructuralConfig(
        protected={"/conf/policy": "the policy directory"},
        state_dir="/state",
        exempt=("/state/workspaces/s1",),
    )

    def rule(name: str, within: str | None = None) -> CompiledRule:
        condition: dict[str, Any] = {"effect": ["read"]}
        if within:
            condition["paths"] = {"roles": ["read-path"], "within": within}
        return schema.validate(
            CompiledRule, {"name": name, "if": condition, "then": "deny", "reason": "r"}
        )

    variables = {"workspace": "/state/workspaces/s1"}
    assert structural_problems([rule("a"), rule("b", "${workspace}")], structural, variables) == []
    bad = [
        rule("structural-protect-policy"),
        rule("c", "/conf/policy"),
        rule("d", "/etc"),
        rule("e", "/state/workspaces/s0"),
    ]
    problems = structural_problems(bad, structural, variables)
    assert len(problems) == 4, problems


def test_the_commands_say_what_they_need_without_an_api_key(user: Home) -> None:
    user.env.pop("ANTHROPIC_API_KEY", None)
    for args in (("compile-policy",), ("annotate-tools", "--all")):
        done = ironcurtain(user, *args)
        assert done.returncode == 2, done.stderr
        assert "ANTHROPIC_API_KEY is not set" in done.stderr
        assert "--heuristic" in done.stderr and "Traceback" not in done.stderr


def test_progress_is_shown_on_a_terminal_and_quiet_otherwise(
    capsys: pytest.CaptureFixture[str],
) -> None:
    Progress(enabled=True).step("annotating the tools of git")
    Progress().step("not a terminal here")  # pytest's stderr is not a tty
    err = capsys.readouterr().err
    assert "annotating the tools of git" in err and "not a terminal" not in err
