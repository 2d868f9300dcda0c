"""Writing ``tool-annotations.json``: new drafts merged into what is there, carefully.

Every annotator (the heuristic, the LLM, ``compile-policy``) writes through
:func:`merge_annotations`, so an existing file is treated the same way by all:

- an entry a person has reviewed (one without ``"draft": true``) is kept, unless it no
  longer fits the server (an argument it does not annotate, a path-like argument without a
  path role): then the new draft replaces it;
- a draft entry is replaced by the new draft;
- an entry for a tool or prompt the server no longer offers is removed;
- servers that were not annotated this time are left as they are.

Each of these is said, one line each, in :attr:`Merged.changes`. The file's ``reviewed``
is true only when no entry is a draft.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import field
from pathlib import Path
from typing import Any

from policy import schema
from policy.loader import load_json_model
from policy.models import Annotation, ServerAnnotations, ToolAnnotationsFile
from policy.pipeline.heuristic import NAME_KEYS, validate
from sandbox_profiles.records import mutable

# Each kind of entry: the key of its list in a server's entry.
KINDS = ("tools", "prompts")
_KIND = {"tools": "tool", "prompts": "prompt"}


@mutable
class Merged:
    file: ToolAnnotationsFile
    changes: list[str] = field(default_factory=list)


def read_annotations(path: Path) -> ToolAnnotationsFile | None:
    """The annotations file at ``path``, or None when there is none; an unreadable or
    invalid one is a ``PolicyFileError`` (it is never overwritten blindly)."""
    if not path.exists():
        return None
    return load_json_model(path, ToolAnnotationsFile)


def merge_annotations(
    existing: ToolAnnotationsFile | None,
    fresh: Mapping[str, ServerAnnotations],
    listings: Mapping[str, Mapping[str, Sequence[Mapping[str, Any]]]],
    constitution_hash: str | None = None,
) -> Merged:
    """``fresh`` drafts (per server) merged into ``existing``; ``listings`` are what each
    server offers (``{"tools": [...], "prompts": [...]}``, MCP objects), against which kept
    entries are checked.

    >>> from policy.models import ToolAnnotation
    >>> draft = ToolAnnotation(tool_name="now", server_name="time", effect="read",
    ...                        side_effects=False, draft=True)
    >>> merged = merge_annotations(None, {"time": ServerAnnotations(tools=[draft])},
    ...                            {"time": {"tools": [{"name": "now"}]}})
    >>> merged.changes, merged.file.reviewed
    (['time: tool now: added (draft)'], False)
    """
    servers = dict(existing.servers) if existing else {}
    changes: list[str] = []
    for server, drafts in fresh.items():
        before = servers.get(server)
        entry: dict[str, list[Annotation]] = {}
        for kind in KINDS:
            live = {str(item.get("name")): item for item in listings.get(server, {}).get(kind, ())}
            old = list(getattr(before, kind)) if before else []
            entry[kind] = _merge_kind(server, kind, old, getattr(drafts, kind), live, changes)
        servers[server] = schema.validate(ServerAnnotations, entry)
    every = [a for s in servers.values() for kind in KINDS for a in getattr(s, kind)]
    merged = ToolAnnotationsFile(
        generated_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        constitution_hash=constitution_hash,
        reviewed=not any(a.draft for a in every),
        servers=servers,
    )
    return Merged(merged, changes)


def _merge_kind(
    server: str,
    kind: str,
    old: Sequence[Annotation],
    drafts: Sequence[Annotation],
    live: Mapping[str, Mapping[str, Any]],
    changes: list[str],
) -> list[Annotation]:
    what = _KIND[kind]
    previous = {a.name: a for a in old}
    result: list[Annotation] = []
    for draft in drafts:
        name = draft.name
        say = f"{server}: {what} {name}: "
        before = previous.get(name)
        if before is None:
            result.append(draft)
            changes.append(say + "added (draft)")
        elif before.draft:
            result.append(draft)
            if _differences(before, draft):
                changes.append(say + "draft replaced by the new draft")
        else:
            problems = validate(live.get(name, {"name": name}), as_json(before), reviewed=True)
            if problems:
                result.append(draft)
                changes.append(
                    say + "the reviewed annotation no longer fits the server ("
                    + "; ".join(problems) + "): replaced by a draft"
                )  # fmt: skip
                continue
            result.append(before)
            differences = _differences(before, draft)
            if differences:
                changes.append(
                    say + "kept the reviewed annotation; the new draft differs: " + differences
                )
    offered = {d.name for d in drafts}
    for name in previous:
        if name not in offered:
            changes.append(f"{server}: {what} {name}: removed (the server no longer offers it)")
    return result


def _differences(before: Annotation, after: Annotation) -> str:
    found = []
    if before.effect != after.effect:
        found.append(f"effect {before.effect} -> {after.effect}")
    if before.side_effects != after.side_effects:
        found.append(f"sideEffects {before.side_effects} -> {after.side_effects}")
    for arg in dict.fromkeys([*before.args, *after.args]):
        old, new = before.args.get(arg), after.args.get(arg)
        if old != new:
            found.append(f"{arg} {_roles(old)} -> {_roles(new)}")
    if before.relative_to != after.relative_to:
        found.append(f"relativeTo {before.relative_to} -> {after.relative_to}")
    if sorted(before.pii_fields) != sorted(after.pii_fields):
        found.append(f"piiFields {before.pii_fields} -> {after.pii_fields}")
    return ", ".join(found)


def _roles(roles: Sequence[str] | None) -> str:
    return "(none given)" if roles is None else "+".join(roles)


def as_json(annotation: Annotation) -> dict[str, Any]:
    """An annotation as the files write it: its name first, ``piiFields`` and
    ``relativeTo`` only when there are some, ``draft`` only on a draft."""
    data = schema.dump(annotation)
    key = next(k for k in NAME_KEYS.values() if k in data)
    for optional in ("piiFields", "relativeTo"):
        if not data.get(optional):
            data.pop(optional, None)
    if not data.get("draft"):
        data.pop("draft", None)
    return {key: data.pop(key), **data}


def file_json(annotations: ToolAnnotationsFile) -> dict[str, Any]:
    """The whole file as JSON; a server's ``prompts`` only when it has some."""
    servers: dict[str, Any] = {}
    for server, entry in annotations.servers.items():
        servers[server] = {"tools": [as_json(a) for a in entry.tools]}
        if entry.prompts:
            servers[server]["prompts"] = [as_json(a) for a in entry.prompts]
    return {
        "generatedAt": annotations.generated_at,
        "constitutionHash": annotations.constitution_hash,
        "reviewed": annotations.reviewed,
        "servers": servers,
    }
