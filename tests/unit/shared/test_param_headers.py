"""A tool's ``Mcp-Param-*`` headers held to its arguments (the cases of the streamable HTTP
transport's table): which arguments a schema marks, and what a header must say."""

from __future__ import annotations

import pytest

from launcher.relay.router import Router
from launcher.shared.param_headers import agrees, decoded, fault, marked, mismatch

SCHEMA = {
    "type": "object",
    "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "count": {"type": "integer", "x-mcp-header": "Count"},
        "dry": {"type": "boolean", "x-mcp-header": "Dry"},
        "note": {"type": "string"},
    },
}


def headers(**values: str) -> list[tuple[bytes, bytes]]:
    return [(f"mcp-param-{k}".encode(), v.encode("latin-1")) for k, v in values.items()]


def test_only_a_valid_mark_on_a_primitive_is_a_header() -> None:
    schema = {
        "properties": {
            "a": {"type": "string", "x-mcp-header": "A"},
            "b": {"type": "object", "x-mcp-header": "B"},  # not a primitive
            "c": {"type": "string", "x-mcp-header": ""},  # empty
            "d": {"type": "string", "x-mcp-header": "D:x"},  # not a field name
            "e": {"type": "string", "x-mcp-header": "E\r\nSet-Cookie"},
            "f": {"type": "number"},
        }
    }
    assert marked(schema) == {("a",): "mcp-param-a"}
    assert marked(None) == {} and marked({"properties": []}) == {}


def test_headers_that_say_what_the_body_does_pass() -> None:
    args = {"region": "us-west1", "count": 42, "dry": False, "note": "x"}
    assert mismatch(headers(region="us-west1", count="42", dry="false"), SCHEMA, args) is None
    # A number compared as a number; a header name in any case; base64 decoded.
    sent = [(b"MCP-PARAM-REGION", b"=?base64?dXMtd2VzdDE=?="), *headers(count="42.0", dry="false")]
    assert mismatch(sent, SCHEMA, args) is None
    # Arguments absent or null: no header expected.
    assert mismatch([], SCHEMA, {"note": "x", "region": None}) is None


@pytest.mark.parametrize(
    ("sent", "args", "why"),
    [
        (headers(region="eu-west1"), {"region": "us-west1"}, "is not the argument"),
        ([], {"region": "us-west1"}, "is missing"),
        (headers(region="us-west1"), {}, "is sent but the argument"),
        (headers(region="=?base64?SGVsbG8?="), {"region": "Hello"}, "bad base64"),  # padding
        (headers(region="=?base64?SGVs!!!bG8=?="), {"region": "Hello"}, "bad base64"),
        (headers(region="caf\xe9"), {"region": "caf\xe9"}, "characters a header value cannot"),
        (headers(count="4two"), {"count": 42}, "is not the argument"),
        (headers(dry="False"), {"dry": False}, "is not the argument"),
        (headers(region="x"), {"region": {"a": 1}}, "is sent but the argument"),
        (headers(region="a") + headers(region="a"), {"region": "a"}, "is repeated"),
    ],
)
def test_a_header_that_disagrees_with_the_body_is_refused(
    sent: list[tuple[bytes, bytes]], args: dict[str, object], why: str
) -> None:
    said = mismatch(sent, SCHEMA, args)
    assert said is not None and why in said
    assert "Mcp-Param-" in said


def test_a_header_no_argument_is_marked_for_is_ignored() -> None:
    # Not this tool's to judge: an unmarked argument's header, or one naming nothing.
    sent = headers(note="something else", other="whatever")
    assert mismatch(sent, SCHEMA, {"note": "x"}) is None
    assert mismatch(headers(region="anything"), {"properties": {}}, {"region": "x"}) is None


def test_values_without_both_markers_are_literal() -> None:
    assert decoded("SGVsbG8=") == "SGVsbG8="
    assert decoded("=?base64?SGVsbG8=") == "=?base64?SGVsbG8="
    assert decoded("=?base64?SGVsbG8=?=") == "Hello"
    assert agrees("=?base64?SGVsbG8=", "=?base64?SGVsbG8=")
    assert not agrees("1", True) and not agrees("nan", float("nan"))


def test_a_tool_whose_marks_are_unusable_is_listed_to_no_client() -> None:
    def tool(name: str, **properties: dict[str, object]) -> dict[str, object]:
        return {"name": name, "inputSchema": {"type": "object", "properties": properties}}

    tools = [
        tool("fine", a={"type": "string", "x-mcp-header": "A"}, b={"type": "object"}),
        tool("empty", a={"type": "string", "x-mcp-header": ""}),
        tool("colon", a={"type": "string", "x-mcp-header": "A:B"}),
        tool("object", a={"type": "object", "x-mcp-header": "A"}),
        tool(
            "twice",
            a={"type": "string", "x-mcp-header": "Same"},
            b={"type": "integer", "x-mcp-header": "same"},
        ),
    ]
    assert [t["name"] for t in tools if fault(t) is None] == ["fine"]
    router = Router(prefixed=False)
    router.build({"s": Listed(tools)})
    assert [t["name"] for t in router.exposed_tools] == ["fine"]
    assert router.target("tools/call", {"name": "twice"})[0] is None


