"""The conformance suite's results, read from its output directory and set side by side:
one table per requirement set (scenario, directly, through ironcurtain), the suite's
``wire-schema-valid`` check marked, and the scenarios that pass directly but fail through
ironcurtain counted. For the stateless era's set, the same scenario against the same server
in the handshake era's set is shown too: ironcurtain speaks the stateless era for a server
that speaks only the handshake era, so what that server passes in the handshake era should
pass through ironcurtain in the stateless era."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

WIRE = "wire-schema-valid"
HANDSHAKE_COLUMN = "direct, 2025-11-25"
_DIRECTORY = re.compile(r"server-(.+)-\d{4}-\d\d-\d\dT[\d-]+Z$")


@dataclass(frozen=True)
class Outcome:
    """One scenario's run: the ids of its checks that failed (each once, in order), how many
    of its checks succeeded or only warned, and what broke the revision's schema (each
    message the implementation sent that did: what it was, and why)."""

    failed: tuple[str, ...]
    held: int
    violations: tuple[str, ...] = ()

    @property
    def verdict(self) -> str:
        """``FAIL`` when a check failed, ``pass`` when none did and one held, ``skip`` when
        the scenario checked nothing (every check skipped or informational)."""
        return "FAIL" if self.failed else "pass" if self.held else "skip"

    @property
    def wire_failed(self) -> bool:
        return WIRE in self.failed


def read_results(out: Path) -> dict[str, Outcome]:
    """scenario -> outcome, from the suite's ``server-<scenario>-<time>/checks.json``."""
    results: dict[str, Outcome] = {}
    for checks in sorted(out.glob("server-*/checks.json")):
        match = _DIRECTORY.match(checks.parent.name)
        if match is None:
            continue
        failed: list[str] = []
        violations: list[str] = []
        held = 0
        for check in json.loads(checks.read_text()):
            status, name = check.get("status"), str(check.get("id"))
            if status == "FAILURE" and name not in failed:
                failed.append(name)
            held += status in ("SUCCESS", "WARNING")
            if name == WIRE and status == "FAILURE":
                violations += _violations(check.get("details"))
        results[match.group(1)] = Outcome(tuple(failed), held, tuple(violations))
    return results


def _violations(details: object) -> list[str]:
    found = details.get("violations") if isinstance(details, dict) else None
    return [
        f"{v.get('context', '?')}: {'; '.join(str(e) for e in v.get('errors') or [])}"
        for v in (found if isinstance(found, list) else [])
        if isinstance(v, dict) and v.get("origin", "implementation") == "implementation"
    ]


def not_scored(requirements: Path) -> dict[str, str]:
    """The server scenarios a requirement set runs without scoring them -> the reason it
    gives (``extension``, ``pending``, ``added-after-release``), from its YAML file."""
    text = requirements.read_text()
    _, _, section = text.partition("\nnot_scored:")
    found: dict[str, str] = {}
    for entry in re.split(r"\n\s*- (?=scenario:)", section):
        fields = dict(re.findall(r"^\s*(scenario|leg|reason):\s*(\S+)", entry, re.MULTILINE))
        if fields.get("leg") == "server" and "scenario" in fields:
            found[fields["scenario"]] = fields.get("reason", "?")
    return found


# Differences ironcurtain makes on purpose: a scenario whose only checks that fail through
# it are these is not a regression, and the table says why.
ROOTS = (
    "ironcurtain answers a server's roots/list itself, with what the server's sandbox holds; "
    "the client's own roots never reach a server"
)
BY_DESIGN: dict[str, tuple[frozenset[str], str]] = {
    "input-required-result-basic-list-roots": (
        frozenset({"sep-2322-list-roots-incomplete"}),
        ROOTS,
    ),
    "input-required-result-multiple-input-requests": (
        frozenset({"sep-2322-multiple-inputs-incomplete"}),
        ROOTS,
    ),
}


