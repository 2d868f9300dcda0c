"""JSON with comments (JSONC: ``//`` and ``/* */`` comments, trailing commas), read with the
place of every value, so one value can be replaced in the text and everything else (the
comments, the layout, the order) stays byte for byte as it was. The config files of VS Code,
Zed and others are JSONC; plain JSON is JSONC too.

>>> doc = parse('{\\n  // servers\\n  "a": {"x": 1,},\\n}')
>>> doc.value
{'a': {'x': 1}}
>>> doc.replace(("a",), {"y": [2]})
'{\\n  // servers\\n  "a": {"y": [2]},\\n}'
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import field
from typing import Any

from sandbox_profiles.records import mutable

Path = tuple[str, ...]

_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
# Unrolled (a run of plain characters, then escapes each followed by such a run): no
# backtracking mark per character, so a long string takes linear time and memory.
_STRING = re.compile(r'"[^"\\\x00-\x1f]*(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})[^"\\\x00-\x1f]*)*"')
# Nesting deeper than any client's settings: the reader recurses once per level, and a
# planted file must get a clear error, not exhaust the interpreter's stack.
MAX_DEPTH = 100


class JsoncError(ValueError):
    """Not JSONC: ``line`` and ``column`` (from 1) say where."""

    def __init__(self, text: str, at: int, what: str) -> None:
        self.line = text.count("\n", 0, at) + 1
        self.column = at - (text.rfind("\n", 0, at) + 1) + 1
        super().__init__(f"line {self.line}, column {self.column}: {what}")


@mutable
class Document:
    text: str
    value: Any
    # Where each object member's value is: (start, end) offsets in ``text``, by its path
    # of keys from the top.
    spans: dict[Path, tuple[int, int]] = field(default_factory=dict)
    # Where each object's members are: the offset just inside its closing brace.
    closes: dict[Path, int] = field(default_factory=dict)
    # Where each member's key starts (its opening quote).
    keys: dict[Path, int] = field(default_factory=dict)

    def replace(self, path: Path, value: Any) -> str:
        """The text with the value at ``path`` replaced (indented like its first line)."""
        start, end = self.spans[path]
        return self.text[:start] + _dumps(value, _indent_at(self.text, start)) + self.text[end:]

    def insert(self, path: Path, key: str, value: Any) -> str:
        r"""The text with ``key: value`` added as the last member of the object at ``path``.

        >>> parse('{"a": {\n    "x": 1\n  }}').insert(("a",), "y", 2)
        '{"a": {\n    "x": 1,\n    "y": 2\n  }}'
        >>> parse('{}').insert((), "y", 2)
        '{\n  "y": 2\n}'
        """
        close = self.closes[path]
        members = [m for m in self.spans if len(m) == len(path) + 1 and m[: len(path)] == path]
        name = json.dumps(key, ensure_ascii=False)
        if not members:
            outer = _indent_at(self.text, close)
            inner = outer + "  "
            piece = f"\n{inner}{name}: {_dumps(value, inner)}\n{outer}"
            return self.text[:close] + piece + self.text[close:]
        last = max(members, key=lambda m: self.spans[m][1])
        end = self.spans[last][1]
        inner = _indent_at(self.text, self.keys[last])
        between = _strip_comments(self.text[end:close])
        comma = "" if between.strip().startswith(",") else ","
        at = end + (self.text.index(",", end) + 1 - end if not comma else 0)
        piece = f"{comma}\n{inner}{name}: {_dumps(value, inner)}"
        return self.text[:at] + piece + self.text[at:]


def parse(text: str) -> Document:
    doc = Document(text, None)
    reader = _Reader(text, doc)
    reader.skip()
    doc.value = reader.value(())
    reader.skip()
    if reader.at != len(text):
        raise JsoncError(text, reader.at, "text after the end of the document")
    return doc


class _Reader:
    def __init__(self, text: str, doc: Document) -> None:
        self.text = text
        self.doc = doc
        self.at = 0

    def skip(self) -> None:
        """White space and comments."""
        text = self.text
        while self.at < len(text):
            char = text[self.at]
            if char in " \t\r\n\ufeff":
                self.at += 1
            elif text.startswith("//", self.at):
                end = text.find("\n", self.at)
                self.at = len(text) if end < 0 else end + 1
            elif text.startswith("/*", self.at):
                end = text.find("*/", self.at + 2)
                if end < 0:
                    raise JsoncError(text, self.at, "a /* comment is never closed")
                self.at = end + 2
            else:
                return

    def value(self, path: Path) -> Any:
        text, at = self.text, self.at
        if at >= len(text):
            raise JsoncError(text, at, "the document ends where a value was expected")
        char = text[at]
        if char in "{[":
            if len(path) >= MAX_DEPTH:
                raise JsoncError(text, at, f"nested deeper than {MAX_DEPTH} levels")
            return self.obj(path) if char == "{" else self.array(path)
        if char == '"':
            return self.string()
        for word, meaning in (("true", True), ("false", False), ("null", None)):
            if text.startswith(word, at):
                self.at += len(word)
                return meaning
        match = _NUMBER.match(text, at)
        if match is None:
            raise JsoncError(text, at, f"unexpected {text[at]!r}")
        self.at = match.end()
        try:
            return json.loads(match.group())
        except ValueError:  # an integer longer than Python converts (its digit limit)
            raise JsoncError(
                text, at, f"a number of {match.end() - at} characters (too long to read)"
            ) from None

    def string(self) -> str:
        match = _STRING.match(self.text, self.at)
        if match is None:
            raise JsoncError(self.text, self.at, "a string is not closed or holds a bad escape")
        self.at = match.end()
        return str(json.loads(match.group()))

    def obj(self, path: Path) -> dict[str, Any]:
        out: dict[str, Any] = {}
        self.at += 1
        while True:
            self.skip()
            if self._take("}"):
                self.doc.closes[path] = self.at - 1
                return out
            if self.text[self.at : self.at + 1] != '"':
                raise JsoncError(self.text, self.at, "expected a key in double quotes or '}'")
            key_at = self.at
            key = self.string()
            self.doc.keys[(*path, key)] = key_at
            self.skip()
            if not self._take(":"):
                raise JsoncError(self.text, self.at, f"expected ':' after the key {key!r}")
            self.skip()
            start = self.at
            out[key] = self.value((*path, key))
            self.doc.spans[(*path, key)] = (start, self.at)
            self.skip()
            if self._take(","):
                continue
            if self.text[self.at : self.at + 1] != "}":
                raise JsoncError(self.text, self.at, "expected ',' or '}'")

    def array(self, path: Path) -> list[Any]:
        out: list[Any] = []
        self.at += 1
        while True:
            self.skip()
            if self._take("]"):
                return out
            out.append(self.value((*path, str(len(out)))))
            self.skip()
            if self._take(","):
                continue
            if self.text[self.at : self.at + 1] != "]":
                raise JsoncError(self.text, self.at, "expected ',' or ']'")

    def _take(self, char: str) -> bool:
        if self.text[self.at : self.at + 1] == char:
            self.at += 1
            return True
        return False


def unwritable(value: Any) -> str | None:
    """Why ``value`` (as read) cannot be written back as JSON text (None: it can): a number
    too large for a double (``1e999`` reads as infinity) or a lone UTF-16 surrogate
    (``\\ud800``) in a string or key.

    >>> unwritable({"a": [1, "x"]}), unwritable({"t": 1e999})
    (None, 'a number JSON cannot hold (inf)')
    """
    if isinstance(value, float) and not math.isfinite(value):
        return f"a number JSON cannot hold ({value})"
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return f"a lone UTF-16 surrogate ({value[exc.start : exc.end]!r})"
        return None
    if isinstance(value, dict):
        parts: list[Any] = [*value, *value.values()]
    else:
        parts = value if isinstance(value, list) else []
    return next((p for p in map(unwritable, parts) if p is not None), None)


def _strip_comments(text: str) -> str:
    return re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)


def _indent_at(text: str, at: int) -> str:
    line_start = text.rfind("\n", 0, at) + 1
    line = text[line_start:at]
    return line[: len(line) - len(line.lstrip())]


def _dumps(value: Any, indent: str) -> str:
    """``value`` as JSON: on one line when short, else two spaces deeper per level, each
    line after the first starting with ``indent`` (the indentation of the line it is on)."""
    # allow_nan=False: Infinity and NaN are not JSON, and the file must stay JSON.
    flat = json.dumps(value, ensure_ascii=False, allow_nan=False)
    if len(flat) <= 60 or not isinstance(value, dict | list):
        return flat
    lines = json.dumps(value, ensure_ascii=False, indent=2, allow_nan=False).split("\n")
    return "\n".join([lines[0], *(indent + line for line in lines[1:])])
