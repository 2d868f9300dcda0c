"""The offline policy pipeline end to end: the real reference servers started in
their sandboxes, the real ``anthropic`` client, its HTTP transport replaying recorded
answers (tests/llm_replay.py), the real engine in the verifier."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from launcher.pipeline.compile import CompileOptions, Progress, compile_policy
from policy import schema
from policy.llm import CachedLLM, LLMError, ask
from policy.loader import bundled_policy_dir
from policy.scenarios import HANDWRITTEN
from tests.llm_replay import Replay
from tests.support.cli import ironcurtain
from tests.support.home import Home
from tests.support.marks import needs_bwrap

BUNDLED = bundled_policy_dir()


@pytest.fixture
def env(user: Home, monkeypatch: pytest.MonkeyPatch) -> Iterator[Home]:
    """The in-process commands see this user's XDG directories (and no real API key)."""
    for key in ("XDG_STATE_HOME", "XDG_CONFIG_HOME"):
        monkeypatch.setenv(key, user.env[key])
    monkeypatch.setenv("XDG_CACHE_HOME", str(user.root / "cache"))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    yield user


def _compile(replay: Replay, out: Path, user: Home, force: bool = False, **kw: Any) -> int:
    llm = CachedLLM(replay.llm(), user.root / "cache", force=force)
    opts = CompileOptions(output=str(out), **kw)
    return compile_policy(opts, llm=llm, progress=Progress(enabled=False))


def _rules(path: Path) -> list[dict[str, Any]]:
    return list(json.loads(path.read_text())["rules"])


def _tools(path: Path) -> dict[str, list[dict[str, Any]]]:
    """Each server's tool and prompt annotations, without comments and draft marks."""
    data = json.loads(path.read_text())["servers"]
    return {
        server: [
            {k: v for k, v in t.items() if k not in ("comment", "draft")}
            for t in (*entry["tools"], *entry.get("prompts", ()))
        ]
        for server, entry in data.items()
    }


@needs_bwrap
def test_the_bundled_policy_is_what_the_pipeline_makes_and_unchanged_inputs_ask_nothing(
    env: Home, capsys: pytest.CaptureFixture[str]
) -> None:
    out = env.root / "generated"
    replay = Replay("bundled")
    assert _compile(replay, out, env) == 0
    # The compiled rules agree with the bundled config's sandboxes.
    assert "warning" not in capsys.readouterr().err
    # One question per server, then the compiler, the scenarios and one judge round.
    assert replay.requests == [
        "annotate-filesystem",
        "annotate-git",
        "annotate-time",
        "annotate-fetch",
        "compile",
        "scenarios",
        "judge-1",
    ]
    # The shipped artifacts and the pipeline agree.
    assert _rules(out / "compiled-policy.json") == _rules(BUNDLED / "compiled-policy.json")
    assert _tools(out / "tool-annotations.json") == _tools(BUNDLED / "tool-annotations.json")
    generated = json.loads((out / "compiled-policy.json").read_text())
    assert generated["constitutionHash"].startswith("sha256:")
    scenarios = json.loads((out / "test-scenarios.json").read_text())["scenarios"]
    sources = [s["source"] for s in scenarios]
    assert sources.count("handwritten") == len(HANDWRITTEN)  # always in, every one
    assert sources.count("generated") == 3
    first = {p.name: p.read_text() for p in out.iterdir()}
    # What it wrote is a policy directory `run` and `check` take.
    done = ironcurtain(
        env,
        "check",
        "filesystem",
        "write_file",
        "--args",
        json.dumps({"path": "/tmp/elsewhere.txt", "content": "x"}),
        "--policy-dir",
        str(out),
    )
    assert done.returncode == 0 and "escalate-write-elsewhere" in done.stdout, done.stderr
    assert "warning" not in done.stdout

    # Nothing changed: every answer comes from the cache, no request goes out.
    again = Replay("bundled")
    assert _compile(again, out, env) == 0
    assert again.requests == []
    assert (
        _rules(out / "compiled-policy.json") == json.loads(first["compiled-policy.json"])["rules"]
    )

    # --force asks again.
    forced = Replay("bundled")
    assert _compile(forced, out, env, force=True) == 0
    assert len(forced.requests) == 7

    # The user's constitution is an input: adding to it recompiles the rules (the tool
    # annotations, which never see the constitution, still come from the cache).
    user_file = Path(os.environ["XDG_CONFIG_HOME"]) / "ironcurtain" / "constitution-user.md"
    user_file.parent.mkdir(parents=True)
    user_file.write_text("## User-Specific Guidance\n\n- Never fetch web pages.\n")
    changed = Replay("bundled")
    assert _compile(changed, out, env) == 0
    assert changed.requests == ["compile", "scenarios", "judge-1"]


