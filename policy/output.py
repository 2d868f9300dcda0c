"""Output policy: which fields of what a tool returns reach the agent.

``output-policy.json`` names, per server and tool (``*`` globs), field paths in jq syntax
and what happens to the fields they match:

======================== ================================================================
``.customer.id``         the ``id`` field of the ``customer`` object
``.customer.name``       the ``name`` object itself: the path ends at an object, so its
                         whole subtree is covered
``.customer[]``          every element of the ``customer`` array
``.customer[].email``    the ``email`` field of each element
``.phones[].number``     a field of each element of a nested array
``..email``              a field named ``email`` at any depth (jq's ``.. | .email``)
======================== ================================================================

Actions: ``allow`` (kept), ``mask`` (the value is replaced by a marker of the same type:
a string says why, a number becomes 0, a boolean false, an object or an array is emptied
whole unless a path names something inside it, since its keys may be the data) and
``redact`` (the field is removed). Once a tool has an output policy, a field no path covers
is removed (default deny).

Which path decides a field: the one that matches the field itself, else the one that
matches its nearest enclosing object or array (a path ending at an object covers its
subtree). Among paths matching the same field, the most specific wins: the one with more
named steps (``.a.b.c`` beats ``..c``; ``.a[].b`` beats ``.a[]`` for ``b``); at equal
specificity the stricter action wins (redact, then mask, then allow), so the order of
the rules in the file never matters.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterator
from dataclasses import field
from pathlib import Path
from typing import Any

from policy.errors import PolicyFileError
from sandbox_profiles.records import frozen, mutable

OUTPUT_POLICY_FILE = "output-policy.json"
ACTIONS = ("allow", "mask", "redact")
_STRICTNESS = {"allow": 0, "mask": 1, "redact": 2}
MASKED = "[masked by the output policy]"

# One step of a path: .name, ."quoted name", [] or ..name
_STEP = re.compile(
    r'\.\.(?P<deep>[A-Za-z_][\w-]*|"(?:[^"\\]|\\.)*")'
    r'|\.(?P<key>[A-Za-z_][\w-]*|"(?:[^"\\]|\\.)*")'
    r"|(?P<each>\[\])"
)


@frozen
class Step:
    """One step of an output-policy path: a named key, each element, or a key at any depth."""

    kind: str  # "key", "each" or "deep" (the named field at any depth below)
    name: str = ""


@frozen
class FieldRule:
    """An output-policy path and what is done to what it names (allow, mask, redact)."""

    path: str
    steps: tuple[Step, ...]
    action: str

    @property
    def specificity(self) -> tuple[int, int]:
        named = sum(1 for s in self.steps if s.kind != "deep")
        return named, _STRICTNESS[self.action]


def parse_path(path: str) -> tuple[Step, ...]:
    """The steps of a jq-style path; ValueError says what is wrong and where.

    >>> parse_path(".customer[].email")
    (Step(kind='key', name='customer'), Step(kind='each', name=''), Step(kind='key', name='email'))
    >>> parse_path('..email')
    (Step(kind='deep', name='email'),)
    >>> parse_path(".a.")
    Traceback (most recent call last):
    ValueError: not a field path at character 3 ('.'): expected .name, ."name", [] or ..name
    """
    if not path.startswith("."):
        raise ValueError("a field path starts with '.' (jq syntax: .a.b, .a[], ..name)")
    steps: list[Step] = []
    at = 0
    while at < len(path):
        match = _STEP.match(path, at)
        if match is None:
            raise ValueError(
                f"not a field path at character {at + 1} ({path[at : at + 8]!r}): "
                'expected .name, ."name", [] or ..name'
            )
        if match.group("each"):
            if not steps:
                raise ValueError("[] follows a field (.items[]); the result itself is an object")
            steps.append(Step("each"))
        else:
            raw = match.group("deep") or match.group("key")
            name = json.loads(raw) if raw.startswith('"') else raw
            steps.append(Step("deep" if match.group("deep") else "key", name))
        at = match.end()
    if path == ".":
        raise ValueError("'.' is the whole result: name the fields to let through")
    return tuple(steps)


def _matches(steps: tuple[Step, ...], where: tuple[str | None, ...]) -> bool:
    """Whether ``steps`` name exactly the field at ``where`` (keys; None for an array
    element)."""
    if not steps:
        return not where
    step, rest = steps[0], steps[1:]
    if not where:
        return False
    if step.kind == "key":
        return where[0] == step.name and _matches(rest, where[1:])
    if step.kind == "each":
        return where[0] is None and _matches(rest, where[1:])
    # deep: the named field at this level or any level below
    return any(where[i] == step.name and _matches(rest, where[i + 1 :]) for i in range(len(where)))


@mutable
class Filtered:
    """What the filter did: counts only, never values (for the audit log)."""

    masked: int = 0
    removed: int = 0

    def add(self, other: Filtered) -> None:
        self.masked += other.masked
        self.removed += other.removed


@frozen
class ToolOutputPolicy:
    """The output rules of the tools whose server and name match the two globs."""

    server: str  # a glob
    tool: str  # a glob
    rules: tuple[FieldRule, ...]

    def covers(self, server: str, tool: str) -> bool:
        return fnmatch.fnmatchcase(server, self.server) and fnmatch.fnmatchcase(tool, self.tool)

    def apply(self, value: Any) -> tuple[Any, Filtered]:
        """``value`` with the policy applied (a new object; ``value`` is not changed). The
        result itself is never removed: at worst an empty object or list."""
        counts = Filtered()
        kept = self._node(value, (), None, counts)
        if kept is _GONE:
            kept = {} if isinstance(value, dict) else [] if isinstance(value, list) else None
        return kept, counts

    def _decide(self, where: tuple[str | None, ...]) -> FieldRule | None:
        best: FieldRule | None = None
        for rule in self.rules:
            if _matches(rule.steps, where) and (
                best is None or rule.specificity > best.specificity
            ):
                best = rule
        return best

    def _keeps_some(self, where: tuple[str | None, ...]) -> bool:
        """Whether a rule that lets something through names a field below ``where``."""
        for rule in self.rules:
            if rule.action == "redact":
                continue
            if rule.steps[0].kind == "deep":
                return True  # ..name may match at any depth below
            for depth in range(1, len(rule.steps)):
                if _matches(rule.steps[:depth], where):
                    return True
        return False

    def _names_below(self, where: tuple[str | None, ...], value: Any) -> bool:
        """Whether a path names something inside ``value`` (at ``where``): one that goes on
        past ``where``, or a ``..name`` whose name is a key inside it."""
        for rule in self.rules:
            for depth in range(1, len(rule.steps)):
                if _matches(rule.steps[:depth], where):
                    return True
        deep = {step.name for rule in self.rules for step in rule.steps if step.kind == "deep"}
        return bool(deep) and _has_key(value, deep)

    def _schema(
        self,
        schema: Any,
        where: tuple[str | None, ...],
        inherited: FieldRule | None,
        found: list[str],
    ) -> None:
        if not isinstance(schema, dict):
            return
        rule = (self._decide(where) if where else None) or inherited
        properties = schema.get("properties")
        if isinstance(properties, dict):
            required = schema.get("required")
            needed = set(required) if isinstance(required, list) else set()
            for name, sub in properties.items():
                child = (*where, str(name))
                child_rule = self._decide(child) or rule
                kept = child_rule is not None and child_rule.action != "redact"
                if not kept and not self._keeps_some(child):
                    if name in needed:  # what is inside it does not matter then
                        found.append(f"{_shown(child)} is required and removed")
                    continue
                self._schema(sub, child, rule, found)
        items = schema.get("items")
        if isinstance(items, dict):
            self._schema(items, (*where, None), rule, found)
        if where and rule is not None and rule.action == "mask" and not properties:
            limits = [k for k in ("enum", "const", "pattern", "format") if k in schema]
            limits += [
                k
                for k in ("minimum", "exclusiveMinimum")
                if isinstance(schema.get(k), int | float) and schema[k] > 0
            ]
            if limits:
                found.append(f"{_shown(where)} is masked and its schema has {', '.join(limits)}")

    def _node(
        self, value: Any, where: tuple[str | None, ...], inherited: FieldRule | None, n: Filtered
    ) -> Any:
        """The field at ``where``, filtered; ``_GONE`` when it is removed. ``inherited``:
        the rule of the nearest enclosing object or array a path ended at."""
        rule = (self._decide(where) if where else None) or inherited
        if isinstance(value, dict | list):
            if rule is not None and rule.action == "mask" and not self._names_below(where, value):
                # Masked whole: its keys may be the data (a map keyed by address or number).
                n.masked += 1
                return {} if isinstance(value, dict) else []
            if isinstance(value, dict):
                pairs = ((k, self._node(v, (*where, str(k)), rule, n)) for k, v in value.items())
                out: Any = {k: v for k, v in pairs if v is not _GONE}
            else:
                kept = (self._node(v, (*where, None), rule, n) for v in value)
                out = [v for v in kept if v is not _GONE]
            if out or (not value and rule is not None and rule.action != "redact"):
                return out
            if not value:
                n.removed += 1  # an empty object or list nothing lets through
            return _GONE
        if rule is None or rule.action == "redact":
            n.removed += 1
            return _GONE
        if rule.action == "mask":
            n.masked += 1
            return mask(value)
        return value


def _has_key(value: Any, names: set[str]) -> bool:
    """Whether an object inside ``value`` (at any depth) has one of ``names`` as a key."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if names.intersection(node):
                return True
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


