"""A tool's ``Mcp-Param-{Name}`` headers (HTTP, the stateless era), checked against the body;
and the tools whose marks for them are unusable, which ironcurtain lists to no client.

A tool's input schema may mark a property of a primitive type (string, number, integer,
boolean) with ``x-mcp-header: NAME``, at the top level or nested in objects (reached from
the root through ``properties`` alone): a client then mirrors the argument's value in the
header ``Mcp-Param-NAME`` (plain visible ASCII, or ``=?base64?…?=`` for what a header
cannot hold), so what routes on headers sees what the server will act on. A request whose
header and body disagree is refused (``-32020``, answered 400): the header is missing while
the body has the value, present while the body has none, not decodable (base64 in its one
canonical form), not what the body says (numbers compared exactly, as decimals), or
repeated. A mark anywhere else in the schema (under ``items``, ``anyOf``, ``$defs``...), or
unusable, makes the tool unusable. The schema is the tool's as the caller is shown it; a
header no argument of it is marked for is not ironcurtain's to judge and is ignored, and so
is every header of a tool the caller is not shown (the gate refuses the call itself, and
nothing about the tool is told through a header's answer).
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections.abc import Iterator, Sequence

PREFIX = "mcp-param-"
MARK = "x-mcp-header"
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # an HTTP field name (RFC 9110 tchar)
_PRIMITIVE = frozenset({"string", "number", "integer", "boolean"})
_PLAIN = re.compile(r"[\x20-\x7e]*")
# How a number is written in a header: plain decimal digits, no exponent, sign, separator.
_DECIMAL = re.compile(r"-?[0-9]+(\.[0-9]+)?")
# Keywords whose values are schemas reached otherwise than through ``properties``.
_ONE = frozenset({"items", "contains", "unevaluatedItems", "additionalProperties", "not",
                  "propertyNames", "unevaluatedProperties", "if", "then", "else",
                  "contentSchema"})  # fmt: skip
_LIST = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_MAP = frozenset({"patternProperties", "dependentSchemas", "$defs", "definitions"})
Path = tuple[str, ...]


def _positions(schema: object) -> Iterator[tuple[Path | None, dict[str, object]]]:
    """Every schema in ``schema`` with its path of ``properties`` keys from the root (None
    once another keyword was crossed); iterative, so any depth is walked."""
    stack: list[tuple[Path | None, object]] = [((), schema)]
    while stack:
        path, node = stack.pop()
        if not isinstance(node, dict):
            continue
        yield path, node
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict):
                stack.extend(
                    ((*path, str(k)) if path is not None else None, v) for k, v in value.items()
                )
            elif key in _ONE:
                stack.append((None, value))
            elif key in _LIST and isinstance(value, list):
                stack.extend((None, v) for v in value)
            elif key in _MAP and isinstance(value, dict):
                stack.extend((None, v) for v in value.values())


def marked(schema: object) -> dict[Path, str]:
    """The arguments a tool's input schema marks for a header: its path of property names
    -> header name (lower case); a mark that is no valid header name, on a non-primitive,
    or off the ``properties`` path, is not one."""
    found: dict[Path, str] = {}
    for path, spec in _positions(schema):
        mark = spec.get(MARK)
        usable = isinstance(mark, str) and _TOKEN.fullmatch(mark) and spec.get("type") in _PRIMITIVE
        if path and usable:
            found[path] = PREFIX + str(mark).lower()
    return found


def fault(tool: object) -> str | None:
    """What makes a tool's ``x-mcp-header`` marks unusable (a client lists no such tool),
    or None: a mark that is empty or no HTTP field name, on a property that is not of a
    primitive type, where no argument is (off the ``properties`` path from the root), or
    the same header (in any case) twice."""
    schema = tool.get("inputSchema") if isinstance(tool, dict) else None
    seen: set[str] = set()
    for path, spec in _positions(schema):
        if MARK not in spec:
            continue
        mark = spec[MARK]
        if not path:
            return "an x-mcp-header mark is on no argument (under a keyword other than properties)"
        where = ".".join(path)
        if not isinstance(mark, str) or not _TOKEN.fullmatch(mark):
            return f"argument {where!r}: x-mcp-header is no header name"
        if spec.get("type") not in _PRIMITIVE:
            return f"argument {where!r}: x-mcp-header on a property of no primitive type"
        if mark.lower() in seen:
            return f"argument {where!r}: x-mcp-header {mark!r} is marked twice"
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
    for path, header in wanted.items():
        shown = f"the {header.title()} header"
        argument = ".".join(path)
        values = sent.get(header, [])
        body = _at(arguments, path)
        if len(values) > 1:
            return f"{shown} is repeated"
        if body is None or not isinstance(body, str | int | float):  # none a client mirrors
            if values:
                return f"{shown} is sent but the argument {argument!r} is not (as a value)"
            continue
        if not values:
            return f"{shown} is missing (the argument {argument!r} is given)"
        said = decoded(values[0])
        if said is None:
            return f"{shown} holds characters a header value cannot, or bad base64"
        if not agrees(said, body):
            return f"{shown} is not the argument {argument!r}"
    return None


def _at(arguments: object, path: Path) -> object:
    """The value at ``path`` in the arguments (None: not there)."""
    node = arguments
    for key in path:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


def decoded(value: str) -> str | None:
    """A header value as its client meant it: ``=?base64?…?=`` decoded (strictly: the
    alphabet, the padding, and its one canonical form), else as it stands when plain
    visible ASCII; None otherwise."""
    if value.startswith("=?base64?") and value.endswith("?=") and len(value) >= 11:
        payload = value[9:-2]
        try:
            raw = base64.b64decode(payload, validate=True)
            if base64.b64encode(raw).decode("ascii") != payload:
                return None  # another spelling of the same bytes: not what a client sends
            return raw.decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
    return value if _PLAIN.fullmatch(value) else None


def agrees(header: str, body: object) -> bool:
    """Whether a decoded header value is the argument ``body``: the same string, the same
    boolean as ``true``/``false``, or the same number: plain decimal digits of exactly its
    value (``42`` and ``42.0`` alike), else the number as a client writes it."""
    if isinstance(body, bool):
        return header == ("true" if body else "false")
    if isinstance(body, int | float):
        if not _DECIMAL.fullmatch(header):
            return math.isfinite(body) and header == str(body)
        # Loaded here: only a stateless HTTP call with a number in a header compares one,
        # and the module (its C part) is not on the way to a session's first answer.
        from decimal import Decimal, InvalidOperation

        try:
            return Decimal(header) == Decimal(body if isinstance(body, int) else repr(body))
        except (InvalidOperation, ValueError):
            return False
    return isinstance(body, str) and header == body
