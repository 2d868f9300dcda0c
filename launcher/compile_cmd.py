"""``ironcurtain compile-policy`` and the LLM path of ``annotate-tools``.

compile-policy: start each server in its sandbox and list its tools; annotate them (LLM),
validate the annotations; compile the constitution (bundled base plus the user's) into
rules; generate scenarios (the handwritten ones always included); verify with the real
engine and an LLM judge. The artifacts are written, all at once, only when verification
passes; otherwise diagnostics, exit 1, nothing overwritten.

Every LLM question goes through a cache keyed by the hash of all it contains (model,
prompt text, constitution, tool schemas): an unchanged input makes no request. ``--force``
asks anew.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher import dirs
from launcher.config import SandboxConfig
from launcher.errors import UsageError
from launcher.plan import RunOptions, SessionPlan, plan_session
from policy.engine import PolicyEngine, StructuralConfig, expand_variables
from policy.llm import DEFAULT_MODEL, LLM, AnthropicLLM, CachedLLM, LLMError
from policy.loader import bundled_policy_dir
from policy.models import (
    CompiledPolicyFile,
    CompiledRule,
    ServerAnnotations,
    ToolAnnotation,
    ToolAnnotationsFile,
)
from policy.paths import canonical_path, is_within

USER_CONSTITUTION = "constitution-user.md"
NO_KEY = (
    "{command} asks an LLM, and ANTHROPIC_API_KEY is not set. Set it (or pass --api-key; "
    "--base-url and --model choose the endpoint and model). Without an LLM: "
    "`ironcurtain annotate-tools --heuristic --all` drafts annotations from the servers' own "
    "hints, and `ironcurtain run` works with the bundled policy, no key needed."
)


@dataclass(frozen=True)
class LLMOptions:
    model: str | None = None
    api_key: str | None = None
    base_url: str | None = None
    force: bool = False


def make_llm(opts: LLMOptions, command: str, http_client: Any = None) -> CachedLLM:
    """The pipeline's LLM: options first, then ANTHROPIC_API_KEY / ANTHROPIC_BASE_URL /
    IRONCURTAIN_MODEL (or ANTHROPIC_MODEL); answers cached under the user's cache dir."""
    key = opts.api_key or os.environ.get("ANTHROPIC_API_KEY")
    if not key:
        raise UsageError(NO_KEY.format(command=command))
    model = (
        opts.model
        or os.environ.get("IRONCURTAIN_MODEL")
        or os.environ.get("ANTHROPIC_MODEL")
        or DEFAULT_MODEL
    )
    base_url = opts.base_url or os.environ.get("ANTHROPIC_BASE_URL") or None
    inner = AnthropicLLM(model, key, base_url, http_client)
    return CachedLLM(inner, cache_dir(), force=opts.force)


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".cache"
    return root / "ironcurtain" / "llm"


