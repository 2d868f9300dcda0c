"""The handwritten scenarios (and the structural invariants of the policy), run
through the real engine with the bundled policy, on a real temporary directory tree."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from policy import schema
from policy.decision import StructuralConfig
from policy.engine import PolicyEngine
from policy.loader import bundled_policy_dir, load_policy_dir
from policy.models import ServerAnnotations, ToolAnnotation, ToolAnnotationsFile


@dataclass(frozen=True)
class Env:
    root: Path
    ws: Path
    engine: PolicyEngine


@pytest.fixture
def env(tmp_path: Path) -> Env:
    state = tmp_path / "state"
    ws = state / "workspaces" / "s1"
    other_ws = state / "workspaces" / "s0"
    for d in (ws / "sub", other_ws, tmp_path / "outside", tmp_path / "conf" / "policy"):
        d.mkdir(parents=True)
    (ws / "notes.txt").write_text("hi")
    (ws / "logs").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("s")
    (ws / "escape").symlink_to(tmp_path / "outside")
    files = load_policy_dir(bundled_policy_dir())
    extra = schema.validate(
        ToolAnnotation,
        {
            "toolName": "delete_file",
            "serverName": "filesystem",
            "effect": "delete",
            "sideEffects": True,
            "args": {"path": ["delete-path"]},
        },
    )
    servers = dict(files.annotations.servers)
    servers["filesystem"] = ServerAnnotations(tools=[*servers["filesystem"].tools, extra])
    annotations = ToolAnnotationsFile(servers=servers)
    structural = StructuralConfig(
        protected={
            str(tmp_path / "conf" / "mcp-servers.json"): "the server configuration",
            str(tmp_path / "conf" / "policy"): "the policy directory",
            str(ws / "logs" / "audit.jsonl"): "the audit log",
        },
        state_dir=str(state),
        exempt=(str(ws),),
    )
    engine = PolicyEngine(files.policy, annotations, structural, variables={"workspace": str(ws)})
    return Env(tmp_path, ws, engine)


# (description, server, tool, arguments with {ws} and {root} placeholders, decision, rule)
SCENARIOS: list[tuple[str, str, str, dict[str, object], str, str]] = [
    (
        "read inside workspace",
        "filesystem",
        "read_file",
        {"path": "{ws}/notes.txt"},
        "allow",
        "allow-read-in-workspace",
    ),
    (
        "relative read resolves in the workspace",
        "filesystem",
        "read_file",
        {"path": "notes.txt"},
        "allow",
        "allow-read-in-workspace",
    ),
    (
        "read outside workspace",
        "filesystem",
        "read_file",
        {"path": "{root}/outside/secret.txt"},
        "deny",
        "deny-read-elsewhere",
    ),
    (
        "read ssh key via ~",
        "filesystem",
        "read_file",
        {"path": "~/.ssh/id_rsa"},
        "deny",
        "deny-read-elsewhere",
    ),
    (
        "read several, one outside",
        "filesystem",
        "read_multiple_files",
        {"paths": ["{ws}/notes.txt", "{root}/outside/secret.txt"]},
        "deny",
        "deny-read-elsewhere",
    ),
    (
        "write inside workspace",
        "filesystem",
        "write_file",
        {"path": "{ws}/new.txt", "content": "x"},
        "allow",
        "allow-write-in-workspace",
    ),
    (
        "write outside workspace",
        "filesystem",
        "write_file",
        {"path": "{root}/outside/new.txt", "content": "x"},
        "escalate",
        "escalate-write-elsewhere",
    ),
    (
        "delete is never allowed",
        "filesystem",
        "delete_file",
        {"path": "{ws}/notes.txt"},
        "deny",
        "deny-delete-operations",
    ),
    (
        "traversal out of the workspace",
        "filesystem",
        "read_file",
        {"path": "{ws}/sub/../../../../outside/secret.txt"},
        "deny",
        "deny-read-elsewhere",
    ),
    (
        "traversal into /etc",
        "filesystem",
        "read_file",
        {"path": "{ws}/" + "../" * 12 + "etc/passwd"},
        "deny",
        "structural-system-root",
    ),
    (
        "read /etc/passwd",
        "filesystem",
        "read_file",
        {"path": "/etc/passwd"},
        "deny",
        "structural-system-root",
    ),
    (
        "list /proc",
        "filesystem",
        "list_directory",
        {"path": "/proc/1"},
        "deny",
        "structural-system-root",
    ),
    (
        "symlink escape read",
        "filesystem",
        "read_file",
        {"path": "{ws}/escape/secret.txt"},
        "deny",
        "deny-read-elsewhere",
    ),
    (
        "symlink escape write",
        "filesystem",
        "write_file",
        {"path": "{ws}/escape/planted.txt", "content": "x"},
        "escalate",
        "escalate-write-elsewhere",
    ),
    (
        "protected: policy directory",
        "filesystem",
        "read_file",
        {"path": "{root}/conf/policy/compiled-policy.json"},
        "deny",
        "structural-protected-path",
    ),
    (
        "protected: config file write",
        "filesystem",
        "write_file",
        {"path": "{root}/conf/mcp-servers.json", "content": "{}"},
        "deny",
        "structural-protected-path",
    ),
    (
        "protected: audit log inside the workspace",
        "filesystem",
        "write_file",
        {"path": "{ws}/logs/audit.jsonl", "content": ""},
        "deny",
        "structural-protected-path",
    ),
    (
        "protected: moving the directory that holds the audit log",
        "filesystem",
        "move_file",
        {"source": "{ws}/logs", "destination": "{ws}/old-logs"},
        "deny",
        "structural-protected-path",
    ),
    (
        "protected: listing the directory holding the audit log is fine",
        "filesystem",
        "list_directory",
        {"path": "{ws}/logs"},
        "allow",
        "allow-read-in-workspace",
    ),
    (
        "protected: found by the heuristic in a none argument",
        "filesystem",
        "write_file",
        {"path": "{ws}/x", "content": "{root}/conf/policy/../policy/compiled-policy.json"},
        "deny",
        "structural-protected-path",
    ),
    (
        "protected: another session's workspace in the state dir",
        "filesystem",
        "read_file",
        {"path": "{root}/state/workspaces/s0"},
        "deny",
        "structural-protected-path",
    ),
    (
        "protected: deleting an ancestor of the state dir",
        "filesystem",
        "delete_file",
        {"path": "{root}"},
        "deny",
        "structural-protected-path",
    ),
    (
        "writing into the workspace that holds the audit log is fine",
        "filesystem",
        "create_directory",
        {"path": "{ws}/logs"},
        "allow",
        "allow-write-in-workspace",
    ),
    (
        "move workspace to workspace",
        "filesystem",
        "move_file",
        {"source": "{ws}/notes.txt", "destination": "{ws}/sub/notes.txt"},
        "allow",
        "allow-move-within-workspace",
    ),
    (
        "move workspace to outside",
        "filesystem",
        "move_file",
        {"source": "{ws}/notes.txt", "destination": "{root}/outside/notes.txt"},
        "escalate",
        "escalate-move-out-of-workspace",
    ),
    (
        "move outside to workspace",
        "filesystem",
        "move_file",
        {"source": "{root}/outside/secret.txt", "destination": "{ws}/secret.txt"},
        "deny",
        "deny-move-elsewhere",
    ),
    (
        "move outside to outside",
        "filesystem",
        "move_file",
        {"source": "{root}/outside/secret.txt", "destination": "{root}/outside/b.txt"},
        "deny",
        "deny-move-elsewhere",
    ),
    (
        "side-effect-free tool",
        "filesystem",
        "list_allowed_directories",
        {},
        "allow",
        "allow-side-effect-free-tools",
    ),
    (
        "time needs no paths",
        "time",
        "get_current_time",
        {"timezone": "Europe/Paris"},
        "allow",
        "allow-side-effect-free-tools",
    ),
    (
        "unknown tool",
        "filesystem",
        "format_disk",
        {"path": "{ws}"},
        "deny",
        "structural-unknown-tool",
    ),
    (
        "unknown server",
        "nope",
        "read_file",
        {"path": "{ws}/notes.txt"},
        "deny",
        "structural-unknown-tool",
    ),
    (
        "git status in workspace",
        "git",
        "git_status",
        {"repo_path": "{ws}"},
        "allow",
        "allow-read-in-workspace",
    ),
    (
        "git commit in workspace",
        "git",
        "git_commit",
        {"repo_path": "{ws}", "message": "/etc/x"},
        "allow",
        "allow-write-in-workspace",
    ),
    (
        "git log outside",
        "git",
        "git_log",
        {"repo_path": "{root}/outside"},
        "deny",
        "deny-read-elsewhere",
    ),
    (
        "missing path argument matches no paths rule",
        "filesystem",
        "read_file",
        {},
        "deny",
        "deny-read-elsewhere",
    ),
]


def _fill(value: object, env: Env) -> object:
    if isinstance(value, str):
        return value.replace("{ws}", str(env.ws)).replace("{root}", str(env.root))
    if isinstance(value, list):
        return [_fill(v, env) for v in value]
    return value


@pytest.mark.parametrize(
    ("server", "tool", "args", "decision", "rule"),
    [s[1:] for s in SCENARIOS],
    ids=[s[0] for s in SCENARIOS],
)
def test_scenario(
    env: Env, server: str, tool: str, args: dict[str, object], decision: str, rule: str
) -> None:
    filled = {k: _fill(v, env) for k, v in args.items()}
    result, _ = env.engine.decide(server, tool, filled, cwd=str(env.ws))
    assert (result.decision, result.rule) == (decision, rule), result.reason


def test_reasons_never_quote_argument_values(env: Env) -> None:
    for _, server, tool, args, _, _ in SCENARIOS:
        filled = {k: _fill(v, env) for k, v in args.items()}
        result, _ = env.engine.decide(server, tool, filled, cwd=str(env.ws))
        for value in filled.values():
            for text in value if isinstance(value, list) else [value]:
                if isinstance(text, str) and len(text) > 3:
                    assert text not in result.reason


def test_structural_invariants_hold_with_an_allow_everything_policy(env: Env) -> None:
    from policy.models import CompiledPolicyFile

    allow_all = schema.validate(
        CompiledPolicyFile,
        {"rules": [{"name": "allow-all", "if": {}, "then": "allow", "reason": "test"}]},
    )
    files = load_policy_dir(bundled_policy_dir())
    engine = PolicyEngine(allow_all, files.annotations, env.engine.structural)
    protected = str(env.root / "conf" / "policy" / "x")
    assert engine.decide("filesystem", "read_file", {"path": protected})[0].decision == "deny"
    assert engine.decide("filesystem", "read_file", {"path": "/etc/shadow"})[0].decision == "deny"
    assert engine.decide("filesystem", "nope", {})[0].decision == "deny"
    assert engine.decide("filesystem", "read_file", {"path": "/tmp"})[0].decision == "allow"


def test_get_annotation(env: Env) -> None:
    ann = env.engine.get_annotation("filesystem", "move_file")
    assert ann is not None and ann.args["source"] == ["read-path", "delete-path"]
    assert env.engine.get_annotation("filesystem", "nope") is None


def test_forwarded_arguments_are_canonical(env: Env) -> None:
    _, transport = env.engine.decide(
        "filesystem", "write_file", {"path": "sub/../new.txt", "content": "../x"}, cwd=str(env.ws)
    )
    assert transport == {"path": os.path.join(env.ws, "new.txt"), "content": "../x"}


def test_a_workspace_containing_the_state_dir_exempts_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    state = home / ".local" / "state" / "ironcurtain"
    (state / "audit").mkdir(parents=True)
    files = load_policy_dir(bundled_policy_dir())
    structural = StructuralConfig(state_dir=str(state), exempt=(str(home),))
    engine = PolicyEngine(
        files.policy, files.annotations, structural, variables={"workspace": str(home)}
    )
    audit = str(state / "audit" / "old-session.jsonl")
    decision, _ = engine.decide("filesystem", "read_file", {"path": audit})
    assert decision.rule == "structural-protected-path"
    decision, _ = engine.decide("filesystem", "read_file", {"path": str(home / "notes.txt")})
    assert decision.decision == "allow"
