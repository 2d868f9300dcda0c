"""``ironcurtain annotate-tools``: start each server in its sandbox, list its tools, and
annotate them. ``--heuristic`` needs no LLM and writes a draft for review."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from launcher.compile_cmd import LLMOptions, Progress, annotate_with_llm, make_llm
from launcher.errors import UsageError
from launcher.plan import RunOptions, plan_session
from policy.annotate import heuristic_annotation, validate
from policy.llm import LLM


def annotate_tools(
    servers: tuple[str, ...],
    all_servers: bool,
    heuristic: bool,
    output: str,
    config: str | None,
    llm_options: LLMOptions | None = None,
    llm: LLM | None = None,
) -> int:
    if not servers and not all_servers:
        raise UsageError("name the servers with --server NAME, or annotate them all with --all")
    if not heuristic:
        llm = llm or make_llm(llm_options or LLMOptions(), "annotate-tools")
        return annotate_with_llm(servers, output, config, llm, Progress())
    from launcher.session import Session

    plan = plan_session(RunOptions(config=config, servers=servers))
    tools = asyncio.run(Session(plan).collect_tools())
    out = Path(output)
    existing: dict[str, Any] = {}
    if out.exists():
        try:
            existing = json.loads(out.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise UsageError(f"{out}: exists and is not JSON ({exc}); not overwritten") from None
    result: dict[str, Any] = {
        "generatedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "constitutionHash": None,
        "reviewed": False,
        "servers": dict(existing.get("servers") or {}),
    }
    problems: list[str] = []
    for name, listed in tools.items():
        annotations = [heuristic_annotation(name, tool) for tool in listed]
        for tool, annotation in zip(listed, annotations, strict=True):
            problems += [f"{name}/{p}" for p in validate(tool, annotation)]
        result["servers"][name] = {"tools": annotations}
        print(f"{name}: {len(annotations)} tools annotated (heuristic draft)", file=sys.stderr)
    if problems:  # the heuristic gives every path-like argument a path role: a bug if not
        raise UsageError("the draft does not validate:\n  " + "\n  ".join(problems))
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, out)
    print(
        f'wrote {out}: a DRAFT ("reviewed": false). Check every effect and argument role '
        "before using it as a policy's tool-annotations.json.",
        file=sys.stderr,
    )
    return 0
