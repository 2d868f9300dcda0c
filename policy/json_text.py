"""A file's bytes read as one JSON text, where they broke when they are not one, and what
kind of JSON value a file holds, said as a person says it."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


class NotJson(ValueError):
    """A file's bytes that are not one JSON text. ``location`` names the place (``line 3
    column 5``, ``byte 17``; empty when there is none to name), ``detail`` what was wrong;
    ``line`` and ``column`` (from 1) are set for a text that breaks JSON's grammar, and
    ``reason`` says how, in the parser's words."""

    def __init__(
        self,
        location: str,
        detail: str,
        line: int | None = None,
        column: int | None = None,
        reason: str = "",
    ) -> None:
        super().__init__(f"{location}: {detail}" if location else detail)
        self.location, self.detail = location, detail
        self.line, self.column, self.reason = line, column, reason


def parse_json(
    raw: bytes | str, object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None
) -> Any:
    """The value ``raw`` (UTF-8 bytes, or text) holds, or a :class:`NotJson` saying where
    it broke. Nesting deeper than the parser goes is refused too, never a traceback.

    >>> parse_json(b'{"a": [1, 2]}')
    {'a': [1, 2]}
    >>> parse_json(b'{"a": [1, 2}')
    Traceback (most recent call last):
    policy.json_text.NotJson: line 1 column 12: invalid JSON: Expecting ',' delimiter
    >>> parse_json(b'{"a": "\\xff"}').location
    Traceback (most recent call last):
    policy.json_text.NotJson: byte 7: not UTF-8 text
    """
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes | bytearray) else raw
    except UnicodeDecodeError as exc:
        raise NotJson(f"byte {exc.start}", "not UTF-8 text") from None
    try:
        return json.loads(text, object_pairs_hook=object_pairs_hook)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise NotJson(where, f"invalid JSON: {exc.msg}", exc.lineno, exc.colno, exc.msg) from None
    except RecursionError:
        raise NotJson("", "not JSON: nested deeper than it can be read") from None


def json_kind(value: object) -> str:
    """``value``'s JSON type, as a person says it.

    >>> json_kind(None), json_kind(True), json_kind({}), json_kind([]), json_kind(1.5)
    ('null', 'boolean', 'object', 'list', 'number')
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return {dict: "object", list: "list", str: "string", int: "number", float: "number"}.get(
        type(value), type(value).__name__
    )