@needs_bwrap
def test_a_wrong_rule_fails_verification_and_nothing_is_overwritten(
    env: Home, capsys: pytest.CaptureFixture[str]
) -> None:
    out = env.root / "generated"
    out.mkdir()
    (out / "compiled-policy.json").write_text('{"rules": []}\n')
    replay = Replay("wrong-rule", "bundled")
    assert _compile(replay, out, env) == 1
    # The judge asked for a probe; it ran in a second round.
    assert replay.requests[-2:] == ["judge-1", "judge-2"]
    err = capsys.readouterr().err
    assert "verification FAILED; nothing was written" in err
    assert "[handwritten] read outside the workspace" in err and "rule allow-reads" in err
    assert "[verifier] read a file outside" in err
    assert sorted(p.name for p in out.iterdir()) == ["compiled-policy.json"]
    assert (out / "compiled-policy.json").read_text() == '{"rules": []}\n'


def test_a_handwritten_failure_fails_even_when_the_judge_says_pass(env: Home) -> None:
    """Handwritten scenarios are ground truth: the judge cannot wave them through."""
    from policy import PolicyEngine, load_policy_dir
    from policy.models import CompiledPolicyFile
    from policy.scenarios import applicable
    from policy.verifier import scenario_tree, verify

    files = load_policy_dir(BUNDLED)
    wrong = json.loads((Path("tests/data/llm/wrong-rule/compile.json")).read_text())
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


@needs_bwrap
def test_annotate_tools_with_the_llm_and_a_malformed_first_answer(env: Home) -> None:
    from launcher.pipeline.annotate import annotate_tools

    out = env.root / "annotations.json"
    replay = Replay("malformed", "bundled")
    llm = CachedLLM(replay.llm(), env.root / "cache")
    assert annotate_tools(("time",), False, False, str(out), None, llm=llm) == 0
    # The first answer left a tool out; it was asked again, with what was wrong.
    assert replay.requests == ["annotate-time", "annotate-time-retry"]
    written = json.loads(out.read_text())
    assert written["reviewed"] is False
    assert _tools(out)["time"] == _tools(BUNDLED / "tool-annotations.json")["time"]
    # The unusable answer was not kept: a fresh run asks once more, then the good one is
    # cached.
    again = Replay("bundled")
    llm = CachedLLM(again.llm(), env.root / "cache")
    assert annotate_tools(("time",), False, False, str(out), None, llm=llm) == 0
    assert again.requests == ["annotate-time"]


@needs_bwrap
def test_an_answer_that_stays_malformed_is_reported_and_nothing_written(
    env: Home, capsys: pytest.CaptureFixture[str]
) -> None:
    from launcher.pipeline.annotate import annotate_tools

    out = env.root / "annotations.json"
    replay = Replay("garbage")
    llm = CachedLLM(replay.llm(), env.root / "cache")
    assert annotate_tools(("time",), False, False, str(out), None, llm=llm) == 1
    assert replay.requests == ["annotate-time", "annotate-time-retry", "annotate-time-retry"]
    err = capsys.readouterr().err
    assert "still unusable after 3 attempts" in err and "nothing was written" in err
    assert not out.exists()


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
    from policy.compiler import structural_problems
    from policy.decision import StructuralConfig
    from policy.models import CompiledRule

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


@needs_bwrap
def test_the_output_may_not_overlap_what_the_servers_may_use(env: Home) -> None:
    from launcher.shared.errors import UsageError

    workspaces = Path(os.environ["XDG_STATE_HOME"]) / "ironcurtain" / "workspaces"
    with pytest.raises(UsageError, match="overlaps"):
        _compile(Replay("bundled"), workspaces / "policy", env)


def test_progress_is_shown_on_a_terminal_and_quiet_otherwise(
    capsys: pytest.CaptureFixture[str],
) -> None:
    Progress(enabled=True).step("annotating the tools of git")
    Progress().step("not a terminal here")  # pytest's stderr is not a tty
    err = capsys.readouterr().err
    assert "annotating the tools of git" in err and "not a terminal" not in err
