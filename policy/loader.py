"""Reading the policy directory: ``tool-annotations.json`` and ``compiled-policy.json``."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from policy.errors import PolicyFileError
from policy.models import CompiledPolicyFile, ToolAnnotationsFile
from policy.output import OUTPUT_POLICY_FILE, OutputPolicy, load_output_policy
from policy.variables import placeholder_names

ANNOTATIONS_FILE = "tool-annotations.json"
POLICY_FILE = "compiled-policy.json"

M = TypeVar("M", bound=BaseModel)


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
    detail = f"{first['msg']} (found {found_text})"
    more = len([e for e in errors[1:] if e["type"] not in _ALTERNATIVES])
    if more:
        detail += f"; and {more} more problem{'s' if more > 1 else ''}"
    return json_path(loc), detail


def load_json_model(path: Path, model: type[M]) -> M:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyFileError(str(path), "", f"cannot read: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PolicyFileError(
            str(path), f"line {exc.lineno} column {exc.colno}", f"invalid JSON: {exc.msg}"
        ) from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        loc, detail = describe_validation_error(exc)
        raise PolicyFileError(str(path), loc, detail) from None


@dataclass(frozen=True)
class PolicyFiles:
    """A policy directory's files, read and validated."""

    directory: Path
    annotations: ToolAnnotationsFile
    policy: CompiledPolicyFile
    output: OutputPolicy = field(default_factory=OutputPolicy)  # output-policy.json


def load_policy_dir(directory: Path) -> PolicyFiles:
    if not directory.is_dir():
        raise PolicyFileError(str(directory), "", "policy directory does not exist")
    annotations = load_json_model(directory / ANNOTATIONS_FILE, ToolAnnotationsFile)
    policy = load_json_model(directory / POLICY_FILE, CompiledPolicyFile)
    check_annotations(annotations, directory / ANNOTATIONS_FILE)
    output = load_output_policy(directory / OUTPUT_POLICY_FILE)
    return PolicyFiles(directory, annotations, policy, output)


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
