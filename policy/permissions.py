"""What a caller must hold to call a tool or get a prompt: ``permissions.json``.

The operator says it, per server and tool (or prompt), with ``*`` globs on both::

    {"tools": [{"server": "crm", "tool": "get_*", "required": ["crm:read"]},
               {"server": "crm", "tool": "*", "required": ["crm:use"]}],
     "prompts": [{"server": "crm", "prompt": "summarize", "required": ["crm:read"]}]}

Every entry that matches is required (``crm/get_customer`` above needs ``crm:read`` and
``crm:use``); what no entry matches requires nothing. Permissions are written as a caller's
are (:func:`launcher.shared.caller_identity.permissions_problem`: visible ASCII, no spaces).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import field
from pathlib import Path
from typing import Any

from policy.errors import PolicyFileError
from policy.globs import star_match
from policy.json_text import NotJson, json_kind, parse_json
from sandbox_profiles.records import frozen, mutable

PERMISSIONS_FILE = "permissions.json"
KINDS = {"tools": "tool", "prompts": "prompt"}  # the file's lists, and each entry's name key
MAX_FILE = 1024 * 1024
MAX_PERMISSION = 255
_CACHED = 4096  # (kind, server, name) answers kept before starting over

_NONE: frozenset[str] = frozenset()


@frozen(slots=True)
class Requirement:
    """An entry: the tools (or prompts) whose server and name match the globs need
    ``required``."""

    server: str  # a glob
    name: str  # a glob
    required: frozenset[str]

    def covers(self, server: str, name: str) -> bool:
        return star_match(server, self.server) and star_match(name, self.name)


@mutable
class Permissions:
    """Every entry of ``permissions.json`` (empty: nothing is required of anyone)."""

    tools: tuple[Requirement, ...] = ()
    prompts: tuple[Requirement, ...] = ()
    _known: dict[tuple[str, str, str], frozenset[str]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.tools or self.prompts)

    def required(self, kind: str, server: str, name: str) -> frozenset[str]:
        """What a caller must hold for the tool (``kind`` ``tools``) or prompt (``prompts``)
        ``name`` of ``server``: the union of every matching entry's.

        >>> p = parse_permissions({"tools": [
        ...     {"server": "crm", "tool": "get_*", "required": ["crm:read"]},
        ...     {"server": "*", "tool": "*", "required": ["use"]}]}, "p.json")
        >>> sorted(p.required("tools", "crm", "get_customer"))
        ['crm:read', 'use']
        >>> sorted(p.required("tools", "crm", "GET_customer"))  # globs match case-sensitively
        ['use']
        >>> p.required("prompts", "crm", "get_customer")
        frozenset()
        """
        key = (kind, server, name)
        known = self._known.get(key)
        if known is not None:
            return known
        entries = self.tools if kind == "tools" else self.prompts
        found = _NONE
        for entry in entries:
            if entry.covers(server, name):
                found = found | entry.required
        if len(self._known) >= _CACHED:
            self._known.clear()
        self._known[key] = found
        return found

    def missing(self, kind: str, server: str, name: str, held: frozenset[str]) -> list[str]:
        """What ``held`` lacks of what ``name`` requires, sorted (empty: nothing)."""
        required = self.required(kind, server, name)
        return sorted(required - held) if required and not required <= held else []


def load_permissions(path: Path) -> Permissions:
    """``permissions.json``, checked; an absent file requires nothing."""
    where = str(path)
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_FILE + 1)
    except FileNotFoundError:
        return Permissions()
    except OSError as exc:
        raise PolicyFileError(where, "", f"cannot read it: {exc.strerror}") from None
    if len(raw) > MAX_FILE:
        raise PolicyFileError(where, "", f"is larger than {MAX_FILE} bytes")
    try:
        data = parse_json(raw)
    except NotJson as exc:
        raise PolicyFileError(where, exc.location, exc.detail) from None
    return parse_permissions(data, where)


def parse_permissions(data: Any, where: str) -> Permissions:
    """The requirements from their JSON form; a :class:`PolicyFileError` names the file and
    the JSON path of the first mistake.

    >>> try:
    ...     parse_permissions({"tools": [{"server": "crm", "tool": "get_*",
    ...                                   "required": [""]}]}, "permissions.json")
    ... except PolicyFileError as exc:
    ...     print(exc)
    permissions.json: $.tools[0].required[0]: "" is empty
    """
    expected = 'expected {"tools": [...], "prompts": [...]} (both optional) and nothing else'
    if not isinstance(data, dict):
        raise PolicyFileError(where, "$", f"holds a JSON {json_kind(data)}; {expected}")
    unknown = [k for k in data if k not in KINDS]
    if unknown:
        raise PolicyFileError(where, "$", f"unknown key {json.dumps(unknown[0])}; {expected}")
    lists: dict[str, tuple[Requirement, ...]] = {}
    for kind, key in KINDS.items():
        entries = data.get(kind, [])
        if not isinstance(entries, list):
            raise PolicyFileError(
                where, f"$.{kind}", f"holds a JSON {json_kind(entries)}, not a list"
            )
        lists[kind] = tuple(_entry(e, f"$.{kind}[{i}]", key, where) for i, e in enumerate(entries))
    return Permissions(lists["tools"], lists["prompts"])


def _entry(entry: Any, at: str, key: str, where: str) -> Requirement:
    shape = f'expected {{"server": GLOB, "{key}": GLOB, "required": [PERMISSION, ...]}}'
    if not isinstance(entry, dict):
        raise PolicyFileError(where, at, f"holds a JSON {json_kind(entry)}; {shape}")
    unknown = [k for k in entry if k not in ("server", key, "required")]
    if unknown:
        raise PolicyFileError(where, at, f"unknown key {json.dumps(unknown[0])}; {shape}")
    for name in ("server", key):
        value = entry.get(name)
        if name not in entry:
            raise PolicyFileError(where, at, f'has no "{name}"; {shape}')
        if not isinstance(value, str) or not value:
            raise PolicyFileError(where, f"{at}.{name}", "expected a name or a glob (a string)")
    required = entry.get("required")
    if "required" not in entry:
        raise PolicyFileError(where, at, f'has no "required"; {shape}')
    if not isinstance(required, list):
        found = json_kind(required)
        raise PolicyFileError(where, f"{at}.required", f"holds a JSON {found}, not a list")
    for i, permission in enumerate(required):
        problem = name_problem(permission)
        if problem is not None:
            shown = json.dumps(permission)[:80] if isinstance(permission, str) else "it"
            raise PolicyFileError(where, f"{at}.required[{i}]", f"{shown} {problem}")
    return Requirement(entry["server"], entry[key], frozenset(required))


def name_problem(name: object) -> str | None:
    """What makes ``name`` neither a caller's name nor a permission (None: it is one): 1 to
    255 visible ASCII characters, no space or control character, and not made of dots alone
    (names end up in terminals, audit lines and paths).

    >>> name_problem("auth0|507f1f77bcf86cd799439011") is None
    True
    >>> name_problem("a b"), name_problem("..")
    ('holds a space, a control or a non-ASCII character', 'is made of dots alone')
    """
    if not isinstance(name, str):
        return "is not a string"
    if not name:
        return "is empty"
    if len(name) > MAX_PERMISSION:
        return f"is longer than {MAX_PERMISSION} characters"
    if not all("!" <= c <= "~" for c in name):
        return "holds a space, a control or a non-ASCII character"
    if not name.strip("."):
        return "is made of dots alone"
    return None


def check_servers(permissions: Permissions, servers: Iterable[str], where: str) -> None:
    """Each entry names a server the config defines (its glob matches one): a requirement
    for a server that does not exist is a mistake (a misspelt name would require nothing
    of anyone), so it is a :class:`PolicyFileError`."""
    names = sorted(servers)
    for kind, i, entry in _entries(permissions):
        if not any(star_match(name, entry.server) for name in names):
            raise PolicyFileError(
                where,
                f"$.{kind}[{i}].server",
                f"{entry.server!r} matches no server of the config "
                f"(it defines: {', '.join(names) or 'none'})",
            )


def unmatched(
    permissions: Permissions, listed: Mapping[str, Mapping[str, Iterable[str]]]
) -> str | None:
    """The first entry whose server glob matches a running server but whose tool (or
    prompt) glob matches none of what those servers list, said with its JSON path; None
    when there is none. ``listed``: per kind (``tools``, ``prompts``), each server's names.

    >>> p = parse_permissions({"prompts": [
    ...     {"server": "crm", "prompt": "sumarize", "required": ["crm:read"]}]}, "p.json")
    >>> unmatched(p, {"tools": {"crm": ["get"]}, "prompts": {"crm": ["summarize"]}})
    "$.prompts[0].prompt: 'sumarize' matches no prompt of crm (its prompts: summarize)"
    """
    for kind, i, entry in _entries(permissions):
        by_server = listed.get(kind, {})
        servers = sorted(s for s in by_server if star_match(s, entry.server))
        names = sorted({n for s in servers for n in by_server[s]})
        if servers and not any(star_match(n, entry.name) for n in names):
            return (
                f"$.{kind}[{i}].{KINDS[kind]}: {entry.name!r} matches no {KINDS[kind]} of "
                f"{', '.join(servers)} (its {kind}: {', '.join(names) or 'none'})"
            )
    return None


def _entries(permissions: Permissions) -> Iterable[tuple[str, int, Requirement]]:
    """Each entry with its list (``tools``/``prompts``) and its index there."""
    for kind, listed in (("tools", permissions.tools), ("prompts", permissions.prompts)):
        for i, entry in enumerate(listed):
            yield kind, i, entry
