"""``annotate-tools --heuristic`` on the real reference servers, and the validator."""

from __future__ import annotations

import json

import pytest

from tests.conftest import Home, needs_bwrap
from tests.test_config_errors import ironcurtain

BUNDLED = "policy/defaults/tool-annotations.json"


def _by_tool(data: dict) -> dict[tuple[str, str], dict]:  # type: ignore[type-arg]
    return {(s, t["toolName"]): t for s, v in data["servers"].items() for t in v["tools"]}


@needs_bwrap
def test_the_heuristic_draft_of_the_reference_servers(user: Home) -> None:
    from pathlib import Path

    out = user.root / "draft.json"
    done = ironcurtain(user, "annotate-tools", "--all", "--heuristic", "--output", str(out))
    assert done.returncode == 0, done.stderr
    assert "DRAFT" in done.stderr
    draft = json.loads(out.read_text())
    assert draft["reviewed"] is False
    reviewed = _by_tool(json.loads((Path(__file__).parent.parent / BUNDLED).read_text()))
    heuristic = _by_tool(draft)
    assert set(heuristic) == set(reviewed)  # every tool of every server, nothing invented
    path_roles = {"read-path", "write-path", "delete-path"}
    same = 0
    for key, mine in heuristic.items():
        theirs = reviewed[key]
        assert mine["effect"] == theirs["effect"], key
        for arg, roles in theirs["args"].items():
            # Never weaker than the reviewed annotation on anything path-like.
            assert set(roles) & path_roles <= set(mine["args"][arg]), (key, arg)
        same += mine["args"] == theirs["args"]
    assert same == len(reviewed), f"only {same} of {len(reviewed)} agree"


@needs_bwrap
def test_the_bundled_annotations_cover_every_path_argument_of_the_live_tools(
    user: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The draft lists the live tools; the shipped annotations must pass the validator on them.
    import asyncio
    import os

    from launcher.plan import RunOptions, plan_session
    from launcher.session import Session
    from policy.annotate import validate

    os.environ["XDG_STATE_HOME"] = str(user.state)
    try:
        plan = plan_session(RunOptions(workspace=str(user.ws())))
        tools = asyncio.run(Session(plan).collect_tools())
    finally:
        del os.environ["XDG_STATE_HOME"]
    with open(BUNDLED, encoding="utf-8") as handle:
        reviewed = _by_tool(json.load(handle))
    problems = [
        p
        for server, listed in tools.items()
        for tool in listed
        for p in validate(tool, reviewed[(server, tool["name"])])
    ]
    assert problems == []


def test_annotate_tools_says_what_it_needs(user: Home) -> None:
    done = ironcurtain(user, "annotate-tools", "--heuristic")
    assert done.returncode == 2 and "--server NAME" in done.stderr and "--all" in done.stderr
    user.env.pop("ANTHROPIC_API_KEY", None)
    done = ironcurtain(user, "annotate-tools", "--all")
    assert done.returncode == 2 and "ANTHROPIC_API_KEY is not set" in done.stderr
    assert "--heuristic" in done.stderr and "Traceback" not in done.stderr
