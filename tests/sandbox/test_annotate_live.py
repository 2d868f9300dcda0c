"""``annotate-tools --heuristic`` on the real reference servers in their sandboxes: its draft
agrees with the reviewed annotations, and those pass the validator on every live tool."""

from __future__ import annotations

import json

import pytest

from tests.support.cli import ironcurtain
from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.paths import REPO

BUNDLED = "policy/defaults/tool-annotations.json"


def _by_tool(data: dict) -> dict[tuple[str, str], dict]:  # type: ignore[type-arg]
    """Tools by (server, name), prompts by (server, "prompt:" name)."""
    found = {(s, t["toolName"]): t for s, v in data["servers"].items() for t in v["tools"]}
    for s, v in data["servers"].items():
        found.update({(s, "prompt:" + p["promptName"]): p for p in v.get("prompts", ())})
    return found


@needs_bwrap
def test_the_heuristic_draft_of_the_reference_servers(user: Home) -> None:
    out = user.root / "draft.json"
    done = ironcurtain(user, "annotate-tools", "--all", "--heuristic", "--output", str(out))
    assert done.returncode == 0, done.stderr
    assert "DRAFT" in done.stderr
    draft = json.loads(out.read_text())
    assert draft["reviewed"] is False
    reviewed = _by_tool(json.loads((REPO / BUNDLED).read_text()))
    heuristic = _by_tool(draft)
    # Every tool and prompt of every server, nothing invented.
    assert set(heuristic) == set(reviewed)
    assert ("fetch", "prompt:fetch") in heuristic
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

    from launcher.plan.session_plan import RunOptions, plan_session
    from launcher.session.wiring import Session
    from policy.pipeline.heuristic import validate

    os.environ["XDG_STATE_HOME"] = str(user.state)
    try:
        plan = plan_session(RunOptions(workspace=str(user.ws())))
        listings = asyncio.run(Session(plan).collect_listings())
    finally:
        del os.environ["XDG_STATE_HOME"]
    with open(REPO / BUNDLED, encoding="utf-8") as handle:
        reviewed = _by_tool(json.load(handle))
    live = {
        (server, prefix + item["name"]): item
        for server, listed in listings.items()
        for kind, prefix in (("tools", ""), ("prompts", "prompt:"))
        for item in listed[kind]
    }
    assert set(live) == set(reviewed)  # every live tool and prompt is annotated
    problems = [p for key, item in live.items() for p in validate(item, reviewed[key])]
    assert problems == []
