"""scripts/conformance/results.py: what the conformance suite wrote is read as the suite
means it (a scenario fails when one of its checks fails, wire-schema failures are seen), the
requirement set's unscored scenarios are found, and a scenario that passes directly but not
through ironcurtain is counted, scored or not, whether it failed, checked nothing or did not
run."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.paths import REPO


def _load() -> ModuleType:
    path = REPO / "scripts" / "conformance" / "results.py"
    spec = importlib.util.spec_from_file_location("conformance_results", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


results = _load()


def _scenario(out: Path, name: str, *checks: tuple[str, str]) -> None:
    """A scenario's directory as the suite writes it: server-<name>-<ISO time>/checks.json."""
    place = out / f"server-{name}-2026-11-29T03-06-28-646Z"
    place.mkdir(parents=True)
    body = [{"id": i, "name": i, "status": s, "timestamp": "t"} for i, s in checks]
    (place / "checks.json").write_text(json.dumps(body))


def test_a_scenario_fails_when_one_check_fails_and_wire_schema_failures_are_seen(
    tmp_path: Path,
) -> None:
    _scenario(tmp_path, "tools-list", ("tools-list", "SUCCESS"), ("wire-schema-valid", "SUCCESS"))
    _scenario(tmp_path, "caching", ("sep-2549-ttl", "FAILURE"), ("sep-2549-ttl", "FAILURE"),
              ("sep-2549-read", "SKIPPED"), ("wire-schema-valid", "FAILURE"))  # fmt: skip
    _scenario(tmp_path, "sep-2164-resource-not-found", ("sep-2164-error-code", "WARNING"))
    _scenario(tmp_path, "tasks-status-notifications", ("tasks-status", "SKIPPED"))
    (tmp_path / "server-json-schema-2020-12-2026-11-29T03-06-29-695Z").mkdir()  # no checks
    found = results.read_results(tmp_path)
    assert sorted(found) == [
        "caching", "sep-2164-resource-not-found", "tasks-status-notifications", "tools-list",
    ]  # fmt: skip
    assert found["tools-list"].verdict == "pass" and not found["tools-list"].wire_failed
    assert found["caching"].verdict == "FAIL" and found["caching"].wire_failed
    assert found["caching"].failed == ("sep-2549-ttl", "wire-schema-valid")
    assert found["sep-2164-resource-not-found"].verdict == "pass"  # a warning is not a failure
    assert found["tasks-status-notifications"].verdict == "skip"


REQUIREMENTS = """\
server:
  - server-stateless
  - tools-list

client:
  - tools_call

not_scored:
  - scenario: auth/dpop
    leg: client
    reason: extension
  - scenario: tasks-lifecycle
    leg: server
    reason: extension
    note: >-
      io.modelcontextprotocol/tasks (SEP-2663); pending against the reference fixture
  - scenario: json-schema-2020-12
    leg: server
    reason: pending
"""


def test_the_unscored_server_scenarios_of_a_requirement_set(tmp_path: Path) -> None:
    (tmp_path / "2026-07-28.yaml").write_text(REQUIREMENTS)
    assert results.not_scored(tmp_path / "2026-07-28.yaml") == {
        "tasks-lifecycle": "extension",
        "json-schema-2020-12": "pending",
    }


def _outcome(verdict: str) -> object:
    return {
        "pass": results.Outcome((), 2),
        "FAIL": results.Outcome(("x",), 1),
        "skip": results.Outcome((), 0),
    }[verdict]


@pytest.mark.parametrize(
    ("direct", "through", "regressed"),
    [
        ("pass", "pass", False),
        ("pass", "FAIL", True),
        ("pass", "skip", True),  # checked nothing through ironcurtain: not a pass
        ("pass", None, True),  # did not run through ironcurtain
        ("FAIL", "pass", False),
        ("FAIL", "FAIL", False),
        ("skip", "FAIL", False),
    ],
)
def test_what_counts_as_passing_directly_and_failing_through(
    direct: str, through: str | None, regressed: bool
) -> None:
    both = results.Comparison(
        "2026-07-28",
        {"tools-list": _outcome(direct)},
        {} if through is None else {"tools-list": _outcome(through)},
        {},
    )
    assert both.regressions() == (["tools-list"] if regressed else [])


