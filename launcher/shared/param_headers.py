"""A tool's ``Mcp-Param-{Name}`` headers (HTTP, the stateless era), checked against the body;
and the tools whose marks for them are unusable, which ironcurtain lists to no client.

A tool's input schema may mark a top-level argument of a primitive type (string, number,
integer, boolean) with ``x-mcp-header: NAME``: a client then mirrors the argument's value in
the header ``Mcp-Param-NAME`` (plain visible ASCII, or ``=?base64?…?=`` for what a header
cannot hold), so what routes on headers sees what the server will act on. A request whose
header and body disagree is refused (``-32020``, answered 400): the header is missing while
the body has the value, present while the body has none, not decodable, not what the body
says (numbers compared as numbers), or repeated. The schema is the tool's as the caller is
shown it; a header no argument of it is marked for is not ironcurtain's to judge and is
ignored, and so is every header of a tool the caller is not shown (the gate refuses the
call itself, and nothing about the tool is told through a header's answer).
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections.abc import Sequence

PREFIX = "mcp-param-"
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # an HTTP field name (RFC 9110 tchar)
_PRIMITIVE = frozenset({"string", "number", "integer", "boolean"})
_PLAIN = re.compile(r"[\x20-\x7e\t]*")


def marked(schema: object) -> dict[str, str]:
    """The arguments a tool's input schema marks for a header: argument -> header name
    (lower case); a mark that is no valid header name, or on a non-primitive, is not one."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        return {}
    found: dict[str, str] = {}
    for argument, spec in properties.items():
        mark = spec.get("x-mcp-header") if isinstance(spec, dict) else None
        kind = spec.get("type") if isinstance(spec, dict) else None
        if isinstance(mark, str) and _TOKEN.fullmatch(mark) and kind in _PRIMITIVE:
            found[str(argument)] = PREFIX + mark.lower()
    return found


def fault(tool: object) -> str | None:
    """What makes a tool's ``x-mcp-header`` marks unusable (a client lists no such tool),
    or None: a mark that is empty or no HTTP field name, on an argument that is not of a
    primitive type, or the same header (in any case) twice."""
    schema = tool.get("inputSchema") if isinstance(tool, dict) else None
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        return None
    seen: set[str] = set()
    for argument, spec in properties.items():
        if not isinstance(spec, dict) or "x-mcp-header" not in spec:
            continue
        mark = spec["x-mcp-header"]
        if not isinstance(mark, str) or not _TOKEN.fullmatch(mark):
            return f"argument {argument!r}: x-mcp-header {mark!r} is no header name"
        if spec.get("type") not in _PRIMITIVE:
            return f"argument {argument!r}: x-mcp-header on a {spec.get('type')!r}"
        if mark.lower() in seen:
            return f"argument {argument!r}: x-mcp-header {mark!r} is marked twice"
        seen.add(mark.lower())
    return None


def mismatch(
    headers: Sequence[tuple[bytes, bytes]], schema: object, arguments: object
) -> str | None:
    """What a ``tools/call``'s ``Mcp-Param-*`` headers say that its arguments do not (the
    tool's input schema ``schema``), or None when they agree."""
    wanted = marked(schema)
    if not wanted:
        return None
    sent: dict[str, list[str]] = {}
    for key, value in headers:
        name = key.decode("latin-1").lower()
        if name.startswith(PREFIX):
            sent.setdefault(name, []).append(value.decode("latin-1"))
    args = arguments if isinstance(arguments, dict) else {}
    for argument, header in wanted.items():
        shown = f"the {header.title()} header"
        values = sent.get(header, [])
        body = args.get(argument)
        if len(values) > 1:
            return f"{shown} is repeated"
        if body is None:
            if values:
                return f"{shown} is sent but the argument {argument!r} is not"
            continue
        if not values:
            return f"{shown} is missing (the argument {argument!r} is given)"
        said = decoded(values[0])
        if said is None:
            return f"{shown} holds characters a header value cannot, or bad base64"
        if not agrees(said, body):
            return f"{shown} is not the argument {argument!r}"
    return None


def decoded(value: str) -> str | None:
    """A header value as its client meant it: ``=?base64?…?=`` decoded (strictly: the
    alphabet and padding), else as it stands when plain visible ASCII; None otherwise."""
    if value.startswith("=?base64?") and value.endswith("?=") and len(value) >= 11:
        try:
            return base64.b64decode(value[9:-2], validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
    return value if _PLAIN.fullmatch(value) else None


def agrees(header: str, body: object) -> bool:
    """Whether a decoded header value is the argument ``body``: the same string, the same
    boolean as ``true``/``false``, or the same number (compared as numbers)."""
    if isinstance(body, bool):
        return header == ("true" if body else "false")
    if isinstance(body, int | float):
        try:
            number = float(header.strip())
        except ValueError:
            return False
        return math.isfinite(number) and number == body
    return isinstance(body, str) and header == body