def schema_conflicts(policy: ToolOutputPolicy, schema: Any) -> list[str]:
    """Where results filtered by ``policy`` would no longer match the tool's
    ``outputSchema``: a required field the policy removes, a masked value its schema
    constrains (enum, const, pattern, format, a minimum above 0).

    >>> p = parse_output_policy({"tools": [{"server": "s", "tool": "t", "fields": {
    ...     ".id": "allow", ".state": "mask"}}]}, "p").tools[0]
    >>> schema = {"type": "object", "required": ["id", "ssn", "state"], "properties": {
    ...     "id": {"type": "integer"}, "ssn": {"type": "string"},
    ...     "state": {"type": "string", "enum": ["open", "closed"]}}}
    >>> schema_conflicts(p, schema)
    ['.ssn is required and removed', '.state is masked and its schema has enum']
    """
    found: list[str] = []
    policy._schema(schema, (), None, found)
    return found


def _shown(where: tuple[str | None, ...]) -> str:
    return "".join("[]" if step is None else f".{step}" for step in where) or "."


class _Gone:
    def __repr__(self) -> str:
        return "<removed>"


_GONE: Any = _Gone()


def mask(value: Any) -> Any:
    """A marker of ``value``'s type: a string says why; a number is 0, a boolean false.

    >>> mask("ada@example.com"), mask(42), mask(2.5), mask(True), mask(None)
    ('[masked by the output policy]', 0, 0.0, False, None)
    """
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return 0
    if isinstance(value, float):
        return 0.0
    if isinstance(value, str):
        return MASKED
    return None


