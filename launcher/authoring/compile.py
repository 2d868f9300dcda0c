"""``ironcurtain compile-policy``, and the LLM and listing helpers ``annotate-tools`` shares.

compile-policy: start each server in its sandbox and list its tools and prompts; annotate
them (LLM), validate the annotations and merge them with the reviewed ones already in the
output directory; compile the constitution (bundled base plus the user's) into
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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.plan import coherence
from launcher.plan.config_schema import SandboxConfig
from launcher.plan.session_plan import RunOptions, SessionPlan, plan_session
from launcher.shared import dirs
from launcher.shared.shown import visible
from launcher.shared.user_errors import UsageError
from policy import schema
from policy.decision import StructuralConfig
from policy.engine import PolicyEngine
from policy.errors import PolicyFileError
from policy.loader import bundled_policy_dir
from policy.models import CompiledPolicyFile, CompiledRule, ServerAnnotations
from policy.paths import canonical_path, is_under
from policy.pipeline.annotations_file import Merged, file_json, merge_annotations, read_annotations
from policy.pipeline.llm import DEFAULT_MODEL, LLM, AnthropicLLM, CachedLLM, LLMError
from policy.variables import expand
from sandbox_profiles.records import frozen

if TYPE_CHECKING:
    from policy.pipeline.scenarios import Scenario
    from policy.pipeline.verifier import Verification

USER_CONSTITUTION = "constitution-user.md"
# The settings are named as ``{field}``: the command layer says them as its users know them.
NO_KEY = (
    "{command} asks an LLM, and ANTHROPIC_API_KEY is not set. Set it (or pass {{api_key}}; "
    "{{base_url}} and {{model}} choose the endpoint and model). Without an LLM: "
    "`ironcurtain annotate-tools --heuristic --all` drafts annotations from the servers' own "
    "hints, and `ironcurtain run` works with the bundled policy, no key needed."
)


@frozen
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
        raise UsageError(NO_KEY.format(command=command), mentions=("api_key", "base_url", "model"))
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
            elapsed = time.monotonic() - self.started
            print(f"  [{elapsed:6.1f} s] {visible(text)}", file=sys.stderr, flush=True)


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


Listings = Mapping[str, Mapping[str, Sequence[Mapping[str, Any]]]]


def count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def collect_listings(plan: SessionPlan, progress: Progress) -> Listings:
    """Each server's tools and prompts: ``{server: {"tools": [...], "prompts": [...]}}``."""
    from launcher.session.wiring import Session

    progress.step(
        f"starting {len(plan.servers)} server(s) in their sandboxes: " + ", ".join(plan.servers)
    )
    listings = asyncio.run(Session(plan).collect_listings())
    for name, listed in listings.items():
        progress.step(
            f"{name}: {count(len(listed['tools']), 'tool')}, "
            f"{count(len(listed['prompts']), 'prompt')}"
        )
    return listings


def annotate_all(llm: LLM, listings: Listings, progress: Progress) -> dict[str, ServerAnnotations]:
    from policy.pipeline.llm_annotator import annotate_server

    result = {}
    for server, listed in listings.items():
        progress.step(f"annotating the tools and prompts of {server}")
        result[server] = annotate_server(llm, server, listed["tools"], listed.get("prompts", ()))
    return result


def merge_into(
    path: Path,
    fresh: Mapping[str, ServerAnnotations],
    listings: Listings,
    constitution_hash: str | None = None,
) -> Merged:
    """``fresh`` drafts merged into the annotations file at ``path`` (if there is one):
    what every annotator writes. A file there that is not a valid annotations file is
    never overwritten."""
    try:
        existing = read_annotations(path)
    except PolicyFileError as exc:
        raise UsageError(f"{exc}; not overwritten (move it away or fix it)") from None
    return merge_annotations(existing, fresh, listings, constitution_hash)


def report_changes(merged: Merged) -> None:
    """What the merge changed in the annotations file, one line each."""
    for change in merged.changes or ["annotations: nothing changed"]:
        print(f"  {visible(change, one_line=True)}", file=sys.stderr)  # names are a server's


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


# -- compile-policy -------------------------------------------------------------------------


@frozen
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
            found.append(canonical_path(expand(rule.condition.paths.within, variables)))
    return found


def _overlapping(output: Path, directories: Sequence[str]) -> list[str]:
    return [d for d in directories if is_under(str(output), d) or is_under(d, str(output))]


def _refuse_overlap(output: Path, plan: SessionPlan, workspaces: str) -> None:
    overlap = _overlapping(output, permitted_directories(plan, [], workspaces))
    if overlap:
        raise UsageError(
            f"overlaps {overlap[0]}, which the servers may use; choose a directory outside it",
            "output",
            output,
        )


