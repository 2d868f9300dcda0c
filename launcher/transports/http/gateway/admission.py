"""Who a gateway admits, and the party each admitted caller belongs to.

An identity provider signs tokens for many subjects (GitHub's for every repository), so a
valid signature makes no one a caller by itself: the operator requires claims
(``CLAIM=GLOB``, each one must match; a claim that is a list matches when any of its
values does; an empty value matches nothing; a number or boolean is matched as JSON writes
it, ``email_verified=true``; ``*`` stands for any run of characters, every other character
for itself). A token that fails one is refused before any server starts for it.

A *party* is who stands behind a subject: the issuer and the values of the required claims
(``repository_owner=acme``), so every repository of one owner is one party. Without
requirements the party is the issuer alone: all its subjects are one party. The room a
gateway keeps for callers is shared between parties (:func:`giving_way`): when a newcomer
needs room, only its own party's idle callers, or those of a party holding more than its
fair share, give way; so many fresh subjects of one party cannot take the room of another
party's callers; nor can one party's subjects, each keeping its own busy, hold all of it:
told apart by required claims, a party holds at most :func:`party_room` of it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from launcher.shared.user_errors import OptionError
from policy.globs import star_match

Requirement = tuple[str, str]  # a claim's name, and the glob its value must match


def requirement(text: str, setting: str = "oidc_require") -> Requirement:
    """``CLAIM=GLOB`` read; an :class:`OptionError` naming ``setting`` says what is wrong.

    >>> requirement("repository_owner=acme")
    ('repository_owner', 'acme')
    """
    claim, eq, glob = text.partition("=")
    if not eq or not claim.strip() or not glob:
        raise OptionError(setting, text, "expected CLAIM=GLOB (e.g. repository_owner=acme)")
    if claim != claim.strip() or not (claim + glob).isprintable():
        raise OptionError(setting, text, "the claim's name or glob holds spaces or controls")
    return claim, glob


def unmet(claims: Mapping[str, Any], required: Sequence[Requirement]) -> str | None:
    """The first requirement ``claims`` fail, said for the operator (None: all met).

    >>> unmet({"org": ["acme", "x"]}, [("org", "ac*")]) is None
    True
    >>> unmet({"org": "evil"}, [("org", "acme")])
    'its "org" claim does not match acme'
    """
    for claim, glob in required:
        if not any(star_match(value, glob) for value in _strings(claims.get(claim))):
            shown = json.dumps(claim)
            return f"its {shown} claim " + (
                "is missing" if claim not in claims else f"does not match {glob}"
            )
    return None


def party(issuer: str, claims: Mapping[str, Any], required: Sequence[Requirement]) -> str:
    """The party behind a token: its issuer, and what it has of each required claim.

    >>> party("https://id", {"owner": "acme", "sub": "a"}, [("owner", "*")])
    'https://id owner=["acme"]'
    """
    values = [
        f"{claim}={json.dumps(sorted(set(_strings(claims.get(claim)))))}"
        for claim in dict.fromkeys(claim for claim, _ in required)
    ]
    return " ".join([issuer, *values])


def _strings(value: object) -> list[str]:
    """A claim's values as text: a string, each string of a list, a number or a boolean
    as JSON writes it (``true``); nothing of an object, nor an empty string (a claim present
    but empty names no one: ``*`` does not match it).

    >>> _strings(["a", 1, {"b": 2}, ""]), _strings(True), _strings(None), _strings("")
    (['a', '1'], ['true'], [], [])
    """
    if isinstance(value, list):
        return [text for item in value if not isinstance(item, list) for text in _strings(item)]
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, bool | int | float):
        return [json.dumps(value)]
    return []


def giving_way(newcomer: str, holders: Iterable[str], room: int) -> set[str]:
    """The parties whose idle holders may give way to a newcomer of party ``newcomer``:
    its own, and each holding more than its fair share of ``room`` (shared by the parties
    holding some of it and the newcomer's).

    >>> sorted(giving_way("p", ["q", "p", "p", "p"], 4))
    ['p']
    >>> sorted(giving_way("p", ["q", "q", "q", "q"], 4))
    ['p', 'q']
    """
    counts: dict[str, int] = {newcomer: 0}
    for holder in holders:
        counts[holder] = counts.get(holder, 0) + 1
    share = max(1, room // len(counts))
    return {newcomer} | {p for p, held in counts.items() if held > share}


def party_room(room: int) -> int:
    """The most of ``room`` (sessions, or callers' servers) one party holds when parties
    are told apart by required claims: all of it but a quarter (at least one place), so
    another party's newcomer always finds a place; a room of one is all the party's.

    >>> [party_room(n) for n in (1, 2, 4, 16)]
    [1, 1, 3, 12]
    """
    return max(1, room - max(1, room // 4))


def parted(issuer: str, party: str) -> bool:
    """Whether callers are told apart by party (required claims name it), rather than all
    being the issuer's one.

    >>> parted("https://id", "https://id"), parted("https://id", 'https://id o=["a"]')
    (False, True)
    """
    return party != issuer
