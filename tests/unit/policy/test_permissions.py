"""``permissions.json`` on plain data (globs, every matching entry required, mistakes named by
file and JSON path, checked against the config's servers and the servers' lists) and compiled
rules that name callers, through the real policy engine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from launcher.shared.caller_identity import permissions_problem
from policy import schema
from policy.engine import PolicyEngine
from policy.errors import PolicyFileError
from policy.loader import load_policy_dir
from policy.models import CompiledPolicyFile, ToolAnnotationsFile
from policy.permissions import (
    Permissions,
    check_servers,
    load_permissions,
    parse_permissions,
    unmatched,
)

CRM = {
    "tools": [
        {"server": "crm", "tool": "get_*", "required": ["crm:read"]},
        {"server": "crm", "tool": "*_customer", "required": ["crm:customers"]},
        {"server": "crm", "tool": "delete_*", "required": ["crm:write", "crm:admin"]},
        {"server": "*", "tool": "*", "required": ["staff"]},
    ],
    "prompts": [{"server": "crm", "prompt": "summarize", "required": ["crm:read"]}],
}


def test_every_matching_entry_is_required_and_nothing_else() -> None:
    p = parse_permissions(CRM, "permissions.json")
    assert p.required("tools", "crm", "get_customer") == {"crm:read", "crm:customers", "staff"}
    assert p.required("tools", "crm", "get_order") == {"crm:read", "staff"}
    assert p.required("tools", "crm", "delete_customer") == {
        "crm:write", "crm:admin", "crm:customers", "staff",
    }  # fmt: skip
    assert p.required("tools", "mail", "send") == {"staff"}
    # Prompts and tools are separate lists: the tool globs say nothing of prompts.
    assert p.required("prompts", "crm", "summarize") == {"crm:read"}
    assert p.required("prompts", "crm", "get_customer") == frozenset()


def test_what_a_caller_lacks_is_named_sorted() -> None:
    p = parse_permissions(CRM, "permissions.json")
    held = frozenset({"staff", "crm:read"})
    assert p.missing("tools", "crm", "get_order", held) == []
    assert p.missing("tools", "crm", "delete_customer", held) == [
        "crm:admin", "crm:customers", "crm:write",
    ]  # fmt: skip
    # More than required is fine; a permission is matched exactly, never as a glob.
    assert p.missing("tools", "crm", "get_order", held | {"other"}) == []
    assert p.missing("tools", "crm", "get_order", frozenset({"staff", "crm:*"})) == ["crm:read"]
    assert p.missing("tools", "crm", "get_order", frozenset({"STAFF", "crm:read"})) == ["staff"]


@pytest.mark.parametrize(
    ("server", "tool", "covered"),
    [
        ("crm", "get_x", True),
        ("crm", "GET_x", False),  # case counts
        ("CRM", "get_x", False),
        ("crm2", "get_x", False),
        ("crm", "xget_x", False),  # anchored at both ends
        ("crm", "get_", True),
        ("crm", "get_a/b", True),  # * takes any character (names are not paths)
    ],
)
def test_globs_match_whole_names_case_sensitively(server: str, tool: str, covered: bool) -> None:
    p = parse_permissions(
        {"tools": [{"server": "crm", "tool": "get_*", "required": ["r"]}]}, "permissions.json"
    )
    assert bool(p.required("tools", server, tool)) is covered


def test_no_file_and_an_empty_file_require_nothing(tmp_path: Path) -> None:
    absent = load_permissions(tmp_path / "permissions.json")
    assert not absent and absent.required("tools", "crm", "get") == frozenset()
    (tmp_path / "permissions.json").write_text("{}")
    assert not load_permissions(tmp_path / "permissions.json")
    (tmp_path / "permissions.json").write_text('{"tools": [], "prompts": []}')
    assert load_permissions(tmp_path / "permissions.json") == Permissions()


BAD: list[tuple[Any, str, str]] = [
    ([], "$", "holds a JSON list"),
    ({"tool": []}, "$", 'unknown key "tool"'),
    ({"tools": {}}, "$.tools", "holds a JSON object, not a list"),
    ({"tools": ["crm"]}, "$.tools[0]", "holds a JSON string"),
    ({"tools": [{"server": "crm", "tool": "x", "required": [], "why": 1}]}, "$.tools[0]",
     'unknown key "why"'),
    ({"tools": [{"server": "crm", "prompt": "x", "required": []}]}, "$.tools[0]",
     'unknown key "prompt"'),
    ({"prompts": [{"server": "crm", "tool": "x", "required": []}]}, "$.prompts[0]",
     'unknown key "tool"'),
    ({"tools": [{"server": "crm", "required": ["a"]}]}, "$.tools[0]", 'has no "tool"'),
    ({"tools": [{"tool": "x", "required": ["a"]}]}, "$.tools[0]", 'has no "server"'),
    ({"tools": [{"server": "crm", "tool": "x"}]}, "$.tools[0]", 'has no "required"'),
    ({"tools": [{"server": 1, "tool": "x", "required": []}]}, "$.tools[0].server",
     "expected a name or a glob"),
    ({"tools": [{"server": "crm", "tool": "", "required": []}]}, "$.tools[0].tool",
     "expected a name or a glob"),
    ({"tools": [{"server": "crm", "tool": "x", "required": "crm:read"}]},
     "$.tools[0].required", "holds a JSON string, not a list"),
    ({"tools": [{"server": "crm", "tool": "x", "required": ["a", 7]}]},
     "$.tools[0].required[1]", "it is not a string"),
    ({"tools": [{"server": "crm", "tool": "x", "required": ["crm read"]}]},
     "$.tools[0].required[0]", '"crm read" holds a space'),
    ({"prompts": [{"server": "crm", "prompt": "x", "required": ["ok", "..."]}]},
     "$.prompts[0].required[1]", '"..." is made of dots alone'),
    ({"tools": [{"server": "crm", "tool": "x", "required": ["é"]}]},
     "$.tools[0].required[0]", "non-ASCII"),
]  # fmt: skip


@pytest.mark.parametrize(("data", "path", "says"), BAD)
def test_a_mistake_is_named_by_file_and_json_path(
    tmp_path: Path, data: Any, path: str, says: str
) -> None:
    file = tmp_path / "permissions.json"
    file.write_text(json.dumps(data))
    with pytest.raises(PolicyFileError) as caught:
        load_permissions(file)
    assert caught.value.file == str(file) and caught.value.location == path
    assert says in caught.value.detail, caught.value.detail
    assert str(caught.value).startswith(f"{file}: {path}: ")


def test_a_file_that_is_no_json_is_named_with_its_place(tmp_path: Path) -> None:
    file = tmp_path / "permissions.json"
    file.write_text('{"tools": [\n  {"server": "crm",}\n]}')
    with pytest.raises(PolicyFileError, match=r"permissions.json: line 2 column 20: invalid JSON"):
        load_permissions(file)
    file.write_bytes(b'{"tools": "\xff"}')
    with pytest.raises(PolicyFileError, match="not UTF-8"):
        load_permissions(file)


@pytest.mark.parametrize(
    "permission",
    ["crm:read", "a", "x" * 255, "x" * 256, "", " a", "a\tb", "é", "..", ".a", "a.", "!~"],
)
def test_a_permission_is_written_as_a_callers_permissions_are(permission: str) -> None:
    entry = {"server": "s", "tool": "t", "required": [permission]}
    try:
        parse_permissions({"tools": [entry]}, "p")
        accepted = True
    except PolicyFileError:
        accepted = False
    assert accepted is (permissions_problem([permission]) is None)


def test_the_policy_directory_loads_it(tmp_path: Path) -> None:
    from policy.loader import bundled_policy_dir

    for name in ("tool-annotations.json", "compiled-policy.json"):
        (tmp_path / name).write_bytes((bundled_policy_dir() / name).read_bytes())
    assert not load_policy_dir(tmp_path).permissions
    (tmp_path / "permissions.json").write_text(json.dumps(CRM))
    files = load_policy_dir(tmp_path)
    assert files.permissions.required("prompts", "crm", "summarize") == {"crm:read"}
    (tmp_path / "permissions.json").write_text('{"tools": [{"server": "crm"}]}')
    with pytest.raises(PolicyFileError, match=r"permissions.json: \$.tools\[0\]: has no"):
        load_policy_dir(tmp_path)


def test_an_entry_for_a_server_the_config_lacks_is_a_mistake() -> None:
    p = parse_permissions(CRM, "permissions.json")
    check_servers(p, ["crm", "mail"], "permissions.json")  # "*" matches both
    misspelt = parse_permissions(
        {"prompts": [{"server": "cmr", "prompt": "*", "required": ["a"]}]}, "permissions.json"
    )
    with pytest.raises(PolicyFileError) as caught:
        check_servers(misspelt, ["crm", "mail"], "permissions.json")
    assert caught.value.location == "$.prompts[0].server"
    assert caught.value.detail == "'cmr' matches no server of the config (it defines: crm, mail)"


def test_an_entry_whose_name_matches_nothing_its_servers_list_is_found() -> None:
    p = parse_permissions(CRM, "permissions.json")
    listed = {"tools": {"crm": ["get_customer", "delete_customer"], "mail": ["send"]},
              "prompts": {"crm": ["summarize"]}}  # fmt: skip
    assert unmatched(p, listed) is None
    # A server not running in this session says nothing about its entries.
    assert unmatched(p, {"tools": {"mail": ["send"]}, "prompts": {}}) is None
    listed["tools"]["crm"] = ["get_customer"]
    assert unmatched(p, listed) == (
        "$.tools[2].tool: 'delete_*' matches no tool of crm (its tools: get_customer)"
    )


# -- compiled rules that name callers --------------------------------------------------------

ANNOTATIONS = {
    "servers": {
        "crm": {
            "tools": [{"toolName": "get", "serverName": "crm", "effect": "read",
                       "sideEffects": False, "args": {"path": ["read-path"]}}],
            "prompts": [{"promptName": "summarize", "serverName": "crm", "effect": "read",
                         "sideEffects": False, "args": {"path": ["read-path"]}}],
        }
    }
}  # fmt: skip
CALLER_RULES = {
    "rules": [
        {"name": "billing-may-read", "if": {"caller": ["billing-*", "auditor"]},
         "then": "allow", "reason": "billing reads"},
        {"name": "others-escalate", "if": {"effect": ["read"]}, "then": "escalate",
         "reason": "a human decides"},
    ]
}  # fmt: skip


def _engine(rules: dict[str, Any] = CALLER_RULES) -> PolicyEngine:
    return PolicyEngine(
        schema.validate(CompiledPolicyFile, rules),
        schema.validate(ToolAnnotationsFile, ANNOTATIONS),
    )


@pytest.mark.parametrize(
    ("caller", "rule"),
    [
        ("billing-agent", "billing-may-read"),
        ("billing-", "billing-may-read"),
        ("auditor", "billing-may-read"),
        ("auditor2", "others-escalate"),
        ("Billing-agent", "others-escalate"),  # names are matched case-sensitively
        ("x-billing-agent", "others-escalate"),
        (None, "others-escalate"),  # no caller: a rule naming callers never applies
    ],
)
def test_a_rule_naming_callers_applies_to_those_only(caller: str | None, rule: str) -> None:
    engine = _engine()
    args = {"path": "/srv/data"}
    assert engine.decide("crm", "get", args, caller=caller)[0].rule == rule
    assert engine.decide_prompt("crm", "summarize", args, caller=caller)[0].rule == rule
    decision, _ = engine.decide_resource_read("crm", "file:///srv/data", caller=caller)
    assert decision.rule == rule
    # The same engine, asked again in another order, decides the same (nothing cached by
    # the first caller decides for the next).
    assert engine.decide("crm", "get", args, caller=None)[0].rule == "others-escalate"
    assert engine.decide("crm", "get", args, caller=caller)[0].rule == rule


def test_without_callers_in_the_rules_the_caller_changes_nothing() -> None:
    engine = _engine({"rules": CALLER_RULES["rules"][1:]})
    args = {"path": "/srv/data"}
    assert engine.decide("crm", "get", args)[0] == engine.decide("crm", "get", args, caller="x")[0]


@pytest.mark.parametrize(
    ("caller", "says"),
    [("billing-*", "$.rules[0].if.caller"), (["ok", ""], "$.rules[0].if.caller[1]"),
     ([7], "$.rules[0].if.caller[0]")],
)  # fmt: skip
def test_a_caller_condition_that_is_no_list_of_names_is_named(
    tmp_path: Path, caller: Any, says: str
) -> None:
    from policy.loader import bundled_policy_dir

    (tmp_path / "tool-annotations.json").write_bytes(
        (bundled_policy_dir() / "tool-annotations.json").read_bytes()
    )
    rule = {"name": "r", "if": {"caller": caller}, "then": "allow", "reason": "r"}
    (tmp_path / "compiled-policy.json").write_text(json.dumps({"rules": [rule]}))
    with pytest.raises(PolicyFileError) as caught:
        load_policy_dir(tmp_path)
    assert caught.value.location == says


def test_a_scenario_may_name_its_caller_and_the_verifier_runs_it_as_that_caller() -> None:
    from policy.pipeline.scenarios import Scenario
    from policy.pipeline.verifier import execute

    args = {"path": "/srv/data"}
    scenarios = [
        Scenario(description="billing reads", server="crm", tool="get", arguments=args,
                 caller="billing-agent", expected="allow"),
        Scenario(description="anyone else", server="crm", tool="get", arguments=args,
                 expected="escalate"),
    ]  # fmt: skip
    results = execute(_engine(), scenarios, {"workspace": "/srv"})
    assert [(r.actual, r.rule, r.passed) for r in results] == [
        ("allow", "billing-may-read", True),
        ("escalate", "others-escalate", True),
    ]


def test_the_start_report_says_when_permissions_are_checked_against_no_one() -> None:
    from types import SimpleNamespace

    from launcher.session.report import permissions_note

    def note(permissions: dict[str, Any], caller: object, gateway: object = None) -> str:
        policy = SimpleNamespace(permissions=parse_permissions(permissions, "p"))
        return permissions_note(SimpleNamespace(policy=policy, caller=caller, gateway=gateway))  # type: ignore[arg-type]

    someone = object()
    assert note({}, None) == ""
    assert note(CRM, someone) == " (permissions.json: 5 entries)"
    assert note(CRM, None, someone) == " (permissions.json: 5 entries)"
    assert note(CRM, None) == (
        " (permissions.json: 5 entries; NOT checked: this session has no callers, only its one"
        " user)"
    )


def test_check_previews_a_call_as_a_callers(user: Any) -> None:
    from policy.loader import bundled_policy_dir
    from tests.support.cli import ironcurtain

    policy = user.root / "policy"
    policy.mkdir()
    for name in ("tool-annotations.json", "compiled-policy.json"):
        (policy / name).write_bytes((bundled_policy_dir() / name).read_bytes())
    required = [{"server": "time", "tool": "convert_*", "required": ["time:convert"]},
                {"server": "time", "tool": "*", "required": ["time:read"]}]  # fmt: skip
    (policy / "permissions.json").write_text(json.dumps({"tools": required}))
    caller = user.root / "caller.json"
    caller.write_text('{"name": "billing-agent", "permissions": ["time:read"]}')

    def check(tool: str, *options: str) -> str:
        done = ironcurtain(user, "check", "time", tool, "--policy-dir", str(policy), *options)
        assert done.returncode == 0, done.stderr
        return str(done.stdout)

    out = check("convert_time", "--caller", str(caller))
    assert out.startswith("decision:  deny\nrule:      caller-permissions\n")
    assert "requires:  time:convert, time:read (permissions.json)\n" in out
    assert "caller:    billing-agent: lacks time:convert" in out
    out = check("get_current_time", "--caller", str(caller))
    assert out.startswith("decision:  allow\nrule:      allow-side-effect-free-tools\n")
    assert "caller:    billing-agent: holds what is required" in out
    # Without a caller: the policy's decision, and what a caller would need.
    out = check("convert_time")
    assert out.startswith("decision:  allow\n") and "requires:  time:convert" in out
    bad = ironcurtain(user, "check", "time", "x", "--caller", str(user.root / "none.json"))
    assert (
        bad.returncode == 2 and f"--caller {user.root / 'none.json'}: cannot be read" in bad.stderr
    )


@pytest.mark.parametrize(
    ("caller", "matched"),
    [("svc[prod]", True), ("svcp", False), ("svcd", False), ("ops?", True), ("ops1", False),
     ("ops", False), ("team.a", True), ("teamxa", False)],
)  # fmt: skip
def test_only_a_star_is_special_in_a_caller_rule(caller: str, matched: bool) -> None:
    # As a caller whose name reads as a glob: a rule written for the literal caller
    # "svc[prod]" is that caller's, not any of svcp, svcr, svco or svcd's.
    rules = {"rules": [
        {"name": "named", "if": {"caller": ["svc[prod]", "ops?", "team.a"]}, "then": "allow",
         "reason": "named callers"},
        {"name": "others", "if": {}, "then": "deny", "reason": "everyone else"}]}  # fmt: skip
    engine = _engine(rules)
    rule = engine.decide("crm", "get", {"path": "/srv/data"}, caller=caller)[0].rule
    assert (rule == "named") is matched


def test_only_a_star_is_special_in_permissions_json() -> None:
    p = parse_permissions(
        {"tools": [{"server": "crm", "tool": "delete[1]", "required": ["admin"]},
                   {"server": "c?m", "tool": "*", "required": ["odd"]}]},
        "permissions.json",
    )  # fmt: skip
    assert p.required("tools", "crm", "delete[1]") == frozenset({"admin"})
    assert p.required("tools", "crm", "delete1") == frozenset()
    assert p.required("tools", "c?m", "x") == frozenset({"odd"})
    assert p.required("tools", "crm", "x") == frozenset()


def test_a_server_whose_tools_are_all_guarded_and_that_offers_resources_is_said() -> None:
    from types import SimpleNamespace

    from launcher.session.checks import unguarded_resources

    guarded = parse_permissions(
        {"tools": [{"server": "crm", "tool": "*", "required": ["crm:use"]},
                   {"server": "notes", "tool": "read", "required": ["notes:read"]}]},
        "permissions.json",
    )  # fmt: skip
    plan: Any = SimpleNamespace(policy=SimpleNamespace(permissions=guarded))
    tools = {
        "crm": [{"name": "get"}, {"name": "put"}],
        "notes": [{"name": "read"}, {"name": "list"}],  # one tool open: not all guarded
        "time": [{"name": "now"}],
    }
    offers = {"crm": True, "notes": True, "time": False}
    (said,) = unguarded_resources(plan, tools, offers)
    assert "every tool of 'crm', which also offers resources" in said
    assert unguarded_resources(plan, tools, {**offers, "crm": False}) == []