def _verified(
    llm: LLM,
    constitution: str,
    rules: list[CompiledRule],
    merged: Merged,
    plan: SessionPlan,
    scenarios: list[Scenario],
    progress: Progress,
) -> Verification:
    """The rules run on the scenarios by an engine of them in a scratch tree, and judged."""
    from policy.pipeline.verifier import scenario_tree, verify

    structural = plan.engine.structural
    domains = {n: list(sp.config.allowed_domains) for n, sp in plan.servers.items()}
    with scenario_tree() as places:
        engine = PolicyEngine(
            CompiledPolicyFile(rules=rules),
            merged.file,
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
    return verification


def _write(
    output: Path,
    merged: Merged,
    rules: list[CompiledRule],
    constitution_hash: str,
    model: str,
    verification: Verification,
) -> CompiledPolicyFile:
    """The annotations, the rules and the scenarios they were verified by, written at once;
    the policy written."""
    stamp = {"generatedAt": _now(), "constitutionHash": constitution_hash}
    policy = CompiledPolicyFile(
        generated_at=stamp["generatedAt"], constitution_hash=constitution_hash, rules=list(rules)
    )
    write_all(
        {
            output / "tool-annotations.json": file_json(merged.file),
            output / "compiled-policy.json": schema.dump(policy),
            output / "test-scenarios.json": {
                **stamp,
                "model": model,
                "scenarios": [s.model_dump(mode="json") for s in verification.scenarios],
            },
        }
    )
    return policy


def _say_written(
    output: Path,
    plan: SessionPlan,
    merged: Merged,
    policy: CompiledPolicyFile,
    variables: Mapping[str, str],
    verification: Verification,
) -> None:
    """What changed, where the written policy and the servers' configuration disagree, and
    where it went."""
    report_changes(merged)
    written = PolicyEngine(policy, merged.file, variables=variables)
    for mismatch in coherence.check(plan, written):
        print(f"ironcurtain: compile-policy: warning: {mismatch}", file=sys.stderr)
    print(
        f"compile-policy: verified ({len(verification.scenarios)} scenarios, "
        f"{len(verification.rounds)} round(s)); wrote {output}\n"
        f"use it with: ironcurtain run --policy-dir {output}",
        file=sys.stderr,
    )


def compile_policy(
    opts: CompileOptions, llm: LLM | None = None, progress: Progress | None = None
) -> int:
    from policy.pipeline.compiler import compile_constitution
    from policy.pipeline.scenarios import HANDWRITTEN, applicable, generate_scenarios

    progress = progress or Progress()
    llm = llm or make_llm(opts.llm, "compile-policy")
    output = Path(opts.output).expanduser() if opts.output else dirs.config_dir() / "policy"
    output = Path(canonical_path(str(output)))
    constitution, sources = load_constitution()
    constitution_hash = sha256(constitution)
    plan = plan_session(RunOptions(config=opts.config, servers=opts.servers, every_caller=True))
    workspaces = canonical_path(str(dirs.state_dir() / "workspaces"))
    _refuse_overlap(output, plan, workspaces)
    progress.step("constitution: " + " + ".join(str(p) for p in sources))
    listings = collect_listings(plan, progress)
    try:
        fresh = annotate_all(llm, listings, progress)
        # The reviewed annotations already in the output win over the new drafts: the rules
        # are compiled and verified against what will be written.
        merged = merge_into(output / "tool-annotations.json", fresh, listings, constitution_hash)
        annotated = {s: merged.file.servers[s] for s in fresh}
        flat = [a for entry in annotated.values() for a in entry.tools]
        prompts = [a for entry in annotated.values() for a in entry.prompts]
        structural = plan.engine.structural
        variables = {"workspace": plan.workspace}
        directories = {"the agent's workspace": "${workspace}", "the user's home": "~"}
        domains = {n: list(sp.config.allowed_domains) for n, sp in plan.servers.items()}
        progress.step("compiling the constitution into rules")
        rules = compile_constitution(
            llm, constitution, flat, directories, domains, structural, variables, prompts
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
        verification = _verified(llm, constitution, rules, merged, plan, scenarios, progress)
    except LLMError as exc:
        print(f"ironcurtain: compile-policy: {exc}\nnothing was written", file=sys.stderr)
        return 1
    if not verification.passed:
        _diagnose(verification)
        return 1
    policy = _write(output, merged, rules, constitution_hash, llm.model, verification)
    _say_written(output, plan, merged, policy, variables, verification)
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
    print(visible("\n".join(lines)), file=sys.stderr)  # servers' names, the model's words
