"""Whether a caller may make a request at all: what ``permissions.json`` requires of the
tool or prompt the request reaches, against the permissions the caller holds.

This is decided first and alone: a caller that lacks a required permission is refused with
:data:`NOT_PERMITTED`, and the policy is not asked (its answer would tell the caller
something about a tool it may not use). Everything that decides a caller's permission (the
gate for each request, the listings a caller is shown, a server's question on a call's
behalf, the one-call preview) asks :func:`caller_access`.
"""

from __future__ import annotations

from policy.decision import Decision
from policy.permissions import Permissions
from sandbox_profiles.records import frozen

# The MCP methods that reach a guarded tool or prompt.
CALL_TOOL, GET_PROMPT, COMPLETE = "tools/call", "prompts/get", "completion/complete"
_PROMPT_REF = "ref/prompt "  # a completion of a prompt's argument names it so

# What a caller without a required permission is told: nothing of what it lacks.
NOT_PERMITTED = Decision("deny", "caller-permissions", "operation not permitted")


@frozen(slots=True)
class Access:
    """What :func:`caller_access` found: the permissions the caller lacks (sorted; empty:
    it may make the request, and the policy decides it)."""

    missing: tuple[str, ...] = ()

    @property
    def permitted(self) -> bool:
        return not self.missing

    @property
    def refusal(self) -> Decision | None:
        """The decision that ends the request (:data:`NOT_PERMITTED`), or None."""
        return NOT_PERMITTED if self.missing else None


_PERMITTED = Access()


def guarded(method: str, name: str) -> tuple[str, str] | None:
    """The list of ``permissions.json`` (``tools`` or ``prompts``) and the name in it that
    a request of ``method`` naming ``name`` reaches; None when no entry can guard it. A
    completion of a prompt's argument reaches the prompt: it reveals what the prompt does.

    >>> guarded("tools/call", "write_file"), guarded("prompts/get", "summarize")
    (('tools', 'write_file'), ('prompts', 'summarize'))
    >>> guarded("completion/complete", "ref/prompt summarize")
    ('prompts', 'summarize')
    >>> guarded("completion/complete", "ref/resource file:///{path}") is None
    True
    >>> guarded("resources/read", "file:///etc/passwd") is None
    True
    """
    if method == CALL_TOOL:
        return "tools", name
    if method == GET_PROMPT:
        return "prompts", name
    if method == COMPLETE and name.startswith(_PROMPT_REF):
        return "prompts", name.removeprefix(_PROMPT_REF)
    return None


def caller_access(
    permissions: Permissions,
    method: str,
    server: str | None,
    name: str,
    held: frozenset[str] | None,
) -> Access:
    """Whether a caller holding ``held`` may make the request ``method`` naming ``name`` of
    ``server``. Nothing is missing when there is no caller (``held`` None: one local user),
    no server offers ``name`` (``server`` None: the request reaches nothing), or the
    request reaches nothing ``permissions.json`` can guard.

    >>> from policy.permissions import parse_permissions
    >>> p = parse_permissions({"tools": [
    ...     {"server": "crm", "tool": "delete_*", "required": ["crm:admin", "crm:use"]}]},
    ...     "permissions.json")
    >>> caller_access(p, "tools/call", "crm", "delete_customer", frozenset({"crm:use"}))
    Access(missing=('crm:admin',))
    >>> caller_access(p, "tools/call", "crm", "delete_customer", None).permitted
    True
    """
    if held is None or server is None or not permissions:
        return _PERMITTED
    reached = guarded(method, name)
    if reached is None:
        return _PERMITTED
    missing = permissions.missing(reached[0], server, reached[1], held)
    return Access(tuple(missing)) if missing else _PERMITTED
