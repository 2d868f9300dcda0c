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
from collections.abc import Mapping, Sequence
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


_REF_TEXT = re.compile(r"\b(commit|branch|tag|revision|ref)s?\b")
_PATH_TEXT = re.compile(r"\b(paths?|files?|director(y|ies)|folders?)\b")


def names_a_ref(schema: Mapping[str, Any]) -> bool:
    """An argument its description says is a git commit, branch or tag, and says nothing of
    a file or path (``git_diff``'s ``source``: "Source commit/branch to compare from").

    >>> names_a_ref({"description": "Source commit/branch to compare from."})
    True
    >>> names_a_ref({"description": "File to show at the given commit."})
    False
    """
    text = _schema_text(schema)
    return bool(_REF_TEXT.search(text)) and not _PATH_TEXT.search(text)


def looks_like_path(name: str, schema: Mapping[str, Any]) -> bool:
    """An argument that names a file or directory, by its name (its last word: ``repo_path``
    yes, ``source_timezone`` no; any word of a list of strings: ``filesToStage``) or its
    description; never a flag (:func:`is_flag`) nor what its description says is a git
    commit or branch (:func:`names_a_ref`)."""
    if is_flag(schema) or names_a_ref(schema):
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
    # A path-like name its description says is a commit or branch (git_diff's ``source``).
    ref_named = last in git_refs or (last in _PATH_NAMES and names_a_ref(schema))
    refers = "branch" in parts or (gitish and ref_named)
    if last != "type" and refers:
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
    drafted: dict[str, Any] = {
        NAME_KEYS[kind]: name,
        "serverName": server,
        "effect": effect,
        "sideEffects": effect != "read" or names_a_resource,
        "args": args,
    }
    relative = relative_paths(server, item, args) if kind == "tool" else {}
    if relative:
        drafted["relativeTo"] = relative
    return {**drafted, "comment": "heuristic draft: review before trusting", "draft": True}


def repository_argument(specs: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The argument of a tool that runs git naming the repository it works in: a single
    path (not a list) named for a repository or said to be one.

    >>> repository_argument({"filePath": {"type": "string"},
    ...     "path": {"type": "string", "description": "Path to the Git repository."}})
    'path'
    >>> repository_argument({"repo_path": {"type": "string"}}), repository_argument({})
    ('repo_path', None)
    """
    for arg, spec in specs.items():
        text = _schema_text(spec)
        if spec.get("type") == "array" or not looks_like_path(arg, spec) or "relative" in text:
            continue
        if {"repo", "repository"} & set(words(arg)) or "repository" in text:
            return arg
    return None


def relative_paths(
    server: str, tool: Mapping[str, Any], roles: Mapping[str, Sequence[str]]
) -> dict[str, str]:
    """For a tool that runs git, every path argument but its repository argument (given
    ``roles``, an annotator's) -> the repository argument: git runs in the repository, so a
    relative path (``git show HEAD:README.md``, ``git add src/a.py``) starts there.

    >>> relative_paths("git", {"name": "git_add", "inputSchema": {"properties": {
    ...     "repo_path": {"type": "string"}, "files": {"type": "array"}}}},
    ...     {"repo_path": ["write-path"], "files": ["write-path"]})
    {'files': 'repo_path'}
    """
    if not is_git_tool(server, str(tool.get("name", ""))):
        return {}
    repository = repository_argument(arguments_of(tool))
    if repository is None:
        return {}
    return {
        arg: repository
        for arg, given in roles.items()
        if arg != repository and set(given) & _PATH_ROLES
    }


_PATH_ROLES = {"read-path", "write-path", "delete-path"}
# The key that names what an annotation is for, by kind.
NAME_KEYS = {"tool": "toolName", "prompt": "promptName"}


def validate(
    item: Mapping[str, Any], annotation: Mapping[str, Any], reviewed: bool = False
) -> list[str]:
    """Problems that must stop an annotation of a tool or a prompt from being used: an
    argument the tool or prompt has that the annotation lacks; a path role on a flag, a
    number or one of fixed values (:func:`is_flag`), which names no file; a ``relativeTo``
    naming no argument; and, in a draft (an annotator's, not ``reviewed`` by a person), an
    argument that looks like a path without a path role. A person may give such an
    argument ``none`` (a name, not a file: ``git_show``'s ``filePath`` read from history).

    >>> tool = {"name": "cat", "inputSchema": {"properties": {"file": {"type": "string"}}}}
    >>> validate(tool, {"toolName": "cat", "args": {"file": ["none"]}})
    ["cat: argument 'file' looks like a path but has no path role (it has none)"]
    >>> validate(tool, {"toolName": "cat", "args": {"file": ["none"]}}, reviewed=True)
    []
    """
    name = item.get("name")
    given = annotation.get("args") or {}
    problems = []
    for arg, spec in arguments_of(item).items():
        roles = given.get(arg)
        if roles is None:
            problems.append(f"{name}: argument '{arg}' has no annotation")
        elif is_flag(spec) and set(roles) & _PATH_ROLES:
            problems.append(
                f"{name}: argument '{arg}' takes a flag, a number or one of fixed values, "
                f"never a path, but has the path role {', '.join(sorted(set(roles) & _PATH_ROLES))}"
            )
        elif not reviewed and looks_like_path(arg, spec) and not (set(roles) & _PATH_ROLES):
            problems.append(
                f"{name}: argument '{arg}' looks like a path but has no path role "
                f"(it has {', '.join(roles)})"
            )
    for arg, base in (annotation.get("relativeTo") or {}).items():
        if base not in given or base == arg:
            problems.append(
                f"{name}: relativeTo: argument '{arg}' is relative to '{base}', "
                "which is no other argument of it"
            )
    return problems
