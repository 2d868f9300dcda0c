"""Annotations without an LLM (``--heuristic``), and the validator every annotation
must pass, the LLM's included.

The heuristic reads what a server says about a tool or a prompt: a tool's MCP hints
(``readOnlyHint``, ``destructiveHint``), its name, its argument names and their schema or
description (a prompt's arguments are strings with a description). It errs on the strict
side: any argument that looks like a path gets a path role (so the engine checks it), and a
tool or prompt is free of side effects only when it reads and names no resource. Its output
is a draft for a human to review, never trusted as reviewed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from policy.roles import is_git_tool

_DELETE = {
    "delete", "remove", "rm", "unlink", "drop", "destroy", "purge", "erase", "clean", "clear",
    "prune", "discard", "wipe",
}  # fmt: skip
# An operation chosen by an enum argument (``mode``) that deletes: ``git reset --hard`` too.
_DELETE_MODES = _DELETE | {"hard"}
# git operations that contact a remote: never reads, whatever the tool hints.
_REMOTE_OPS = {"fetch", "pull", "push", "clone", "remote", "lsremote"}
_MOVE = {"move", "rename", "mv"}
_WRITE = {
    "write", "create", "edit", "update", "set", "put", "add", "commit", "push", "insert",
    "save", "append", "mkdir", "make", "init", "checkout", "reset", "merge", "apply",
    "patch", "upload", "post", "send", "replace", "modify", "stage", "unstage", "tag",
    "rebase", "pick", "revert", "restore",
}  # fmt: skip
_READ = {
    "read", "get", "list", "search", "find", "show", "status", "diff", "log", "fetch",
    "view", "describe", "info", "query", "stat", "tree", "head", "cat", "convert", "lookup",
}  # fmt: skip
_PATH_NAMES = {
    "path", "paths", "file", "files", "filename", "filepath", "directory", "dir", "folder",
    "source", "destination", "src", "dst", "dest", "root", "cwd", "location", "repo",
    "repository", "workdir",
}  # fmt: skip
_URL_NAMES = {"url", "uri", "href", "link", "endpoint"}
# Words that make a list of strings a list of paths (``filesToStage``, ``source_files``).
_PATH_LIST_WORDS = {"file", "files", "path", "paths", "dir", "dirs", "directories", "folders"}
_FLAG_TYPES = {"boolean", "integer", "number", "null"}
_MOVE_FROM = {"source", "src", "from", "old"}


def words(name: str) -> list[str]:
    """``read_text_file``, ``readTextFile``, ``read-text-file`` -> read, text, file.

    >>> words("getRepoPath"), words("move_file")
    (['get', 'repo', 'path'], ['move', 'file'])
    """
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    return [w for w in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if w]


def _schema_text(schema: Mapping[str, Any]) -> str:
    return f"{schema.get('title', '')} {schema.get('description', '')}".lower()


def is_flag(schema: Mapping[str, Any]) -> bool:
    """An argument whose value is a switch, a number or one of a fixed set (``enum``,
    ``const``): it never names a resource.

    >>> is_flag({"type": "boolean"}), is_flag({"type": "string", "enum": ["yes"]})
    (True, True)
    >>> is_flag({"type": ["string", "null"]}), is_flag({})
    (False, False)
    """
    if "enum" in schema or "const" in schema:
        return True
    kind = schema.get("type")
    kinds = set(kind) if isinstance(kind, list) else {kind} if isinstance(kind, str) else set()
    return bool(kinds) and kinds <= _FLAG_TYPES and kinds != {"null"}


def _is_path_list(parts: list[str], schema: Mapping[str, Any]) -> bool:
    items = schema.get("items") if isinstance(schema.get("items"), dict) else {}
    assert isinstance(items, dict)
    return (
        schema.get("type") == "array"
        and items.get("type") in ("string", None)
        and (bool(set(parts) & _PATH_LIST_WORDS))
    )


def looks_like_path(name: str, schema: Mapping[str, Any]) -> bool:
    """An argument that names a file or directory, by its name (its last word: ``repo_path``
    yes, ``source_timezone`` no; any word of a list of strings: ``filesToStage``) or its
    description; never a flag (:func:`is_flag`)."""
    if is_flag(schema):
        return False
    parts = words(name)
    if (parts and parts[-1] in _PATH_NAMES) or _is_path_list(parts, schema):
        return True
    if schema.get("format") in ("uri", "url"):
        return False
    text = _schema_text(schema)
    return bool(re.search(r"\b(file ?path|directory|folder|path to|file to)\b", text))


def arguments_of(item: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """A tool's input-schema properties, or a prompt's arguments in the same form (a
    prompt argument is a string with a description).

    >>> arguments_of({"name": "fetch", "arguments": [{"name": "url", "description": "URL"}]})
    {'url': {'type': 'string', 'description': 'URL'}}
    """
    if isinstance(item.get("arguments"), list):
        return {
            str(arg["name"]): {"type": "string", "description": str(arg.get("description") or "")}
            for arg in item["arguments"]
            if isinstance(arg, dict) and "name" in arg
        }
    schema = item.get("inputSchema") if isinstance(item.get("inputSchema"), dict) else {}
    assert isinstance(schema, dict)
    properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    assert isinstance(properties, dict)
    return {str(k): v if isinstance(v, dict) else {} for k, v in properties.items()}


def _deleting_mode(tool: Mapping[str, Any]) -> bool:
    """An enum argument one of whose values deletes (``mode: delete``, ``reset --hard``)."""
    for spec in arguments_of(tool).values():
        values = spec.get("enum") if isinstance(spec.get("enum"), list) else []
        assert isinstance(values, list)
        if any(set(words(str(v))) & _DELETE_MODES for v in values):
            return True
    return False


def tool_effect(tool: Mapping[str, Any], gitish: bool = False) -> str:
    """What a tool does, on the strict side: a deleting name or mode first, then (for a
    tool that runs git) an operation that contacts a remote, a write whatever it hints;
    then the read-only hint; then the name's vocabulary; then the destructive hint."""
    hints = tool.get("annotations") if isinstance(tool.get("annotations"), dict) else {}
    assert isinstance(hints, dict)
    name = set(words(str(tool.get("name", ""))))
    if name & _DELETE or _deleting_mode(tool):
        return "delete"
    if gitish and name & _REMOTE_OPS:
        return "write"
    if hints.get("readOnlyHint") is True:
        return "read"
    for effect, vocabulary in (
        ("delete", _DELETE),
        ("move", _MOVE),
        ("write", _WRITE),
        ("read", _READ),
    ):
        if name & vocabulary:
            return effect
    if hints.get("destructiveHint") is True:
        return "delete"
    return "other"


