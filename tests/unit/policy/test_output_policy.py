"""The output policy's field paths and actions, on plain data: every kind of path (exact,
nested, an object, an array, a leaf in array elements, a nested array leaf, recursive),
which path wins, default deny, masks that keep types, and policies with mistakes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from policy.errors import PolicyFileError
from policy.output import MASKED, load_output_policy, parse_output_policy

RECORD: dict[str, Any] = {
    "customer": {
        "id": 7,
        "name": {"first_name": "Ada", "last_name": "Lovelace"},
        "email": "ada@example.com",
        "ssn": "123-45-6789",
        "vip": True,
        "phones": [{"number": "555-0100", "kind": "home"}, {"number": "555-0101", "kind": "work"}],
        "tags": ["a", "b"],
    },
    "orders": [{"id": 1, "email": "billing@example.com"}, {"id": 2, "email": "x@example.com"}],
}


def apply(fields: dict[str, str], value: Any = RECORD) -> tuple[Any, int, int]:
    policy = parse_output_policy(
        {"tools": [{"server": "crm", "tool": "get", "fields": fields}]}, "p"
    )
    entry = policy.for_tool("crm", "get")
    assert entry is not None
    out, counts = entry.apply(value)
    return out, counts.masked, counts.removed


def test_an_exact_leaf_field_and_nothing_else() -> None:
    out, masked, removed = apply({".customer.id": "allow"})
    assert out == {"customer": {"id": 7}}
    assert (masked, removed) == (0, 15)  # every other leaf is gone: default deny


def test_a_nested_leaf_field() -> None:
    out, _, _ = apply({".customer.name.first_name": "allow"})
    assert out == {"customer": {"name": {"first_name": "Ada"}}}


def test_a_path_ending_at_an_object_covers_its_subtree() -> None:
    assert apply({".customer.name": "allow"})[0] == {
        "customer": {"name": {"first_name": "Ada", "last_name": "Lovelace"}}
    }
    out, _, _ = apply({".customer": "allow", ".customer.name": "redact"})
    assert "name" not in out["customer"] and out["customer"]["email"] == "ada@example.com"


def test_all_array_elements() -> None:
    out, _, _ = apply({".orders[]": "allow"})
    assert out == {"orders": RECORD["orders"]}
    out, _, _ = apply({".customer.tags[]": "mask"})
    assert out == {"customer": {"tags": [MASKED, MASKED]}}


def test_a_leaf_field_in_array_elements() -> None:
    out, _, _ = apply({".orders[].id": "allow"})
    assert out == {"orders": [{"id": 1}, {"id": 2}]}


def test_a_nested_array_leaf() -> None:
    out, _, _ = apply({".customer.phones[].number": "allow"})
    assert out == {"customer": {"phones": [{"number": "555-0100"}, {"number": "555-0101"}]}}


def test_recursive_descent_finds_the_field_at_any_depth() -> None:
    out, masked, _ = apply({"..email": "mask", ".customer.id": "allow"})
    assert out == {
        "customer": {"id": 7, "email": MASKED},
        "orders": [{"email": MASKED}, {"email": MASKED}],
    }
    assert masked == 3


def test_the_most_specific_path_wins_whatever_the_order() -> None:
    forward = {
        ".customer.name.first_name": "allow",
        "..first_name": "redact",
        ".customer.name": "allow",
    }
    backward = dict(reversed(list(forward.items())))
    for fields in (forward, backward):
        out, _, _ = apply(fields)
        assert out["customer"]["name"] == {"first_name": "Ada", "last_name": "Lovelace"}
    out, _, _ = apply({"..first_name": "redact", ".customer.name": "allow"})
    assert out["customer"]["name"] == {"last_name": "Lovelace"}  # the field's own path wins


def test_at_equal_specificity_the_stricter_action_wins() -> None:
    fields = {".customer.email": "allow", '."customer"."email"': "redact"}
    out, _, _ = apply(fields)
    assert out == {}  # both name the same field with two steps: redact beats allow
    out, _, _ = apply({".customer.email": "mask", '."customer".email': "allow"})
    assert out == {"customer": {"email": MASKED}}


def test_mask_keeps_each_type() -> None:
    # A masked object or array is masked whole: its keys may be the data.
    out, masked, _ = apply({".customer": "mask"})
    assert out == {"customer": {}} and masked == 1
    assert apply({".customer.tags": "mask"})[0] == {"customer": {"tags": []}}
    assert apply({".x": "mask"}, {"x": 2.5, "y": None})[0] == {"x": 0.0}
    # With a path that names a field inside it, the others keep their names, values masked
    # (an object or array among them whole).
    out, masked, _ = apply({".customer": "mask", ".customer.id": "allow"})
    c = out["customer"]
    assert c["id"] == 7 and c["vip"] is False and c["email"] == MASKED
    assert c["name"] == {} and c["phones"] == [] and c["tags"] == []


def test_a_masked_map_keyed_by_the_data_shows_no_key() -> None:
    record = {"customer": {"id": 7, "email": {"ada@example.com": True, "123-45-6789": True}}}
    out, masked, _ = apply({".customer.id": "allow", "..email": "mask"}, record)
    assert out == {"customer": {"id": 7, "email": {}}} and masked == 1
    assert "123-45-6789" not in json.dumps(out)


def test_default_deny_leaves_an_empty_result_not_none() -> None:
    assert apply({".nothing": "allow"}) == ({}, 0, 16)
    assert apply({".nothing": "allow"}, [1, 2])[0] == []


def test_a_redacted_object_keeps_a_more_specific_allowed_field() -> None:
    out, _, _ = apply({".customer": "redact", ".customer.id": "allow"})
    assert out == {"customer": {"id": 7}}


def test_empty_containers_follow_their_rule() -> None:
    value: dict[str, object] = {"a": {}, "b": [], "c": {}}
    out, _, removed = apply({".a": "allow", ".b": "mask", ".c": "redact"}, value)
    assert out == {"a": {}, "b": []} and removed == 1


def test_the_input_is_not_changed() -> None:
    before = json.dumps(RECORD, sort_keys=True)
    apply({"..email": "mask"})
    assert json.dumps(RECORD, sort_keys=True) == before


def test_globs_pick_the_tool_and_the_first_entry_wins() -> None:
    policy = parse_output_policy(
        {"tools": [
            {"server": "crm", "tool": "get_*", "fields": {".id": "allow"}},
            {"server": "*", "tool": "*", "fields": {".name": "allow"}},
        ]},
        "p",
    )  # fmt: skip
    first, second = policy.for_tool("crm", "get_customer"), policy.for_tool("db", "query")
    assert first is not None and first.apply({"id": 1, "name": "n"})[0] == {"id": 1}
    assert second is not None and second.apply({"id": 1, "name": "n"})[0] == {"name": "n"}
    assert policy.for_tool("crm", "list") is not None  # the catch-all
    assert parse_output_policy({"tools": []}, "p").for_tool("crm", "get") is None


@pytest.mark.parametrize(
    ("data", "where", "says"),
    [
        ([], "$", 'expected {"tools": [...]}'),
        ({"tools": [], "extra": 1}, "$", "nothing else"),
        ({"tools": {}}, "$.tools", "expected a list"),
        ({"tools": [3]}, "$.tools[0]", "expected an object"),
        ({"tools": [{"server": "s", "tool": "t", "fields": {}, "x": 1}]}, "$.tools[0]", "'x'"),
        ({"tools": [{"tool": "t", "fields": {".a": "allow"}}]}, "$.tools[0].server", "a name"),
        ({"tools": [{"server": "s", "tool": "t", "fields": {}}]}, "$.tools[0].fields", "path"),
        ({"tools": [{"server": "s", "tool": "t", "fields": {"a": "allow"}}]},
         '$.tools[0].fields["a"]', "starts with '.'"),
        ({"tools": [{"server": "s", "tool": "t", "fields": {".a..": "allow"}}]},
         '$.tools[0].fields[".a.."]', "at character 3"),
        ({"tools": [{"server": "s", "tool": "t", "fields": {".[]": "allow"}}]},
         '$.tools[0].fields[".[]"]', "at character 1"),
        ({"tools": [{"server": "s", "tool": "t", "fields": {".a": "keep"}}]},
         '$.tools[0].fields[".a"]', "'keep': expected allow, mask or redact"),
    ],
)  # fmt: skip
def test_mistakes_are_named_with_their_place(data: Any, where: str, says: str) -> None:
    with pytest.raises(PolicyFileError) as raised:
        parse_output_policy(data, "output-policy.json")
    assert raised.value.location == where
    assert says in raised.value.detail


def test_the_file_is_read_and_its_absence_is_no_policy(tmp_path: Path) -> None:
    path = tmp_path / "output-policy.json"
    assert load_output_policy(path).tools == []
    path.write_text("{not json")
    with pytest.raises(PolicyFileError, match="not JSON"):
        load_output_policy(path)
    path.write_text(
        json.dumps({"tools": [{"server": "s", "tool": "t", "fields": {"..x": "mask"}}]})
    )
    assert [t.tool for t in load_output_policy(path)] == ["t"]


def test_what_cannot_be_filtered_by_field_is_removed_from_a_tool_with_a_policy() -> None:
    from launcher.relay.outputs import UNFILTERABLE, Outputs

    policy = parse_output_policy(
        {"tools": [{"server": "crm", "tool": "get", "fields": {".id": "allow"}}]}, "p"
    )
    answer = {
        "content": [
            {"type": "text", "text": '{"id": 1, "ssn": "123-45-6789"}'},
            {"type": "text", "text": "Customer 1, SSN 123-45-6789"},  # prose: no fields
            {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "crm://1", "mimeType": "text/csv",
                                              "text": "id,ssn\n1,123-45-6789"}},
            {"type": "resource", "resource": {"uri": "crm://1.json", "mimeType": "application/json",
                                              "text": '{"id": 1, "ssn": "x"}'}},
        ]
    }  # fmt: skip
    shown, record = Outputs(policy, {}).answer("crm", "tools/call", "get", answer)
    content = shown["content"]
    assert json.loads(content[0]["text"]) == {"id": 1}
    assert content[1] == content[2] == content[3] == {"type": "text", "text": UNFILTERABLE}
    assert json.loads(content[4]["resource"]["text"]) == {"id": 1}
    assert "123-45-6789" not in json.dumps(shown)
    assert record == {"fieldsRemoved": 5}
    # Another tool of the server has no output policy: its prose passes.
    other, none = Outputs(policy, {}).answer("crm", "tools/call", "list", answer)
    assert other == answer and none is None


def test_schema_conflicts_name_required_fields_removed_and_constrained_masks() -> None:
    from policy.output import schema_conflicts

    schema = {
        "type": "object",
        "required": ["customer", "orders"],
        "properties": {
            "customer": {
                "type": "object",
                "required": ["id", "ssn", "tier"],
                "properties": {
                    "id": {"type": "integer"},
                    "ssn": {"type": "string"},
                    "tier": {"type": "string", "enum": ["gold", "silver"]},
                    "email": {"type": "string", "format": "email"},
                },
            },
            "orders": {
                "type": "array",
                "items": {"type": "object", "required": ["id"], "properties": {"id": {}}},
            },
        },
    }

    def conflicts(fields: dict[str, str]) -> list[str]:
        entry = {"server": "s", "tool": "t", "fields": fields}
        return schema_conflicts(parse_output_policy({"tools": [entry]}, "p").tools[0], schema)

    assert conflicts({".customer": "allow", ".orders": "allow"}) == []
    assert conflicts({".customer.id": "allow", ".orders[].id": "allow"}) == [
        ".customer.ssn is required and removed",
        ".customer.tier is required and removed",
    ]
    assert conflicts({".customer": "mask", ".orders": "allow"}) == [
        ".customer.tier is masked and its schema has enum",
        ".customer.email is masked and its schema has format",
    ]
    assert conflicts({".customer": "allow", ".customer.ssn": "redact", ".orders[]": "allow"}) == [
        ".customer.ssn is required and removed"
    ]
    assert conflicts({".customer": "allow"}) == [".orders is required and removed"]
