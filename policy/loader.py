"""Reading the policy directory: ``tool-annotations.json`` and ``compiled-policy.json``, and
the optional ``output-policy.json`` and ``permissions.json``."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from policy.cache import ContentCache, encode, rebuild
from policy.errors import PolicyFileError
from policy.json_text import NotJson, parse_json
from policy.models import (
    CompiledPolicyFile,
    CompiledRule,
    DomainCondition,
    PathCondition,
    PromptAnnotation,
    RuleCondition,
    ServerAnnotations,
    ToolAnnotation,
    ToolAnnotationsFile,
)
from policy.output import OUTPUT_POLICY_FILE, OutputPolicy, load_output_policy
from policy.permissions import PERMISSIONS_FILE, Permissions, load_permissions
from policy.schema import pyd, validate
from policy.variables import placeholder_names
from sandbox_profiles.records import frozen

if TYPE_CHECKING:
    from pydantic import ValidationError

ANNOTATIONS_FILE = "tool-annotations.json"
POLICY_FILE = "compiled-policy.json"

M = TypeVar("M")


def bundled_policy_dir() -> Path:
    return Path(__file__).resolve().parent / "defaults"


def json_path(loc: tuple[int | str, ...]) -> str:
    """Pydantic's error location as a JSON path: ``$.servers.git.tools[2].effect``."""
    out = "$"
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


# Errors that only say "it was not the other member of a union" (`sandbox: false`).
_ALTERNATIVES = ("literal_error", "none_required", "bool_type")
# Pydantic's words for some problems, in the file's terms: a key no field has (models say
# the first, dataclasses the second), and a value where an object was expected (pydantic
# names the class it would have built).
_MESSAGES = {
    "extra_forbidden": "unknown key",
    "unexpected_keyword_argument": "unknown key",
    "dataclass_type": "Input should be an object",
    "model_type": "Input should be an object",
}


def describe_validation_error(
    err: ValidationError, union_tags: frozenset[str] = frozenset()
) -> tuple[str, str]:
    """(JSON path, what was wrong) for the most specific problem. ``union_tags`` are the
    model names pydantic puts into a location inside a union; they are not JSON keys."""
    errors = sorted(err.errors(), key=lambda e: -len(e["loc"]))
    first = errors[0]
    loc = tuple(
        p for p in first["loc"] if not (isinstance(p, str) and ("[" in p or p in union_tags))
    )
    found = first.get("input")
    found_text = json.dumps(found)[:80] if not isinstance(found, dict) else "an object"
    message = _MESSAGES.get(first["type"], first["msg"])
    detail = f"{message} (found {found_text})"
    more = len([e for e in errors[1:] if e["type"] not in _ALTERNATIVES])
    if more:
        detail += f"; and {more} more problem{'s' if more > 1 else ''}"
    return json_path(loc), detail


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise PolicyFileError(str(path), "", f"cannot read: {exc.strerror}") from None


def _parse(path: Path, raw: bytes, model: type[M]) -> M:
    try:
        data = parse_json(raw)
    except NotJson as exc:
        raise PolicyFileError(str(path), exc.location, exc.detail) from None
    try:
        return validate(model, data)
    except pyd.ValidationError as exc:
        loc, detail = describe_validation_error(exc)
        raise PolicyFileError(str(path), loc, detail) from None


def load_json_model(path: Path, model: type[M]) -> M:
    """The JSON file at ``path`` validated as a ``model``; every problem is a
    :class:`PolicyFileError` naming where it is."""
    return _parse(path, _read(path), model)


@frozen
class PolicyFiles:
    """A policy directory's files, read and validated."""

    directory: Path
    annotations: ToolAnnotationsFile
    policy: CompiledPolicyFile
    output: OutputPolicy = field(default_factory=OutputPolicy)  # output-policy.json
    permissions: Permissions = field(default_factory=Permissions)  # permissions.json


def load_policy_dir(directory: Path, cache: Path | None = None) -> PolicyFiles:
    """Read and validate a policy directory. With a ``cache`` directory, files identical
    to ones validated before (the same bytes, the same code: :mod:`policy.cache`) are read
    from there, without validating them again."""
    if not directory.is_dir():
        raise PolicyFileError(str(directory), "", "policy directory does not exist")
    annotations_path, policy_path = directory / ANNOTATIONS_FILE, directory / POLICY_FILE
    annotations_raw, policy_raw = _read(annotations_path), _read(policy_path)
    store = ContentCache(cache, "policy") if cache is not None else None
    key = store.key(annotations_raw, policy_raw) if store else ""
    known = (
        rebuild(store.get(key), _CACHED, ToolAnnotationsFile, CompiledPolicyFile) if store else None
    )
    if known is not None:
        annotations, policy = known
    else:
        annotations = _parse(annotations_path, annotations_raw, ToolAnnotationsFile)
        policy = _parse(policy_path, policy_raw, CompiledPolicyFile)
        check_annotations(annotations, annotations_path)
        if store:
            store.put(key, encode([annotations, policy]))
    output = load_output_policy(directory / OUTPUT_POLICY_FILE)
    permissions = load_permissions(directory / PERMISSIONS_FILE)
    return PolicyFiles(directory, annotations, policy, output, permissions)


# Every class a cached policy is built from (policy.cache.decode constructs only these).
_CACHED = (
    ToolAnnotationsFile,
    ServerAnnotations,
    ToolAnnotation,
    PromptAnnotation,
    CompiledPolicyFile,
    CompiledRule,
    RuleCondition,
    PathCondition,
    DomainCondition,
)


def check_annotations(annotations: ToolAnnotationsFile, path: Path) -> None:
    """Each annotation is listed under its own server, and each name once per server
    (tools and prompts are separate namespaces: a tool and a prompt may share a name)."""
    for server, entry in annotations.servers.items():
        for kind, listed in (("tools", entry.tools), ("prompts", entry.prompts)):
            seen: set[str] = set()
            for i, item in enumerate(listed):
                where = f"$.servers.{server}.{kind}[{i}]"
                if item.server_name != server:
                    raise PolicyFileError(
                        str(path),
                        f"{where}.serverName",
                        f"says {item.server_name!r} but is listed under server {server!r}",
                    )
                if item.name in seen:
                    raise PolicyFileError(
                        str(path), where, f"{kind[:-1]} {item.name!r} is annotated twice"
                    )
                seen.add(item.name)


def check_placeholders(files: PolicyFiles, known: Iterable[str]) -> None:
    """Every ``${name}`` in a ``within`` path must be one the session provides."""
    names = set(known)
    for i, rule in enumerate(files.policy.rules):
        paths = rule.condition.paths
        if paths is None:
            continue
        for name in placeholder_names(paths.within):
            if name not in names:
                raise PolicyFileError(
                    str(files.directory / POLICY_FILE),
                    f"$.rules[{i}].if.paths.within",
                    f"unknown placeholder ${{{name}}} (known: "
                    + ", ".join(f"${{{n}}}" for n in sorted(names))
                    + ")",
                )
