"""Whether a caller may make a request (``policy.access.caller_access``), as a table: what
``permissions.json`` requires of the tool or prompt a request reaches, against what the
caller holds; no caller, no server or an unguarded method require nothing."""

from __future__ import annotations

import pytest

from policy.access import NOT_PERMITTED, Access, caller_access, guarded
from policy.permissions import Permissions, parse_permissions

PERMISSIONS = parse_permissions(
    {
        "tools": [
            {"server": "crm", "tool": "delete_*", "required": ["crm:admin"]},
            {"server": "crm", "tool": "*", "required": ["crm:use"]},
            {"server": "*", "tool": "export", "required": ["export"]},
        ],
        "prompts": [{"server": "crm", "prompt": "summarize", "required": ["crm:read"]}],
    },
    "permissions.json",
)
USER = frozenset({"crm:use"})
ADMIN = frozenset({"crm:use", "crm:admin"})
READER = frozenset({"crm:read"})
NONE: frozenset[str] = frozenset()

TABLE = [
    # method, server, name, held, missing
    ("tools/call", "crm", "get_customer", USER, ()),
    ("tools/call", "crm", "get_customer", NONE, ("crm:use",)),
    ("tools/call", "crm", "delete_customer", USER, ("crm:admin",)),
    ("tools/call", "crm", "delete_customer", ADMIN, ()),
    ("tools/call", "crm", "delete_customer", NONE, ("crm:admin", "crm:use")),
    ("tools/call", "crm", "export", ADMIN, ("export",)),
    ("tools/call", "files", "export", NONE, ("export",)),
    ("tools/call", "files", "read_file", NONE, ()),
    # Globs are the file's: a caller's permission or a tool's name is never one.
    ("tools/call", "crm", "delete_customer", frozenset({"crm:*", "crm:use"}), ("crm:admin",)),
    ("tools/call", "crm", "Delete_customer", USER, ()),
    ("tools/call", "CRM", "delete_customer", NONE, ()),
    # A prompt, and a completion of its argument (it reveals the prompt): the same.
    ("prompts/get", "crm", "summarize", USER, ("crm:read",)),
    ("prompts/get", "crm", "summarize", READER, ()),
    ("completion/complete", "crm", "ref/prompt summarize", USER, ("crm:read",)),
    ("completion/complete", "crm", "ref/prompt summarize", READER, ()),
    # A tool's entries do not guard a prompt of the same name, nor the other way round.
    ("prompts/get", "crm", "get_customer", NONE, ()),
    ("tools/call", "crm", "summarize", READER, ("crm:use",)),
    # What permissions.json cannot guard: resources, a template's completion, other methods.
    ("resources/read", "crm", "file:///etc/passwd", NONE, ()),
    ("completion/complete", "crm", "ref/resource db://{table}", NONE, ()),
    ("tools/list", "crm", "", NONE, ()),
]


@pytest.mark.parametrize(("method", "server", "name", "held", "missing"), TABLE)
def test_the_decision_table(
    method: str, server: str, name: str, held: frozenset[str], missing: tuple[str, ...]
) -> None:
    access = caller_access(PERMISSIONS, method, server, name, held)
    assert access == Access(missing)
    assert access.permitted is (not missing)
    assert access.refusal == (NOT_PERMITTED if missing else None)


@pytest.mark.parametrize(("method", "server", "name", "held", "missing"), TABLE)
def test_without_a_caller_or_a_server_nothing_is_required(
    method: str, server: str, name: str, held: frozenset[str], missing: tuple[str, ...]
) -> None:
    """No caller (one local user) and a name no server offers reach no permission check;
    nor does anything when ``permissions.json`` is empty."""
    assert caller_access(PERMISSIONS, method, server, name, None).permitted
    assert caller_access(PERMISSIONS, method, None, name, held).permitted
    assert caller_access(Permissions(), method, server, name, held).permitted


def test_a_refusal_tells_nothing_of_what_is_missing() -> None:
    refusal = caller_access(PERMISSIONS, "tools/call", "crm", "delete_x", USER).refusal
    assert refusal is not None
    assert (refusal.decision, refusal.rule) == ("deny", "caller-permissions")
    assert "crm:admin" not in refusal.reason


@pytest.mark.parametrize(
    ("method", "name", "reached"),
    [
        ("tools/call", "ref/prompt x", ("tools", "ref/prompt x")),
        ("prompts/get", "ref/prompt x", ("prompts", "ref/prompt x")),
        ("completion/complete", "ref/prompt x", ("prompts", "x")),
        ("completion/complete", "ref/promptx", None),
        ("completion/complete", "ref/resource x", None),
        ("resources/subscribe", "file:///x", None),
        ("notifications/cancelled", "x", None),
    ],
)
def test_what_a_method_reaches(method: str, name: str, reached: tuple[str, str] | None) -> None:
    assert guarded(method, name) == reached
