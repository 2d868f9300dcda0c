"""Annotation-driven canonicalisation of tool arguments.

A path argument is made canonical for the policy and forwarded so, unless its annotation
says it is relative to another argument (``relativeTo``: a path inside the repository a
tool that runs git works in). Such a value is judged where the server resolves it, from
that argument's directory (``..``, links and an absolute value followed as the kernel
follows them), and forwarded as given: the server expects it relative."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from policy.models import Annotation
from policy.paths import canonical_path, looks_like_path, resolve_real_path
from policy.roles import ArgumentRole, RoleDefinition, get_role_definition


def resource_role(roles: Sequence[ArgumentRole] | None) -> RoleDefinition | None:
    """The first resource-identifier role of an argument, if any."""
    for role in roles or ():
        definition = get_role_definition(role)
        if definition.is_resource_identifier:
            return definition
    return None


def _apply(value: object, canon: RoleDefinition, cwd: str | None, home: str | None) -> object:
    if isinstance(value, str):
        return canon.canonicalize(value, cwd, home)
    if isinstance(value, list):
        return [canon.canonicalize(v, cwd, home) if isinstance(v, str) else v for v in value]
    return value


def _heuristic(value: object, cwd: str | None, home: str | None) -> object:
    if isinstance(value, str):
        return canonical_path(value, cwd, home) if looks_like_path(value) else value
    if isinstance(value, list):
        return [_heuristic(v, cwd, home) if isinstance(v, str) else v for v in value]
    return value


def _from_base(value: object, base: str) -> object:
    """A relative argument's value as the policy sees it: each path resolved from
    ``base``; anything but strings left for the engine to refuse."""
    if isinstance(value, str):
        return resolve_real_path(value, base)
    if isinstance(value, list):
        return [resolve_real_path(v, base) if isinstance(v, str) else v for v in value]
    return value


def as_given(value: object) -> object:
    """A relative argument's value as it is forwarded: as given, except that a path
    starting with ``-`` is written ``./-...`` (the same file, never an option).

    >>> as_given(["src/a.py", "-rf", 3])
    ['src/a.py', './-rf', 3]
    """
    if isinstance(value, str):
        return "./" + value if value.startswith("-") else value
    if isinstance(value, list):
        return [as_given(v) if isinstance(v, str) else v for v in value]
    return value


def relative_bases(annotation: Annotation, args: Mapping[str, object]) -> dict[str, str | None]:
    """Each path argument of the call that is relative to another (``relativeTo``) ->
    that argument's name, None when the call does not give it as a string (then where the
    server resolves the path cannot be known)."""
    found: dict[str, str | None] = {}
    for key, base in annotation.relative_to.items():
        canon = resource_role(annotation.args.get(key))
        if key in args and canon is not None and canon.category == "path":
            found[key] = base if isinstance(args.get(base), str) else None
    return found


def prepare_tool_args(
    args: Mapping[str, object],
    annotation: Annotation | None,
    cwd: str | None = None,
    home: str | None = None,
) -> tuple[dict[str, object], dict[str, object]]:
    """Return ``(for_transport, for_policy)``; ``args`` is never mutated.

    Only arguments with a resource-identifier role are canonicalised; ``none`` arguments
    pass unchanged. Without an annotation (unknown tool) every path-looking string is.

    A path-role value is a string or a list of strings, each canonicalised for the policy
    and for the transport alike. Any other shape (a number, null, an object, a list holding
    anything but strings) is left as it is here and refused by the engine
    (``structural-path-shape``): it is never forwarded un-canonicalised. A path relative to
    another argument is judged from that argument's directory and forwarded as given
    (:func:`as_given`).

    >>> from policy.models import ToolAnnotation
    >>> ann = ToolAnnotation(tool_name="w", server_name="s", effect="write", side_effects=True,
    ...                      args={"path": ["write-path"], "content": ["none"]})
    >>> prepare_tool_args({"path": "/tmp/../tmp/a", "content": "/etc/../x"}, ann)[0]
    {'path': '/tmp/a', 'content': '/etc/../x'}
    >>> show = ToolAnnotation(tool_name="show", server_name="git", effect="read",
    ...     side_effects=True, args={"path": ["read-path"], "filePath": ["read-path"]},
    ...     relative_to={"filePath": "path"})
    >>> prepare_tool_args({"path": "/tmp/r/../r", "filePath": "../x/y"}, show)
    ({'path': '/tmp/r', 'filePath': '../x/y'}, {'path': '/tmp/r', 'filePath': '/tmp/x/y'})
    """
    transport: dict[str, object] = {}
    if annotation is None:
        for key, value in args.items():
            transport[key] = _heuristic(value, cwd, home)
        return transport, {k: (list(v) if isinstance(v, list) else v) for k, v in transport.items()}
    relative = relative_bases(annotation, args)
    for key, value in args.items():
        canon = resource_role(annotation.args.get(key))
        if key in relative:
            transport[key] = as_given(value)
        else:
            transport[key] = value if canon is None else _apply(value, canon, cwd, home)
    policy = {k: (list(v) if isinstance(v, list) else v) for k, v in transport.items()}
    for key, base in relative.items():
        start = transport.get(base) if base is not None else None
        directory = canonical_path(start, cwd, home) if isinstance(start, str) else cwd
        policy[key] = _from_base(args[key], directory or os.getcwd())
    return transport, policy
