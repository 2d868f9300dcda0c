"""Who calls: a :class:`Caller` has a name, a set of permissions and the source that vouches
for it (an identity provider's issuer, or ``static`` for a caller the deployment names in a
file).

Every layer that needs to know who is asking imports this: the transports that authenticate a
request, the audit log that records who made each call, the session that keeps each caller's
things apart (:attr:`Caller.key`) and the gate that will check what a caller may do
(:attr:`Caller.permissions`).

A caller file is one JSON object::

    {"name": "billing-agent", "permissions": ["crm:read", "files:write"]}
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable

from launcher.shared.user_errors import OptionError
from policy.json_text import NotJson, json_kind, parse_json
from policy.permissions import MAX_PERMISSION
from policy.permissions import name_problem as name_problem  # the rule a name follows
from sandbox_profiles.records import frozen

STATIC = "static"  # the issuer of a caller named by the deployment, not by a token
MAX_NAME = MAX_PERMISSION  # a caller's name follows a permission's rule
MAX_PERMISSIONS = 256
MAX_FILE = 64 * 1024
_FILE_KEYS = ("name", "permissions")
EXPECTED = (
    'a JSON object {"name": "billing-agent", "permissions": ["crm:read", ...]} '
    "(name: required; permissions: a list of strings, may be empty; no other keys)"
)


@frozen(slots=True)
class Caller:
    """One caller. ``issuer`` is :data:`STATIC` for a caller named in a file, else the
    identity provider that signed its token; two callers are the same when both name and
    issuer are.

    >>> c = Caller("billing-agent", frozenset({"crm:read"}), STATIC)
    >>> c.key, c.audited
    (('static', 'billing-agent'), {'name': 'billing-agent', 'issuer': 'static'})
    """

    name: str
    permissions: frozenset[str]
    issuer: str = STATIC
    # Who stands behind it (gateway mode: the issuer and the claims it was admitted by);
    # callers of no party share the room as one.
    party: str = ""

    @property
    def key(self) -> tuple[str, str]:
        """What tells callers apart (sessions, and what is kept per caller)."""
        return (self.issuer, self.name)

    @property
    def path_name(self) -> str:
        """The caller's name made safe for a path (:func:`path_name`)."""
        return path_name(self.name)

    @property
    def audited(self) -> dict[str, str]:
        """The caller as the audit log records it (its permissions are not)."""
        return {"name": self.name, "issuer": self.issuer}


# Kept as they are in a caller's directory name; every other byte is written %XX.
_KEPT = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789._-")
MAX_PATH_NAME = 200  # bytes; a longer encoding is shortened to a prefix and a hash
_HASHED_PREFIX = MAX_PATH_NAME - 65  # the prefix, then "~" and 64 hex digits


def path_name(name: str) -> str:
    """``name`` as one directory name that no other name maps to, here or on a filesystem
    that ignores case (macOS): lowercase letters, digits, ``-``, ``_`` and ``.`` (not first)
    are kept; every other byte is ``%`` and two uppercase hex digits (``%`` itself, ``/``,
    uppercase letters, so ``Bob`` and ``bob`` stay apart). It is never ``.`` or ``..`` and
    never hidden. An encoding over 200 bytes becomes its start, ``~`` (never kept) and the
    SHA-256 of the name.

    >>> path_name("billing-agent"), path_name("auth0|507f"), path_name("a/b"), path_name("a%2Fb")
    ('billing-agent', 'auth0%7C507f', 'a%2Fb', 'a%252%46b')
    >>> path_name(".."), path_name("Bob"), path_name("bob")
    ('%2E.', '%42ob', 'bob')
    >>> long = path_name("x" * 255); len(long), long[130:140]
    (200, 'xxxxx~d226')
    """
    out = []
    for i, byte in enumerate(name.encode("utf-8", "surrogateescape")):
        if byte in _KEPT and not (i == 0 and byte == ord(".")):
            out.append(chr(byte))
        else:
            out.append(f"%{byte:02X}")
    encoded = "".join(out)
    if len(encoded) <= MAX_PATH_NAME:
        return encoded
    digest = hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()
    prefix = encoded[:_HASHED_PREFIX]
    cut = prefix.rfind("%", len(prefix) - 2)  # never half of a %XX
    if cut != -1:
        prefix = prefix[:cut]
    return f"{prefix}~{digest}"


def permissions_problem(permissions: Iterable[object]) -> str | None:
    """What makes ``permissions`` no set of permissions (None: it is one): each a name as a
    caller's is (``crm:read``), at most 256.

    >>> permissions_problem(["crm:read", ""])
    'permission 2 is empty'
    """
    count = 0
    for count, permission in enumerate(permissions, 1):
        problem = name_problem(permission)
        if problem is not None:
            return f"permission {count} {problem}"
    if count > MAX_PERMISSIONS:
        return f"holds {count} permissions, more than {MAX_PERMISSIONS}"
    return None


def load_caller_file(path: str, option: str = "caller_file") -> Caller:
    """The caller a file names, or an :class:`OptionError` (as the setting ``option``'s)
    naming the file, what is wrong and what was expected."""
    try:
        with open(os.path.expanduser(path), "rb") as handle:
            raw = handle.read(MAX_FILE + 1)
    except OSError as exc:
        raise OptionError(option, path, f"cannot be read: {exc.strerror}") from None
    if len(raw) > MAX_FILE:
        raise OptionError(option, path, f"is larger than {MAX_FILE} bytes; expected {EXPECTED}")
    try:
        data = parse_json(raw)
    except NotJson as exc:
        where = f" (line {exc.line}, column {exc.column})" if exc.line else ""
        raise OptionError(option, path, f"is not JSON{where}; expected {EXPECTED}") from None
    try:
        return caller_of(data)
    except ValueError as exc:
        raise OptionError(option, path, f"{exc}; expected {EXPECTED}") from None


def caller_of(data: object) -> Caller:
    """The caller ``data`` (a parsed caller file) names; a :class:`ValueError` says what is
    wrong with it.

    >>> caller_of({"name": "billing-agent"}).permissions
    frozenset()
    >>> caller_of({"name": "a", "role": "x"})
    Traceback (most recent call last):
    ValueError: has the unknown key "role"
    """
    if not isinstance(data, dict):
        raise ValueError(f"holds a JSON {json_kind(data)}, not an object")
    unknown = [k for k in data if k not in _FILE_KEYS]
    if unknown:
        raise ValueError(f"has the unknown key {json.dumps(unknown[0])}")
    if "name" not in data:
        raise ValueError('has no "name"')
    problem = name_problem(data["name"])
    if problem is not None:
        raise ValueError(f'its "name" {problem}')
    permissions = data.get("permissions", [])
    if not isinstance(permissions, list):
        raise ValueError(f'its "permissions" is a JSON {json_kind(permissions)}, not a list')
    problem = permissions_problem(permissions)
    if problem is not None:
        raise ValueError(f'its "permissions": {problem}')
    return Caller(data["name"], frozenset(permissions), STATIC)
