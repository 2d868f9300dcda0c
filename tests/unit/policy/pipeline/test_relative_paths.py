"""A path argument relative to the repository a git tool works in (``relativeTo``): judged
where git resolves it (``<repository>/<value>``), forwarded as the server expects it (as
given); the validator's word on path roles (a person's ``none`` kept, a flag never a path);
the heuristic's ``relativeTo`` for the design's git server."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from policy import schema
from policy.decision import StructuralConfig
from policy.engine import PolicyEngine
from policy.loader import load_policy_dir
from policy.models import ServerAnnotations, ToolAnnotation, ToolAnnotationsFile
from policy.pipeline.annotations_file import merge_annotations
from policy.pipeline.heuristic import heuristic_annotation, validate
from tests.support.gitserver import git_server_tools, heuristic_drafts, write_design_policy

TOOLS = git_server_tools()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A workspace holding a repository ``proj`` (README.md, src/a.py) and a README.md of
    its own; a directory ``outside`` next to it with a secret."""
    ws = tmp_path / "ws"
    proj = ws / "proj"
    (proj / "src").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(proj)], check=True)
    (proj / "README.md").write_text("the project\n")
    (proj / "src" / "a.py").write_text("a = 1\n")
    (ws / "README.md").write_text("the workspace\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("secret\n")
    return ws


def _engine(ws: Path, overrides: dict[str, dict[str, Any]] | None = None) -> PolicyEngine:
    files = load_policy_dir(write_design_policy(ws.parent / "policy", str(ws), overrides))
    return PolicyEngine(files.policy, files.annotations, StructuralConfig(), {"git": []})


def _none_for(tool: str, arg: str) -> dict[str, dict[str, Any]]:
    """The override a user without ``relativeTo`` is left with: the argument's role none."""
    draft = heuristic_annotation("git", TOOLS[tool])
    return {tool: {"args": {**draft["args"], arg: ["none"]}, "relativeTo": {}}}


def test_a_repository_relative_path_is_judged_in_the_repository_and_sent_as_given(
    ws: Path,
) -> None:
    engine = _engine(ws)
    proj = str(ws / "proj")
    args = {"path": proj, "object": "HEAD", "filePath": "src/a.py"}
    decision, sent = engine.decide("git", "git_show", args, cwd=str(ws))
    assert decision.decision == "allow"
    assert sent == {"path": proj, "object": "HEAD", "filePath": "src/a.py"}
    _, judged = engine.prepare("git", "git_show", args, cwd=str(ws))
    assert judged["filePath"] == f"{proj}/src/a.py"  # not <workspace>/src/a.py


def test_each_path_of_a_list_is_judged_in_the_repository_a_dash_never_an_option(
    ws: Path,
) -> None:
    engine = _engine(ws)
    proj = str(ws / "proj")
    args = {"path": proj, "paths": ["README.md", "-rf", "src"]}
    decision, sent = engine.decide("git", "git_add", args, cwd=str(ws))
    assert decision.decision == "allow"
    assert sent["paths"] == ["README.md", "./-rf", "src"]
    _, judged = engine.prepare("git", "git_add", args, cwd=str(ws))
    assert judged["paths"] == [f"{proj}/README.md", f"{proj}/-rf", f"{proj}/src"]


# -- the agent's attempts, each with its control ----------------------------------------------


def _escapes(ws: Path) -> dict[str, str]:
    outside = ws.parent / "outside"
    (ws / "proj" / "link").symlink_to(outside)
    return {
        "dot-dot": "../../outside/secret.txt",
        "absolute": str(outside / "secret.txt"),
        "symlink": "link/secret.txt",
    }


@pytest.mark.parametrize("how", ["dot-dot", "absolute", "symlink"])
def test_a_relative_path_leaving_the_workspace_is_not_allowed(ws: Path, how: str) -> None:
    value = _escapes(ws)[how]
    args = {"path": str(ws / "proj"), "object": "HEAD", "filePath": value}
    decision, sent = _engine(ws).decide("git", "git_show", args, cwd=str(ws))
    assert decision.decision == "escalate", decision
    assert sent["filePath"] == value
    # Control: the role none a user had to give it before is not judged at all.
    control = _engine(ws, _none_for("git_show", "filePath"))
    assert control.decide("git", "git_show", args, cwd=str(ws))[0].decision == "allow"


@pytest.mark.parametrize("how", ["dot-dot", "absolute", "symlink"])
def test_a_write_through_a_relative_path_leaving_the_workspace_is_not_allowed(
    ws: Path, how: str
) -> None:
    value = _escapes(ws)[how]
    args = {"path": str(ws / "proj"), "message": "m", "filesToStage": ["README.md", value]}
    decision, _ = _engine(ws).decide("git", "git_commit", args, cwd=str(ws))
    assert decision.decision == "escalate", decision
    control = _engine(ws, _none_for("git_commit", "filesToStage"))
    assert control.decide("git", "git_commit", args, cwd=str(ws))[0].decision == "allow"


def test_a_relative_path_is_judged_from_the_repository_not_the_workspace(ws: Path) -> None:
    # proj/up -> the workspace's parent: "up/outside/..." leaves the workspace from proj,
    # while from the workspace itself "up" is a name that does not exist (inside).
    (ws / "proj" / "up").symlink_to(ws.parent)
    args = {"path": str(ws / "proj"), "object": "HEAD", "filePath": "up/outside/secret.txt"}
    engine = _engine(ws)
    assert engine.decide("git", "git_show", args, cwd=str(ws))[0].decision == "escalate"
    # Control: judged from the workspace (the old canonicalisation), it lies inside.
    inside = {**args, "filePath": str(ws / "up" / "outside" / "secret.txt")}
    assert engine.decide("git", "git_log", inside, cwd=str(ws))[0].decision == "allow"


def test_a_relative_path_without_its_repository_is_refused(ws: Path) -> None:
    engine = _engine(ws)
    for repository in ({}, {"path": 7}, {"path": ["a", "b"]}):
        args = {"object": "HEAD", "filePath": "README.md", **repository}
        decision, _ = engine.decide("git", "git_show", args, cwd=str(ws))
        assert decision.decision == "deny", repository
        assert decision.rule in ("structural-relative-path", "structural-path-shape")
    decision, _ = engine.decide("git", "git_show", {"filePath": "README.md"}, cwd=str(ws))
    assert decision.rule == "structural-relative-path"
    assert "give 'path' too" in decision.reason


# -- the validator -------------------------------------------------------------------------------


def test_a_person_may_give_a_path_like_argument_none() -> None:
    tool = TOOLS["git_show"]
    given = {**heuristic_annotation("git", tool), "draft": False}
    given["args"] = {**given["args"], "filePath": ["none"]}
    assert validate(tool, given, reviewed=True) == []
    assert validate(tool, given) == [
        "git_show: argument 'filePath' looks like a path but has no path role (it has none)"
    ]


@pytest.mark.parametrize(
    ("tool", "arg"), [("git_clear_working_dir", "confirm"), ("git_push", "force")]
)
def test_a_flag_or_an_enum_never_takes_a_path_role(tool: str, arg: str) -> None:
    given = heuristic_annotation("git", TOOLS[tool])
    assert given["args"][arg] == ["none"]
    given["args"] = {**given["args"], arg: ["write-path"]}
    problem = (
        f"{tool}: argument '{arg}' takes a flag, a number or one of fixed values, never a "
        "path, but has the path role write-path"
    )
    assert validate(TOOLS[tool], given) == [problem]
    assert validate(TOOLS[tool], given, reviewed=True) == [problem]


def test_relative_to_must_name_another_argument() -> None:
    given = {**heuristic_annotation("git", TOOLS["git_show"]), "relativeTo": {"filePath": "repo"}}
    assert validate(TOOLS["git_show"], given) == [
        "git_show: relativeTo: argument 'filePath' is relative to 'repo', which is no other "
        "argument of it"
    ]


def _merged(reviewed: dict[str, Any], tool: str) -> tuple[ToolAnnotation, list[str]]:
    before = schema.validate(ToolAnnotation, {**reviewed, "draft": False})
    draft = schema.validate(ToolAnnotation, heuristic_annotation("git", TOOLS[tool]))
    existing = schema.validate(
        ToolAnnotationsFile,
        {"servers": {"git": {"tools": [schema.dump(before)]}}},
    )
    merged = merge_annotations(
        existing, {"git": ServerAnnotations(tools=[draft])}, {"git": {"tools": [TOOLS[tool]]}}
    )
    return merged.file.servers["git"].tools[0], merged.changes


def test_a_reviewed_none_is_kept_a_reviewed_path_role_on_an_enum_is_redrawn() -> None:
    show = heuristic_annotation("git", TOOLS["git_show"])
    kept, _ = _merged({**show, "args": {**show["args"], "filePath": ["none"]}}, "git_show")
    assert kept.args["filePath"] == ["none"] and not kept.draft
    clear = heuristic_annotation("git", TOOLS["git_clear_working_dir"])
    redrawn, changes = _merged(
        {**clear, "args": {"confirm": ["write-path"]}}, "git_clear_working_dir"
    )
    assert redrawn.args["confirm"] == ["none"] and redrawn.draft
    assert "no longer fits the server" in changes[0]


# -- the heuristic ---------------------------------------------------------------------------------


def test_the_heuristic_makes_every_other_path_relative_to_the_repository() -> None:
    relative = {d["toolName"]: d.get("relativeTo", {}) for d in heuristic_drafts()}
    assert {tool: r for tool, r in relative.items() if r} == {
        "git_add": {"paths": "path"},
        "git_blame": {"filePath": "path"},
        "git_checkout": {"paths": "path"},
        "git_commit": {"filesToStage": "path"},
        "git_diff": {"paths": "path"},
        "git_log": {"filePath": "path"},
        "git_reset": {"paths": "path"},
        "git_show": {"filePath": "path"},
        "git_worktree": {"worktreePath": "path", "newPath": "path"},
    }