class Listed:
    def __init__(self, tools: list[dict[str, object]]) -> None:
        self.tools = tools
        self.prompts: list[dict[str, object]] = []
        self.resources: list[dict[str, object]] = []
        self.resource_templates: list[dict[str, object]] = []
        self.capabilities: dict[str, object] = {"tools": {}}


# -- attacks: a header that says other than the body, yet was taken to agree -------------


@pytest.mark.parametrize(
    ("header", "body"),
    [
        ("9007199254740993", 9007199254740992),  # the same float, another integer
        ("1_000", 1000),  # Python's float() reads digit separators
        ("=?base64?2aHZog==?=", 12),  # Arabic-Indic "12", which float() reads as 12
        ("=?base64?IDQyIA==?=", 42),  # " 42 ": float() strips what a router would not
        ("1e3", 1000),
        ("+42", 42),
        ("0.1000000000000000055511151231257827", 0.1),  # 0.1's binary value, not 0.1
    ],
)
def test_a_number_header_is_the_bodys_number_exactly_or_refused(header: str, body: object) -> None:
    sent = headers(count=header)
    said = mismatch(sent, SCHEMA, {"count": body})
    assert said is not None and "is not the argument" in said


def test_control_numbers_written_as_a_client_writes_them_agree() -> None:
    for header, body in [("42", 42), ("42.0", 42), ("-7", -7), ("0.1", 0.1), ("0.10", 0.1),
                         ("9007199254740993", 9007199254740993), ("1e+21", 1e21)]:  # fmt: skip
        assert mismatch(headers(count=header), SCHEMA, {"count": body}) is None, header


def test_base64_in_another_spelling_than_the_canonical_one_is_refused() -> None:
    # "YR==" decodes to "a" as "YQ==" does (its last bits are not zero): a router that
    # matches the header as written sees a value no client sends for "a".
    said = mismatch(headers(region="=?base64?YR==?="), SCHEMA, {"region": "a"})
    assert said is not None and "bad base64" in said
    assert mismatch(headers(region="=?base64?YQ==?="), SCHEMA, {"region": "a"}) is None


def test_a_tab_in_a_plain_header_is_refused() -> None:
    # A client sends such a value in base64; a tab as written is folded by some readers.
    said = mismatch(headers(region="a\tb"), SCHEMA, {"region": "a\tb"})
    assert said is not None and "characters a header value cannot" in said


NESTED = {
    "type": "object",
    "properties": {
        "target": {
            "type": "object",
            "properties": {"host": {"type": "string", "x-mcp-header": "Host"}},
        }
    },
}


def test_a_nested_marked_argument_is_held_to_its_header() -> None:
    args = {"target": {"host": "internal.example"}}
    said = mismatch(headers(host="public.example"), NESTED, args)
    assert said is not None and "'target.host'" in said
    assert "is missing" in (mismatch([], NESTED, args) or "")
    # CONTROL: the header that says what the body does passes.
    assert mismatch(headers(host="internal.example"), NESTED, args) is None
    assert marked(NESTED) == {("target", "host"): "mcp-param-host"}


@pytest.mark.parametrize(
    "schema",
    [
        {"properties": {"a": {"type": "array", "items": {"type": "string", "x-mcp-header": "A"}}}},
        {"properties": {"a": {"anyOf": [{"type": "string", "x-mcp-header": "A"}]}}},
        {"$defs": {"a": {"type": "string", "x-mcp-header": "A"}}, "properties": {}},
        {"type": "object", "x-mcp-header": "Root"},
        {
            "properties": {
                "a": {
                    "type": "object",
                    "additionalProperties": {"type": "string", "x-mcp-header": "A"},
                }
            }
        },
        {
            "properties": {
                "a": {
                    "type": "object",
                    "properties": {"b": {"type": "string", "x-mcp-header": "Same"}},
                },
                "c": {"type": "string", "x-mcp-header": "same"},
            }
        },
    ],
)
def test_a_mark_where_no_argument_is_or_repeated_in_depth_makes_the_tool_unusable(
    schema: dict[str, object],
) -> None:
    assert fault({"name": "t", "inputSchema": schema}) is not None
    # CONTROL: the same tool without the mark is usable.
    assert fault({"name": "t", "inputSchema": {"properties": {"a": {"type": "string"}}}}) is None