@mutable
class OutputPolicy:
    """Every tool's output rules, in the order of ``output-policy.json`` (first match wins)."""

    tools: list[ToolOutputPolicy] = field(default_factory=list)

    def for_tool(self, server: str, tool: str) -> ToolOutputPolicy | None:
        """The policy of this tool: the first entry whose globs match (None: no output
        policy, everything passes)."""
        for entry in self.tools:
            if entry.covers(server, tool):
                return entry
        return None

    def __iter__(self) -> Iterator[ToolOutputPolicy]:
        return iter(self.tools)


def load_output_policy(path: Path) -> OutputPolicy:
    """``output-policy.json``, checked; an absent file is no output policy."""
    if not path.exists():
        return OutputPolicy()
    where = str(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PolicyFileError(where, "", f"cannot read it: {exc.strerror}") from None
    except ValueError as exc:
        raise PolicyFileError(where, "", f"not JSON: {exc}") from None
    return parse_output_policy(data, where)


def parse_output_policy(data: Any, where: str) -> OutputPolicy:
    """The policy from its JSON form; PolicyFileError names the file and the JSON path of
    the first mistake.

    >>> try:
    ...     parse_output_policy({"tools": [{"server": "crm", "tool": "get", "fields": {
    ...         ".a": "hide"}}]}, "p.json")
    ... except PolicyFileError as exc:
    ...     print(exc)
    p.json: $.tools[0].fields[".a"]: 'hide': expected allow, mask or redact
    """
    if not isinstance(data, dict) or set(data) - {"tools"}:
        raise PolicyFileError(where, "$", 'expected {"tools": [...]} and nothing else')
    tools = data.get("tools", [])
    if not isinstance(tools, list):
        raise PolicyFileError(where, "$.tools", "expected a list")
    out: list[ToolOutputPolicy] = []
    for i, entry in enumerate(tools):
        at = f"$.tools[{i}]"
        if not isinstance(entry, dict):
            raise PolicyFileError(where, at, "expected an object with server, tool and fields")
        unknown = set(entry) - {"server", "tool", "fields"}
        if unknown:
            raise PolicyFileError(where, at, f"unknown key {sorted(unknown)[0]!r}")
        for key in ("server", "tool"):
            if not isinstance(entry.get(key), str) or not entry[key]:
                raise PolicyFileError(where, f"{at}.{key}", "expected a name or a glob")
        fields = entry.get("fields")
        if not isinstance(fields, dict) or not fields:
            raise PolicyFileError(where, f"{at}.fields", "expected an object of path: action")
        rules = []
        for path, action in fields.items():
            place = f"{at}.fields[{json.dumps(path)}]"
            if action not in ACTIONS:
                raise PolicyFileError(where, place, f"{action!r}: expected allow, mask or redact")
            try:
                steps = parse_path(path)
            except ValueError as exc:
                raise PolicyFileError(where, place, str(exc)) from None
            rules.append(FieldRule(path, steps, action))
        out.append(ToolOutputPolicy(entry["server"], entry["tool"], tuple(rules)))
    return OutputPolicy(out)
