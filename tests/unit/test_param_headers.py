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
    assert marked(schema) == {"a": "mcp-param-a"}
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