def test_the_table_marks_regressions_unscored_ones_too_and_names_the_failed_checks() -> None:
    passed = results.Outcome(("wire-schema-valid",), 0), results.Outcome((), 3)
    both = results.Comparison(
        "2026-07-28",
        {"tools-list": results.Outcome((), 2), "json-schema-2020-12": results.Outcome((), 1),
         "caching": passed[0]},
        {"tools-list": results.Outcome(("tools-list", "wire-schema-valid"), 1),
         "json-schema-2020-12": results.Outcome(("json-schema-2020-12-error",), 0),
         "caching": passed[1]},
        {"json-schema-2020-12": "pending"},
    )  # fmt: skip
    assert both.regressions() == ["json-schema-2020-12", "tools-list"]
    lines = both.table("title")
    rows = {line.split()[0]: line for line in lines[2:] if line.startswith("  ")}
    assert rows["tools-list"].split()[1:] == ["pass", "FAIL*", "<-", "REGRESSION"]
    assert rows["caching"].split()[1:] == ["FAIL*", "pass"]
    assert rows["json-schema-2020-12"].split()[1:] == ["(pending)", "pass", "FAIL", "<-",
                                                       "REGRESSION"]  # fmt: skip
    assert "  passed (scored): 1 of 2 directly, 1 through ironcurtain" in lines
    assert "  wire-schema-valid failed (*): in 1 scenario(s) directly, 1 through ironcurtain" in (
        lines
    )
    assert "  tools-list: failed through ironcurtain: tools-list, wire-schema-valid" in lines


def test_a_handshake_era_pass_must_carry_over_to_the_stateless_era_through_ironcurtain() -> None:
    """A server of the handshake era only fails the stateless era's set directly; through
    ironcurtain, which speaks that era for it, what it passes in the handshake era's set
    should pass in the stateless era's too."""
    passed, failed = results.Outcome((), 2), results.Outcome(("x",), 0)
    both = results.Comparison(
        "2026-07-28",
        {"tools-list": failed, "tools-call-with-progress": failed, "caching": failed,
         "prompts-list": passed},
        {"tools-list": passed, "tools-call-with-progress": failed, "caching": passed,
         "prompts-list": failed},
        {},
        {"tools-list": passed, "tools-call-with-progress": passed, "prompts-list": passed,
         "ping": passed},
    )  # fmt: skip
    assert both.regressions() == ["prompts-list"]  # counted once, as the regression it is
    assert both.unbridged() == ["tools-call-with-progress"]  # ping: not in the stateless set
    lines = both.table("title")
    assert lines[1].split() == ["scenario", "direct", "direct,", "2025-11-25", "through",
                                "ironcurtain"]  # fmt: skip
    rows = {line.split()[0]: line.split()[1:] for line in lines[2:] if line.startswith("  ")}
    assert rows["tools-call-with-progress"] == ["FAIL", "pass", "FAIL", "<-", "NOT", "BRIDGED"]
    assert rows["caching"] == ["FAIL", "-", "pass"]
    assert rows["prompts-list"] == ["pass", "pass", "FAIL", "<-", "REGRESSION"]


def test_what_ironcurtain_sent_against_the_schema_is_named(tmp_path: Path) -> None:
    """The suite's wire-schema-valid check lists each message that broke the revision's
    schema; what ironcurtain sent is printed under the table, what the suite itself sent
    (a harness error) is not counted against it."""
    place = tmp_path / "server-tools-list-2026-11-29T03-06-28-646Z"
    place.mkdir()
    bad = {
        "origin": "implementation",
        "context": "response to 'tools/list'",
        "errors": ["JSONRPCErrorResponse/id: must be string,integer"],
        "message": {},
    }
    ours = {"origin": "harness", "context": "request 'tools/list'", "errors": ["x"]}
    checks = [{"id": "tools-list", "status": "SUCCESS"},
              {"id": "wire-schema-valid", "status": "FAILURE",
               "details": {"messagesValidated": 2, "violations": [bad, ours]}}]  # fmt: skip
    (place / "checks.json").write_text(json.dumps(checks))
    found = results.read_results(tmp_path)
    assert found["tools-list"].violations == (
        "response to 'tools/list': JSONRPCErrorResponse/id: must be string,integer",
    )
    both = results.Comparison("2026-07-28", {}, found, {})
    assert both.table("title")[-1] == (
        "  tools-list: through ironcurtain, against the schema: response to 'tools/list': "
        "JSONRPCErrorResponse/id: must be string,integer"
    )


def test_only_what_ironcurtain_does_on_purpose_is_not_a_regression() -> None:
    name = "input-required-result-basic-list-roots"
    direct = {name: results.Outcome((), 2)}
    only_roots = results.Outcome(("sep-2322-list-roots-incomplete",), 1)
    more = results.Outcome(("sep-2322-list-roots-incomplete", "wire-schema-valid"), 0)
    designed = results.Comparison("2026-07-28", direct, {name: only_roots}, {})
    assert designed.regressions() == [] and name in designed.by_design()
    assert any("by design" in line for line in designed.table("t"))
    broken = results.Comparison("2026-07-28", direct, {name: more}, {})
    assert broken.regressions() == [name] and broken.by_design() == {}
