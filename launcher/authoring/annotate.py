"""``ironcurtain annotate-tools``: start each server in its sandbox, list its tools and
prompts, and annotate them (by the LLM, or with ``--heuristic`` by rules of thumb, no LLM).

Either way the drafts are merged into the output file as ``compile-policy`` merges them:
reviewed entries are kept, and every change is said."""

from __future__ import annotations

import sys
from pathlib import Path

from launcher.authoring.compile import (
    Listings,
    LLMOptions,
    Progress,
    annotate_all,
    collect_listings,
    count,
    make_llm,
    merge_into,
    report_changes,
    write_all,
)
from launcher.plan.session_plan import RunOptions, plan_session
from launcher.shared.user_errors import UsageError
from policy import schema
from policy.models import ServerAnnotations
from policy.pipeline.annotations_file import KINDS, file_json
from policy.pipeline.heuristic import heuristic_annotation, validate
from policy.pipeline.llm import LLM, LLMError


def annotate_tools(
    servers: tuple[str, ...],
    all_servers: bool,
    heuristic: bool,
    output: str,
    config: str | None,
    llm_options: LLMOptions | None = None,
    llm: LLM | None = None,
    progress: Progress | None = None,
) -> int:
    if not servers and not all_servers:
        raise UsageError(
            "name the servers with {servers} NAME, or annotate them all with {all_servers}",
            mentions=("servers", "all_servers"),
        )
    if not heuristic:
        llm = llm or make_llm(llm_options or LLMOptions(), "annotate-tools")
    progress = progress or Progress()
    plan = plan_session(
        RunOptions(config=config, servers=servers, every_caller=True, read_only=True)
    )
    listings = collect_listings(plan, progress)
    if llm is None or heuristic:
        fresh = heuristic_drafts(listings)
        by = "the heuristic"
    else:
        try:
            fresh = annotate_all(llm, listings, progress)
        except LLMError as exc:
            print(f"ironcurtain: annotate-tools: {exc}\nnothing was written", file=sys.stderr)
            return 1
        by = llm.model
    out = Path(output)
    merged = merge_into(out, fresh, listings)
    write_all({out: file_json(merged.file)})
    for name, entry in fresh.items():
        print(
            f"{name}: {count(len(entry.tools), 'tool')}, {count(len(entry.prompts), 'prompt')} "
            f"annotated by {by}",
            file=sys.stderr,
        )
    report_changes(merged)
    print(
        f'wrote {out}: new entries are DRAFTS, marked "draft": true. Check every effect and '
        "argument role and remove the mark before trusting an entry; a later run keeps what "
        "you reviewed.",
        file=sys.stderr,
    )
    return 0


def heuristic_drafts(listings: Listings) -> dict[str, ServerAnnotations]:
    """Every listed tool and prompt annotated by the heuristic, validated."""
    fresh: dict[str, ServerAnnotations] = {}
    problems: list[str] = []
    for name, listed in listings.items():
        entry: dict[str, list[dict[str, object]]] = {}
        for kind in KINDS:
            drafts = [heuristic_annotation(name, item, kind[:-1]) for item in listed[kind]]
            for item, draft in zip(listed[kind], drafts, strict=True):
                problems += [f"{name}/{p}" for p in validate(item, draft)]
            entry[kind] = drafts
        fresh[name] = schema.validate(ServerAnnotations, entry)
    if problems:  # the heuristic gives every path-like argument a path role: a bug if not
        raise UsageError("the draft does not validate:\n  " + "\n  ".join(problems))
    return fresh