@dataclass(frozen=True)
class Comparison:
    """One requirement set, run directly and through ironcurtain; ``handshake``: the
    handshake era's set run directly, for the stateless era's set (else empty)."""

    requirements: str
    direct: dict[str, Outcome]
    through: dict[str, Outcome]
    unscored: dict[str, str]
    handshake: dict[str, Outcome] = field(default_factory=dict)

    def regressions(self) -> list[str]:
        """The scenarios that pass directly and do not pass through ironcurtain (but for
        what ironcurtain does differently on purpose)."""
        return [
            name
            for name, outcome in sorted(self.direct.items())
            if outcome.verdict == "pass" and _verdict(self.through.get(name)) != "pass"
            if name not in self.by_design()
        ]

    def by_design(self) -> dict[str, str]:
        """The scenarios that fail through ironcurtain only where it differs on purpose:
        why."""
        found = {}
        for name, (checks, why) in BY_DESIGN.items():
            outcome = self.through.get(name)
            if outcome is not None and outcome.verdict != "pass" and set(outcome.failed) <= checks:
                found[name] = why
        return found

    def unbridged(self) -> list[str]:
        """The scenarios that pass directly in the handshake era and do not pass through
        ironcurtain in this (stateless) era, when they did not pass directly in this era
        either (those are regressions)."""
        regressed = self.regressions()
        return [
            name
            for name, outcome in sorted(self.handshake.items())
            if name in self.direct or name in self.through
            if outcome.verdict == "pass" and _verdict(self.through.get(name)) != "pass"
            if name not in regressed
        ]

    def table(self, title: str) -> list[str]:
        names = sorted(self.direct.keys() | self.through.keys())
        scored = [n for n in names if n not in self.unscored]
        extra = [n for n in names if n in self.unscored]
        width = max([len(n) for n in scored] + [len(n) + 3 + len(r) for n, r in
                                                  self.unscored.items()] + [8])  # fmt: skip
        bridge = f"  {HANDSHAKE_COLUMN}" if self.handshake else ""
        lines = [title, f"  {'scenario':{width}}  {'direct':7}{bridge}  through ironcurtain"]
        regressed, unbridged = set(self.regressions()), set(self.unbridged())
        designed = self.by_design()

        def row(name: str, label: str) -> str:
            mark = "  <- REGRESSION" if name in regressed else ""
            mark += "  <- BY DESIGN" if name in designed else ""
            mark += "  <- NOT BRIDGED" if name in unbridged else ""
            direct = f"{_cell(self.direct.get(name)):7}"
            if self.handshake:
                direct += f"  {_cell(self.handshake.get(name)):{len(HANDSHAKE_COLUMN)}}"
            return f"  {label:{width}}  {direct}  {_cell(self.through.get(name))}{mark}"

        lines += [row(n, n) for n in scored]
        if extra:
            lines.append("  run, not scored by the requirement set:")
            lines += [row(n, f"{n} ({self.unscored[n]})") for n in extra]
        lines.append(
            f"  passed (scored): {_passed(self.direct, scored)} of {len(scored)} directly, "
            f"{_passed(self.through, scored)} through ironcurtain"
        )
        lines.append(
            f"  {WIRE} failed (*): in {_wire(self.direct)} scenario(s) directly, "
            f"{_wire(self.through)} through ironcurtain"
        )
        for name, why in sorted(designed.items()):
            lines.append(f"  {name}: by design: {why}")
        for name in sorted(regressed | unbridged):
            failed = self.through[name].failed if name in self.through else ("(not run)",)
            lines.append(f"  {name}: failed through ironcurtain: {', '.join(failed) or '-'}")
        for name, outcome in sorted(self.through.items()):
            lines += [f"  {name}: through ironcurtain, against the schema: {v}"
                      for v in outcome.violations]  # fmt: skip
        return lines


def _verdict(outcome: Outcome | None) -> str:
    return "-" if outcome is None else outcome.verdict


def _cell(outcome: Outcome | None) -> str:
    return _verdict(outcome) + ("*" if outcome is not None and outcome.wire_failed else "")


def _passed(results: dict[str, Outcome], names: list[str]) -> int:
    return sum(_verdict(results.get(n)) == "pass" for n in names)


def _wire(results: dict[str, Outcome]) -> int:
    return sum(o.wire_failed for o in results.values())