def _roles(tool: str, gitish: bool, effect: str, arg: str, schema: Mapping[str, Any]) -> list[str]:
    parts = set(words(arg))
    if is_flag(schema):
        return ["none"]
    if gitish and "branch" not in parts and ("remote" in parts or parts & _URL_NAMES):
        return ["git-remote-url"]
    if parts & _URL_NAMES or schema.get("format") in ("uri", "url"):
        return ["fetch-url"]
    last = words(arg)[-1] if words(arg) else ""
    git_refs = {"base", "target", "revision", "rev", "ref", "commit", "sha", "contains"}
    if last != "type" and ("branch" in parts or (gitish and last in git_refs)):
        return ["branch-name"]
    if "message" in parts and ("commit" in tool.lower() or gitish):
        return ["commit-message"]
    if looks_like_path(arg, schema):
        if effect == "move":
            if parts & _MOVE_FROM:
                return ["read-path", "delete-path"]
            return ["write-path"]
        if effect == "write" and set(words(tool)) & {"edit", "append", "patch", "replace"}:
            return ["read-path", "write-path"]  # it reads what it changes
        return {
            "read": ["read-path"],
            "delete": ["delete-path"],
        }.get(effect, ["write-path"])
    return ["none"]


def heuristic_annotation(
    server: str, item: Mapping[str, Any], kind: str = "tool"
) -> dict[str, Any]:
    """A draft annotation of a tool, or of a prompt when ``kind`` is ``"prompt"`` (the
    JSON form of ``policy.models.ToolAnnotation`` or ``PromptAnnotation``).

    >>> a = heuristic_annotation("fs", {"name": "write_file", "inputSchema": {"properties": {
    ...     "path": {"type": "string"}, "content": {"type": "string"}}}})
    >>> a["effect"], a["sideEffects"], a["args"]
    ('write', True, {'path': ['write-path'], 'content': ['none']})
    >>> p = heuristic_annotation("web", {"name": "fetch", "arguments": [{"name": "url"}]}, "prompt")
    >>> p["promptName"], p["effect"], p["args"]
    ('fetch', 'read', {'url': ['fetch-url']})
    """
    name = str(item.get("name", ""))
    # Only a tool runs git (a prompt renders a text): the registry knows which tools do.
    gitish = kind == "tool" and is_git_tool(server, name)
    effect = tool_effect(item, gitish)
    args = {
        arg: _roles(name, gitish, effect, arg, spec) for arg, spec in arguments_of(item).items()
    }
    names_a_resource = any(r != ["none"] for r in args.values())
    return {
        NAME_KEYS[kind]: name,
        "serverName": server,
        "effect": effect,
        "sideEffects": effect != "read" or names_a_resource,
        "args": args,
        "comment": "heuristic draft: review before trusting",
        "draft": True,
    }


_PATH_ROLES = {"read-path", "write-path", "delete-path"}
# The key that names what an annotation is for, by kind.
NAME_KEYS = {"tool": "toolName", "prompt": "promptName"}


def validate(item: Mapping[str, Any], annotation: Mapping[str, Any]) -> list[str]:
    """Problems that must stop an annotation of a tool or a prompt from being used: an
    argument that looks like a path without a path role, or an argument the tool or
    prompt has that the annotation lacks.

    >>> tool = {"name": "cat", "inputSchema": {"properties": {"file": {"type": "string"}}}}
    >>> validate(tool, {"toolName": "cat", "args": {"file": ["none"]}})
    ["cat: argument 'file' looks like a path but has no path role (it has none)"]
    """
    given = annotation.get("args") or {}
    problems = []
    for arg, spec in arguments_of(item).items():
        roles = given.get(arg)
        if roles is None:
            problems.append(f"{item.get('name')}: argument '{arg}' has no annotation")
        elif looks_like_path(arg, spec) and not (set(roles) & _PATH_ROLES):
            problems.append(
                f"{item.get('name')}: argument '{arg}' looks like a path but has no path role "
                f"(it has {', '.join(roles)})"
            )
    return problems
