"""The offline policy pipeline end to end: the real reference servers started in
their sandboxes, the real ``anthropic`` client, its HTTP transport replaying recorded
answers (tests/llm_replay.py), the real engine in the verifier. (Its parts in process:
``tests/unit/policy/pipeline/test_policy_compiler.py``.)"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from launcher.authoring.compile import CompileOptions, Progress, compile_policy
from policy.loader import bundled_policy_dir
from policy.pipeline.llm import CachedLLM
from policy.pipeline.scenarios import HANDWRITTEN
from tests.llm_replay import Replay
from tests.support.cli import ironcurtain
from tests.support.home import Home, in_process
from tests.support.marks import needs_bwrap

BUNDLED = bundled_policy_dir()


@pytest.fixture
def env(user: Home, monkeypatch: pytest.MonkeyPatch) -> Home:
    """The in-process commands see this user's XDG directories (and no real API key)."""
    return in_process(user, monkeypatch)


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


@needs_bwrap
def test_annotate_tools_with_the_llm_and_a_malformed_first_answer(env: Home) -> None:
    from launcher.authoring.annotate import annotate_tools

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
    from launcher.authoring.annotate import annotate_tools

    out = env.root / "annotations.json"
    replay = Replay("garbage")
    llm = CachedLLM(replay.llm(), env.root / "cache")
    assert annotate_tools(("time",), False, False, str(out), None, llm=llm) == 1
    assert replay.requests == ["annotate-time", "annotate-time-retry", "annotate-time-retry"]
    err = capsys.readouterr().err
    assert "still unusable after 3 attempts" in err and "nothing was written" in err
    assert not out.exists()


@needs_bwrap
def test_the_output_may_not_overlap_what_the_servers_may_use(env: Home) -> None:
    from launcher.shared.user_errors import UsageError

    workspaces = Path(os.environ["XDG_STATE_HOME"]) / "ironcurtain" / "workspaces"
    with pytest.raises(UsageError, match="overlaps"):
        _compile(Replay("bundled"), workspaces / "policy", env)
