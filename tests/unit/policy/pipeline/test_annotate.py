"""``annotate-tools`` asked for what it needs, the heuristic and the LLM answer on prompts, the
one writer both annotators use, and the validator, on listings made here. (The heuristic on
the real reference servers: ``tests/sandbox/test_annotate_live.py``.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import ironcurtain
from tests.support.home import Home


def test_annotate_tools_says_what_it_needs(user: Home) -> None:
    done = ironcurtain(user, "annotate-tools", "--heuristic")
    assert done.returncode == 2 and "--server NAME" in done.stderr and "--all" in done.stderr
    user.env.pop("ANTHROPIC_API_KEY", None)
    done = ironcurtain(user, "annotate-tools", "--all")
    assert done.returncode == 2 and "ANTHROPIC_API_KEY is not set" in done.stderr
    assert "--heuristic" in done.stderr and "Traceback" not in done.stderr


# -- prompts, and the one writer both annotators use ---------------------------------------

FETCH_PROMPT = {
    "name": "fetch",
    "description": "Fetch a URL and extract its contents as markdown",
    "arguments": [{"name": "url", "description": "URL to fetch", "required": True}],
}
READ_PROMPT = {"name": "explain_file", "arguments": [{"name": "file", "required": True}]}


def test_the_heuristic_annotates_prompts_and_the_validator_checks_them() -> None:
    from policy.pipeline.heuristic import heuristic_annotation, validate

    draft = heuristic_annotation("fetch", FETCH_PROMPT, "prompt")
    assert draft["promptName"] == "fetch" and "toolName" not in draft
    assert (draft["effect"], draft["args"], draft["draft"]) == (
        "read",
        {"url": ["fetch-url"]},
        True,
    )
    assert heuristic_annotation("fs", READ_PROMPT, "prompt")["args"] == {
        "file": ["write-path"]
    }  # strict
    # The validator: a path-like prompt argument without a path role, a missing argument.
    assert validate(READ_PROMPT, {"args": {"file": ["none"]}}) == [
        "explain_file: argument 'file' looks like a path but has no path role (it has none)"
    ]
    assert validate(FETCH_PROMPT, {"args": {}}) == ["fetch: argument 'url' has no annotation"]
    assert validate(FETCH_PROMPT, draft) == []


def test_the_llm_answer_must_annotate_every_prompt() -> None:
    from policy.pipeline.llm_annotator import AnnotatorAnswer, annotator_prompt, problems_of

    tool = {"name": "fetch", "inputSchema": {"properties": {"url": {"type": "string"}}}}
    annotated_tool = {"toolName": "fetch", "effect": "read", "sideEffects": True,
                      "args": {"url": ["fetch-url"]}}  # fmt: skip
    answer = AnnotatorAnswer.model_validate({"tools": [annotated_tool]})
    assert problems_of(answer, [tool], "fetch", [FETCH_PROMPT]) == [
        "prompt 'fetch' is not annotated"
    ]
    prompt = {"promptName": "fetch", "effect": "read", "sideEffects": True,
              "args": {"url": ["fetch-url"], "depth": ["none"]}}  # fmt: skip
    answer = AnnotatorAnswer.model_validate({"tools": [annotated_tool], "prompts": [prompt]})
    assert problems_of(answer, [tool], "fetch", [FETCH_PROMPT]) == [
        "fetch: 'depth' is not one of its arguments"
    ]
    assert problems_of(answer, [tool], "fetch", [READ_PROMPT]) == [
        "prompt 'explain_file' is not annotated",
        "prompt 'fetch' is not a prompt of this server",
    ]
    # The question names prompts only when the server has some.
    assert "promptName" in annotator_prompt("fetch", [tool], [FETCH_PROMPT])
    assert "prompt" not in annotator_prompt("time", [tool]).lower()


def _listing(*prompts: dict) -> dict:  # type: ignore[type-arg]
    tools = [
        {"name": "read_file", "inputSchema": {"properties": {"path": {"type": "string"}}}},
        {"name": "now", "inputSchema": {"properties": {}}},
    ]
    return {"fs": {"tools": tools, "prompts": list(prompts)}}


def _drafts(listing: dict) -> dict:  # type: ignore[type-arg]
    from launcher.authoring.annotate import heuristic_drafts

    return heuristic_drafts(listing)


def test_the_writer_keeps_reviewed_entries_replaces_drafts_and_says_what_changed() -> None:
    from policy import schema
    from policy.models import ToolAnnotationsFile
    from policy.pipeline.annotations_file import file_json, merge_annotations

    first = merge_annotations(None, _drafts(_listing(READ_PROMPT)), _listing(READ_PROMPT))
    assert first.file.reviewed is False
    assert first.changes == [
        "fs: tool read_file: added (draft)",
        "fs: tool now: added (draft)",
        "fs: prompt explain_file: added (draft)",
    ]
    # A person reviews read_file and the prompt (changing its effect); `now` stays a draft
    # (edited, but not reviewed); a second server is annotated by hand.
    data = file_json(first.file)
    entry = data["servers"]["fs"]
    entry["tools"][0] = {**entry["tools"][0], "comment": "checked"}
    del entry["tools"][0]["draft"]
    entry["tools"][1]["effect"] = "write"
    entry["prompts"][0] = {**entry["prompts"][0], "effect": "read", "args": {"file": ["read-path"]}}
    del entry["prompts"][0]["draft"]
    data["servers"]["crm"] = {"tools": [{"toolName": "t", "serverName": "crm",
                                         "effect": "read", "sideEffects": False}]}  # fmt: skip
    reviewed = schema.validate(ToolAnnotationsFile, data)
    # The server now offers the fetch prompt as well.
    listing = _listing(READ_PROMPT, FETCH_PROMPT)
    second = merge_annotations(reviewed, _drafts(listing), listing)
    out = file_json(second.file)
    assert out["servers"]["fs"]["tools"][0]["comment"] == "checked"  # kept as reviewed
    assert out["servers"]["fs"]["tools"][1]["effect"] == "other"  # the draft was replaced
    assert out["servers"]["fs"]["prompts"][0]["effect"] == "read"
    assert "draft" not in out["servers"]["fs"]["prompts"][0]
    assert second.file.servers["crm"] == reviewed.servers["crm"]
    assert second.changes == [
        "fs: tool now: draft replaced by the new draft",
        "fs: prompt explain_file: kept the reviewed annotation; the new draft differs: "
        "effect read -> other, file read-path -> write-path",
        "fs: prompt fetch: added (draft)",
    ]
    # A reviewed entry that no longer fits the server (a path argument it does not know)
    # is replaced, and that is said; an entry the server no longer offers is removed.
    changed = {"name": "explain_file", "arguments": [{"name": "file"}, {"name": "out_path"}]}
    listing = _listing(changed)
    third = merge_annotations(second.file, _drafts(listing), listing)
    assert third.changes == [
        "fs: prompt explain_file: the reviewed annotation no longer fits the server "
        "(explain_file: argument 'out_path' has no annotation): replaced by a draft",
        "fs: prompt fetch: removed (the server no longer offers it)",
    ]
    # Reviewed only when no entry is a draft.
    assert third.file.reviewed is False


def test_an_invalid_annotations_file_is_never_overwritten(tmp_path: Path) -> None:
    from launcher.authoring.compile import merge_into
    from launcher.shared.user_errors import UsageError

    out = tmp_path / "tool-annotations.json"
    out.write_text('{"servers": {"fs": {"tools": [{"toolName": "x"}]}}}')
    with pytest.raises(UsageError, match=r"servers\.fs\.tools\[0\].*not overwritten"):
        merge_into(out, _drafts(_listing()), _listing())
