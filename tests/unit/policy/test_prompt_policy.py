"""Prompts are decided by the policy as tools are: the real engine, the bundled policy and
annotations, a real directory tree. Each protection is tested with the attack it stops and
with its control."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from policy import schema
from policy.decision import StructuralConfig
from policy.engine import PolicyEngine
from policy.errors import PolicyFileError
from policy.loader import bundled_policy_dir, load_policy_dir
from policy.models import CompiledPolicyFile, ToolAnnotationsFile


@dataclass(frozen=True)
class Env:
    root: Path
    ws: Path
    engine: PolicyEngine


def _annotation(key: str, name: str, effect: str, args: dict[str, list[str]]) -> dict[str, Any]:
    return {key: name, "serverName": "filesystem", "effect": effect, "sideEffects": True,
            "args": args}  # fmt: skip


def _with_filesystem_prompts(annotations: ToolAnnotationsFile) -> ToolAnnotationsFile:
    """The bundled annotations, and two prompts on the filesystem server: ``summarize``
    (reads a file) and ``read_file`` (the name of a tool there, writing a file)."""
    data = schema.dump(annotations, exclude_none=False)
    data["servers"]["filesystem"]["prompts"] = [
        _annotation("promptName", "summarize", "read", {"path": ["read-path"], "style": ["none"]}),
        _annotation("promptName", "read_file", "write", {"path": ["write-path"]}),
    ]
    return schema.validate(ToolAnnotationsFile, data)


@pytest.fixture
def env(tmp_path: Path) -> Env:
    state = tmp_path / "state"
    ws = state / "workspaces" / "s1"
    for d in (ws / "sub", tmp_path / "outside", tmp_path / "conf" / "policy"):
        d.mkdir(parents=True)
    (ws / "notes.txt").write_text("hi")
    (tmp_path / "outside" / "secret.txt").write_text("s")
    (ws / "escape").symlink_to(tmp_path / "outside")
    files = load_policy_dir(bundled_policy_dir())
    structural = StructuralConfig(
        protected={
            str(tmp_path / "conf" / "mcp-servers.json"): "the server configuration",
            str(tmp_path / "conf" / "policy"): "the policy directory",
        },
        state_dir=str(state),
        exempt=(str(ws),),
    )
    engine = PolicyEngine(
        files.policy,
        _with_filesystem_prompts(files.annotations),
        structural,
        {"fetch": ["*"], "filesystem": []},
        {"workspace": str(ws)},
    )
    return Env(tmp_path, ws, engine)


# -- a prompt without an annotation is never called --------------------------------------


def test_an_unannotated_prompt_is_denied_and_the_reason_names_it(env: Env) -> None:
    decision, _ = env.engine.decide_prompt("fetch", "fetch_everything", {"url": "https://a.org"})
    assert decision.decision == "deny"
    assert decision.rule == "structural-unknown-prompt"
    assert "'fetch_everything'" in decision.reason and "'fetch'" in decision.reason
    # A tool's annotation is no prompt's: the tool write_file is annotated, the prompt is not.
    assert env.engine.get_annotation("filesystem", "write_file") is not None
    decision, _ = env.engine.decide_prompt("filesystem", "write_file", {"path": str(env.ws)})
    assert decision.rule == "structural-unknown-prompt"
    # Nor is a prompt's annotation a tool's.
    assert env.engine.get_prompt_annotation("filesystem", "summarize") is not None
    assert env.engine.get_annotation("filesystem", "summarize") is None
    decision, _ = env.engine.decide("filesystem", "summarize", {"path": str(env.ws)})
    assert decision.rule == "structural-unknown-tool"
    # Control: the annotated prompt of the same server is decided by the rules.
    decision, _ = env.engine.decide_prompt(
        "filesystem", "summarize", {"path": str(env.ws / "notes.txt")}
    )
    assert (decision.decision, decision.rule) == ("allow", "allow-read-in-workspace")


def test_an_unannotated_prompt_pointing_at_a_protected_path_says_so(env: Env) -> None:
    target = str(env.root / "conf" / "policy" / "compiled-policy.json")
    decision, _ = env.engine.decide_prompt("filesystem", "nope", {"file": target})
    assert decision.rule == "structural-protected-path"


def test_the_prompt_annotation_carries_its_pii_fields() -> None:
    data = {"servers": {"crm": {"tools": [], "prompts": [
        {"promptName": "letter", "serverName": "crm", "effect": "read", "sideEffects": False,
         "args": {"email": ["none"]}, "piiFields": ["email"]}]}}}  # fmt: skip
    engine = PolicyEngine(CompiledPolicyFile(rules=[]), schema.validate(ToolAnnotationsFile, data))
    annotation = engine.get_prompt_annotation("crm", "letter")
    assert annotation is not None and annotation.pii_fields == ["email"]
    assert engine.get_prompt_annotation("crm", "nope") is None


# -- the fetch prompt is decided exactly as the fetch tool ---------------------------------

WS = {"workspace": "/nonexistent/workspace"}
URLS = [
    "https://example.com/",
    "https://EXAMPLE.com./page?q=1",
    "http://user:pw@example.org:8080/x",
    "http://169.254.169.254/latest/meta-data",  # an IP literal: `*` never matches one
    "http://[::1]/",
    "http://127.0.0.1:22/",
    "file:///etc/passwd",
    "not a url",
    "",
]


@pytest.mark.parametrize("allowed", [["*"], ["example.com"], []])
@pytest.mark.parametrize("url", URLS)
def test_the_fetch_prompt_is_decided_as_the_fetch_tool(url: str, allowed: list[str]) -> None:
    files = load_policy_dir(bundled_policy_dir())
    engine = PolicyEngine(files.policy, files.annotations, None, {"fetch": allowed}, WS)
    tool, tool_forwarded = engine.decide("fetch", "fetch", {"url": url})
    prompt, forwarded = engine.decide_prompt("fetch", "fetch", {"url": url})
    assert prompt == tool
    assert forwarded == tool_forwarded  # the same canonical URL reaches the server


def test_a_url_outside_the_allowed_domains_is_escalated_for_the_prompt_too() -> None:
    files = load_policy_dir(bundled_policy_dir())
    engine = PolicyEngine(files.policy, files.annotations, None, {"fetch": ["example.com"]}, WS)
    decision, _ = engine.decide_prompt("fetch", "fetch", {"url": "https://evil.example.net/"})
    assert (decision.decision, decision.rule) == ("escalate", "structural-untrusted-domain")
    # Look-alikes are parsed, not string-matched.
    for url in ("https://example.com@evil.net/", "https://evilexample.com/"):
        assert engine.decide_prompt("fetch", "fetch", {"url": url})[0].decision == "escalate"
    # Control.
    decision, _ = engine.decide_prompt("fetch", "fetch", {"url": "https://example.com/a"})
    assert (decision.decision, decision.rule) == ("allow", "allow-fetch-web-domains")


# -- path-role prompt arguments ------------------------------------------------------------


def test_a_path_argument_of_a_prompt_gets_every_path_protection(env: Env) -> None:
    decide = env.engine.decide_prompt
    ws, root = env.ws, env.root
    cases = [
        (str(root / "conf" / "policy" / "compiled-policy.json"), "structural-protected-path"),
        (str(root / "conf" / "mcp-servers.json"), "structural-protected-path"),
        (f"{ws}/../../../conf/policy", "structural-protected-path"),  # traversal
        (str(root / "state" / "workspaces" / "s0" / "x"), "structural-protected-path"),
        ("/etc/shadow", "structural-system-root"),
        ("/proc/self/environ", "structural-system-root"),
        (f"{ws}/escape/secret.txt", "deny-read-elsewhere"),  # a symlink out
        (f"{ws}/sub/../../../../outside/secret.txt", "deny-read-elsewhere"),
    ]
    for path, rule in cases:
        decision, _ = decide("filesystem", "summarize", {"path": path, "style": "short"})
        assert (decision.decision, decision.rule) == ("deny", rule), path
    # A path argument that is not a string cannot be checked: refused.
    for bad in (["/etc/shadow", 1], {"p": "/etc"}, 3):
        decision, _ = decide("filesystem", "summarize", {"path": bad})
        assert decision.rule == "structural-path-shape", bad
    # The other argument has no path role, but a protected path in it is still refused.
    protected = str(root / "conf" / "policy")
    decision, _ = decide("filesystem", "summarize", {"path": f"{ws}/notes.txt", "style": protected})
    assert decision.rule == "structural-protected-path"
    # Control, and what is forwarded: the canonical path.
    decision, forwarded = decide(
        "filesystem", "summarize", {"path": "sub/../notes.txt", "style": "short"}, cwd=str(ws)
    )
    assert decision.decision == "allow"
    assert forwarded == {"path": str(ws / "notes.txt"), "style": "short"}


# -- rules: tools and prompts are separate namespaces -------------------------------------


def _engine(rules: list[dict[str, Any]]) -> PolicyEngine:
    annotations = schema.validate(ToolAnnotationsFile, {"servers": {"s": {
        "tools": [{"toolName": "fetch", "serverName": "s", "effect": "read",
                   "sideEffects": True, "args": {"url": ["fetch-url"]}}],
        "prompts": [{"promptName": "fetch", "serverName": "s", "effect": "read",
                     "sideEffects": True, "args": {"url": ["fetch-url"]}}],
    }}})  # fmt: skip
    policy = schema.validate(CompiledPolicyFile, {"rules": rules})
    return PolicyEngine(policy, annotations, None, {"s": ["*"]})


def _rule(name: str, condition: dict[str, Any], then: str = "allow") -> dict[str, Any]:
    return {"name": name, "if": condition, "then": then, "reason": name}


ARGS = {"url": "https://example.com/"}


def test_a_rule_naming_a_tool_never_matches_a_prompt_of_the_same_name() -> None:
    engine = _engine([_rule("allow-the-fetch-tool", {"tool": ["fetch"]})])
    assert engine.decide("s", "fetch", ARGS)[0].rule == "allow-the-fetch-tool"
    prompt = engine.decide_prompt("s", "fetch", ARGS)[0]
    assert (prompt.decision, prompt.rule) == ("deny", "default-deny")
    # A deny naming the tool does not shadow a later allow for the prompt either.
    engine = _engine(
        [_rule("deny-the-tool", {"tool": ["fetch"]}, "deny"), _rule("allow", {"effect": ["read"]})]
    )
    assert engine.decide("s", "fetch", ARGS)[0].rule == "deny-the-tool"
    assert engine.decide_prompt("s", "fetch", ARGS)[0].rule == "allow"


def test_a_rule_naming_a_prompt_never_matches_a_tool_of_the_same_name() -> None:
    engine = _engine([_rule("allow-the-fetch-prompt", {"prompt": ["fetch"]})])
    assert engine.decide_prompt("s", "fetch", ARGS)[0].rule == "allow-the-fetch-prompt"
    assert engine.decide("s", "fetch", ARGS)[0].rule == "default-deny"


def test_a_rule_naming_both_applies_to_each_it_names_and_one_naming_neither_to_all() -> None:
    both = _engine([_rule("both", {"tool": ["fetch"], "prompt": ["fetch"]})])
    assert both.decide("s", "fetch", ARGS)[0].rule == "both"
    assert both.decide_prompt("s", "fetch", ARGS)[0].rule == "both"
    other = _engine([_rule("other-names", {"tool": ["get"], "prompt": ["get"]})])
    assert other.decide_prompt("s", "fetch", ARGS)[0].rule == "default-deny"
    by_effect = _engine([_rule("reads", {"effect": ["read"], "sideEffects": True})])
    assert by_effect.decide("s", "fetch", ARGS)[0].rule == "reads"
    assert by_effect.decide_prompt("s", "fetch", ARGS)[0].rule == "reads"
    by_domain = _engine(
        [_rule("named", {"domains": {"roles": ["fetch-url"], "allowed": ["example.com"]}})]
    )
    assert by_domain.decide_prompt("s", "fetch", ARGS)[0].rule == "named"
    assert by_domain.decide_prompt("s", "fetch", {"url": "https://a.org/"})[0].rule == (
        "default-deny"
    )


def test_the_bundled_rules_apply_to_prompts_by_effect_and_role(env: Env) -> None:
    # summarize (read, read-path) meets the read rules; the prompt read_file (write,
    # write-path) meets the write rules, not the tool read_file's.
    decide = env.engine.decide_prompt
    inside, outside = str(env.ws / "notes.txt"), str(env.root / "outside" / "secret.txt")
    assert decide("filesystem", "summarize", {"path": inside})[0].rule == "allow-read-in-workspace"
    assert decide("filesystem", "summarize", {"path": outside})[0].rule == "deny-read-elsewhere"
    assert decide("filesystem", "read_file", {"path": inside})[0].rule == "allow-write-in-workspace"
    decision, _ = decide("filesystem", "read_file", {"path": outside})
    assert (decision.decision, decision.rule) == ("escalate", "escalate-write-elsewhere")
    tool, _ = env.engine.decide("filesystem", "read_file", {"path": outside})
    assert tool.rule == "deny-read-elsewhere"


# -- the annotations file ------------------------------------------------------------------


def _policy_dir(tmp_path: Path, servers: dict[str, Any]) -> Path:
    (tmp_path / "tool-annotations.json").write_text(json.dumps({"servers": servers}))
    (tmp_path / "compiled-policy.json").write_text('{"rules": []}')
    return tmp_path


def test_prompts_are_optional_and_bad_ones_are_named(tmp_path: Path) -> None:
    tool = {"toolName": "t", "serverName": "s", "effect": "read", "sideEffects": False}
    prompt = {"promptName": "p", "serverName": "s", "effect": "read", "sideEffects": False,
              "args": {"topic": ["none"]}}  # fmt: skip
    files = load_policy_dir(_policy_dir(tmp_path, {"s": {"tools": [tool]}}))
    assert files.annotations.servers["s"].prompts == []
    files = load_policy_dir(_policy_dir(tmp_path, {"s": {"tools": [tool], "prompts": [prompt]}}))
    assert files.annotations.servers["s"].prompts[0].prompt_name == "p"
    bad = [
        ({**prompt, "args": {"topic": ["url"]}}, "$.servers.s.prompts[0].args.topic[0]"),
        ({**prompt, "effect": "print"}, "$.servers.s.prompts[0].effect"),
        ({k: v for k, v in prompt.items() if k != "promptName"}, "$.servers.s.prompts[0]"),
        ({**prompt, "serverName": "t"}, "$.servers.s.prompts[0].serverName"),
    ]
    for entry, where in bad:
        with pytest.raises(PolicyFileError) as caught:
            load_policy_dir(_policy_dir(tmp_path, {"s": {"tools": [tool], "prompts": [entry]}}))
        assert where in str(caught.value), str(caught.value)
    with pytest.raises(PolicyFileError, match=r"prompts\[1\].*'p' is annotated twice"):
        load_policy_dir(_policy_dir(tmp_path, {"s": {"tools": [], "prompts": [prompt, prompt]}}))
    # A tool and a prompt may share a name.
    same = {**prompt, "promptName": "t"}
    load_policy_dir(_policy_dir(tmp_path, {"s": {"tools": [tool], "prompts": [same]}}))