class Progress:
    """One line per long step on stderr, with the time so far; quiet when stderr is not a
    terminal (unless asked)."""

    def __init__(self, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.started = time.monotonic()

    def step(self, text: str) -> None:
        if self.enabled:
            print(
                f"  [{time.monotonic() - self.started:6.1f} s] {text}", file=sys.stderr, flush=True
            )


def load_constitution() -> tuple[str, list[Path]]:
    """The bundled base constitution, then the user's additions (which take precedence
    where they are more specific)."""
    paths = [bundled_policy_dir() / "constitution.md"]
    user = dirs.config_dir() / USER_CONSTITUTION
    if user.is_file():
        paths.append(user)
    return "\n\n".join(p.read_text(encoding="utf-8") for p in paths), paths


def sha256(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def collect_tools(plan: SessionPlan, progress: Progress) -> dict[str, list[dict[str, Any]]]:
    from launcher.session import Session

    progress.step(
        f"starting {len(plan.servers)} server(s) in their sandboxes: " + ", ".join(plan.servers)
    )
    tools = asyncio.run(Session(plan).collect_tools())
    for name, listed in tools.items():
        progress.step(f"{name}: {len(listed)} tool{'' if len(listed) == 1 else 's'}")
    return tools


def annotate_all(
    llm: LLM, tools: Mapping[str, Sequence[Mapping[str, Any]]], progress: Progress
) -> dict[str, list[ToolAnnotation]]:
    from policy.annotator import annotate_tools

    result = {}
    for server, listed in tools.items():
        progress.step(f"annotating the tools of {server}")
        result[server] = annotate_tools(llm, server, listed)
    return result


def annotations_file(
    annotated: Mapping[str, Sequence[ToolAnnotation]], constitution_hash: str | None
) -> dict[str, Any]:
    return {
        "generatedAt": _now(),
        "constitutionHash": constitution_hash,
        "reviewed": False,
        "servers": {
            server: {"tools": [_annotation_json(a) for a in listed]}
            for server, listed in annotated.items()
        },
    }


def _annotation_json(annotation: ToolAnnotation) -> dict[str, Any]:
    data = annotation.model_dump(by_alias=True, exclude_none=True)
    if not data.get("piiFields"):
        data.pop("piiFields", None)  # as the reviewed files write it: only when there are some
    return data


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def write_all(files: Mapping[Path, Any]) -> None:
    """Write every file or none: each goes to a temporary name first, and only when all are
    written are they renamed into place."""
    temps: list[tuple[Path, Path]] = []
    try:
        for path, content in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.write_text(
                json.dumps(content, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
            )
            temps.append((tmp, path))
    except OSError:
        for tmp, _ in temps:
            tmp.unlink(missing_ok=True)
        raise
    for tmp, path in temps:
        os.replace(tmp, path)


# -- annotate-tools (LLM) -------------------------------------------------------------------


def annotate_with_llm(
    servers: tuple[str, ...], output: str, config: str | None, llm: LLM, progress: Progress
) -> int:
    plan = plan_session(RunOptions(config=config, servers=servers))
    tools = collect_tools(plan, progress)
    try:
        annotated = annotate_all(llm, tools, progress)
    except LLMError as exc:
        print(f"ironcurtain: annotate-tools: {exc}\nnothing was written", file=sys.stderr)
        return 1
    write_all({Path(output): annotations_file(annotated, None)})
    print(
        f"wrote {output}: {sum(len(a) for a in annotated.values())} tools annotated by "
        f'{llm.model} ("reviewed": false: check them before use)',
        file=sys.stderr,
    )
    return 0


# -- compile-policy -------------------------------------------------------------------------


@dataclass(frozen=True)
class CompileOptions:
    config: str | None = None
    servers: tuple[str, ...] = ()
    output: str | None = None
    llm: LLMOptions = LLMOptions()


def permitted_directories(
    plan: SessionPlan, rules: Sequence[CompiledRule], workspaces: str
) -> list[str]:
    """Every directory the policy or a sandbox lets a server write or read: what the
    generated policy must stay out of."""
    found = [workspaces]
    for sp in plan.servers.values():
        if isinstance(sp.config.sandbox, SandboxConfig):
            fs = sp.config.sandbox.filesystem
            found += [canonical_path(p) for p in (*fs.allow_write, *fs.allow_read)]
    variables = {"workspace": workspaces}
    for rule in rules:
        if rule.then != "deny" and rule.condition.paths is not None:
            found.append(canonical_path(expand_variables(rule.condition.paths.within, variables)))
    return found


def _overlapping(output: Path, directories: Sequence[str]) -> list[str]:
    return [d for d in directories if is_within(str(output), d) or is_within(d, str(output))]


def compile_policy(
    opts: CompileOptions, llm: LLM | None = None, progress: Progress | None = None
) -> int:
    from policy.compiler import compile_constitution
    from policy.scenarios import HANDWRITTEN, applicable, generate_scenarios
    from policy.verifier import scenario_tree, verify

    progress = progress or Progress()
    llm = llm or make_llm(opts.llm, "compile-policy")
    output = Path(opts.output).expanduser() if opts.output else dirs.config_dir() / "policy"
    output = Path(canonical_path(str(output)))
    constitution, sources = load_constitution()
    constitution_hash = sha256(constitution)
    plan = plan_session(RunOptions(config=opts.config, servers=opts.servers))
    workspaces = canonical_path(str(dirs.state_dir() / "workspaces"))
    overlap = _overlapping(output, permitted_directories(plan, [], workspaces))
    if overlap:
        raise UsageError(
            f"--output {output}: overlaps {overlap[0]}, which the servers may use; choose a "
            "directory outside it"
        )
    progress.step("constitution: " + " + ".join(str(p) for p in sources))
    tools = collect_tools(plan, progress)
    try:
        annotated = annotate_all(llm, tools, progress)
        flat = [a for listed in annotated.values() for a in listed]
        structural = plan.engine.structural
        variables = {"workspace": plan.workspace}
        directories = {"the agent's workspace": "${workspace}", "the user's home": "~"}
        domains = {n: list(sp.config.allowed_domains) for n, sp in plan.servers.items()}
        progress.step("compiling the constitution into rules")
        rules = compile_constitution(
            llm, constitution, flat, directories, domains, structural, variables
        )
        progress.step(f"{len(rules)} rules; generating test scenarios")
        handwritten = applicable(HANDWRITTEN, flat)
        scenarios = generate_scenarios(llm, constitution, flat, handwritten)
        overlap = _overlapping(output, permitted_directories(plan, rules, workspaces))
        if overlap:
            print(
                f"ironcurtain: compile-policy: the compiled rules permit {overlap[0]}, which "
                f"overlaps the output directory {output}; nothing was written (--output "
                "another directory)",
                file=sys.stderr,
            )
            return 1
        with scenario_tree() as places:
            engine = PolicyEngine(
                CompiledPolicyFile(rules=rules),
                ToolAnnotationsFile(
                    servers={s: ServerAnnotations(tools=a) for s, a in annotated.items()}
                ),
                StructuralConfig(
                    protected=structural.protected,
                    state_dir=structural.state_dir,
                    exempt=(places["workspace"],),
                ),
                domains,
                {"workspace": places["workspace"]},
            )
            verification = verify(
                llm,
                constitution,
                rules,
                engine,
                scenarios,
                places,
                on_round=lambda n, results: progress.step(
                    f"verifying, round {n}: {sum(r.passed for r in results)} of {len(results)} "
                    "scenarios as expected"
                ),
            )
    except LLMError as exc:
        print(f"ironcurtain: compile-policy: {exc}\nnothing was written", file=sys.stderr)
        return 1
    if not verification.passed:
        _diagnose(verification)
        return 1
    stamp = {"generatedAt": _now(), "constitutionHash": constitution_hash}
    policy = CompiledPolicyFile.model_validate(
        {**stamp, "rules": [r.model_dump(by_alias=True, exclude_none=True) for r in rules]}
    )
    write_all(
        {
            output / "tool-annotations.json": annotations_file(annotated, constitution_hash),
            output / "compiled-policy.json": policy.model_dump(by_alias=True, exclude_none=True),
            output / "test-scenarios.json": {
                **stamp,
                "model": llm.model,
                "scenarios": [s.model_dump(mode="json") for s in verification.scenarios],
            },
        }
    )
    print(
        f"compile-policy: verified ({len(verification.scenarios)} scenarios, "
        f"{len(verification.rounds)} round(s)); wrote {output}\n"
        f"use it with: ironcurtain run --policy-dir {output}",
        file=sys.stderr,
    )
    return 0


def _diagnose(verification: Any) -> None:
    lines = ["ironcurtain: compile-policy: verification FAILED; nothing was written"]
    for result in verification.failures:
        s = result.scenario
        lines.append(
            f"  [{s.source}] {s.description}: {s.server}/{s.tool} expected {s.expected}, "
            f"the engine said {result.actual} (rule {result.rule})"
        )
    for number, (_, answer) in enumerate(verification.rounds, 1):
        lines.append(f"  judge, round {number} ({answer.verdict}): {answer.analysis}")
    print("\n".join(lines), file=sys.stderr)
