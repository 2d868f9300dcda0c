"""Annotation-driven canonicalisation of tool arguments."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from policy.models import Annotation
from policy.paths import canonical_path, looks_like_path
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
    (``structural-path-shape``): it is never forwarded un-canonicalised.

    >>> from policy.models import ToolAnnotation
    >>> ann = ToolAnnotation(tool_name="w", server_name="s", effect="write", side_effects=True,
    ...                      args={"path": ["write-path"], "content": ["none"]})
    >>> prepare_tool_args({"path": "/tmp/../tmp/a", "content": "/etc/../x"}, ann)[0]
    {'path': '/tmp/a', 'content': '/etc/../x'}
    """
    transport: dict[str, object] = {}
    if annotation is None:
        for key, value in args.items():
            transport[key] = _heuristic(value, cwd, home)
    else:
        roles_by_arg = annotation.args
        for key, value in args.items():
            canon = resource_role(roles_by_arg.get(key))
            transport[key] = value if canon is None else _apply(value, canon, cwd, home)
    policy = {k: (list(v) if isinstance(v, list) else v) for k, v in transport.items()}
    return transport, policy
