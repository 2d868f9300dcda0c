"""The shared state's interface: the few operations the relay and the HTTP endpoint need,
each in words of what it keeps, none in words of the store that keeps it.

Every operation of a store that can be lost (Redis) raises :class:`StateLost` when the store
cannot be reached; those who call it decide what failing closed means for them (an
escalation is denied; a count falls back to this instance's own)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Protocol


class StateLost(Exception):
    """The shared state cannot be reached now: nothing was read or written."""


class SharedState(Protocol):
    """What instances of one gateway share. ``scope``: whose it is (a caller's key, hashed;
    ``-`` for the one local user); ``group``: what a grant is kept under (server and tool).
    """

    where: str  # how it is named to the operator (``in this process``, ``redis://host:6379/0``)
    shared: bool  # whether another instance sees what this one keeps

    def reachable(self) -> bool:
        """Whether the store answers now (a loss and a recovery noticed here are said as
        any other operation's)."""
        ...

    def sealing_key(self) -> bytes:
        """The key every instance seals and opens question rounds' state with (made by the
        first instance that asks, the same for every instance after it)."""
        ...

    def granted(self, scope: str, group: str, item: str) -> bool:
        """Whether ``item`` of ``group`` was granted to ``scope`` (and keep it longer)."""
        ...

    def grant(self, scope: str, group: str, item: str) -> None:
        """Grant ``item`` of ``group`` to ``scope``, for ``KEEP_FOR`` seconds after its last use."""
        ...

    def revoke(self, scope: str, group: str) -> None:
        """Every item of ``group`` granted to ``scope`` no longer counts."""
        ...

    def count(self, key: str, limit: int, window: float) -> bool:
        """Count one more event of ``key``: False (and not counted) when ``limit`` of them
        fell within the last ``window`` seconds already."""
        ...

    def enter(self, key: str, token: str, most: int) -> bool:
        """``token`` is one more of ``key`` at once: False (and not entered) when ``most``
        are in already. Each entry lapses after ``LEASE`` seconds unless it leaves sooner
        (an instance that dies does not hold its entries for ever)."""
        ...

    def leave(self, key: str, token: str) -> None:
        """``token`` of ``key`` is over."""
        ...

    def first_use(self, mark: str, ttl: float) -> bool:
        """Whether this is the first use of ``mark`` (kept ``ttl`` seconds): a single-use
        handle is taken by one instance once."""
        ...

    def patterns(self, scope: str) -> dict[str, str]:
        """The pattern approvals given to ``scope``: id -> record (kept ``KEEP_FOR`` seconds
        after ``scope``'s last look at them or the last one given)."""
        ...

    def add_pattern(self, scope: str, pid: str, record: str) -> None:
        """Give ``scope`` the pattern ``pid`` (its ``record``, as the giver wrote it)."""
        ...

    def drop_pattern(self, scope: str, pid: str) -> bool:
        """Take back the pattern ``pid`` of ``scope``: whether it was there."""
        ...

    def every_pattern(self) -> dict[str, dict[str, str]]:
        """Every scope's pattern approvals: scope -> id -> record."""
        ...


def scope_of(key: tuple[str, ...] | None) -> str:
    """Whose state it is, as the shared state names it: a caller's key (issuer and name),
    hashed; ``-`` for the session's one user.

    >>> scope_of(None), scope_of(("https://id.example", "alice"))[:12]
    ('-', 'c-ee2a34cf82')
    >>> scope_of(("https://id.example", "a\\0b")) == scope_of(("https://id.example\\0a", "b"))
    False
    """
    if key is None:
        return "-"
    return "c-" + _digest(key)


def deployment_of(*who: str | None) -> str:
    """A deployment's name in a shared state, from what tells it from another that shares
    the store: who may call it (an identity provider's issuer and audience, or its bearer
    token), so that an approval, a count or a sealed state of one is never another's.

    >>> deployment_of("https://id.example", "a") == deployment_of("https://id.example", "b")
    False
    """
    return _digest(("deployment", *who))


def secret_name(secret: str) -> str:
    """A name for a deployment known by a secret (its bearer token), slow to make (a key
    derivation), so that one who reads the store's key names cannot try guesses at a weak
    token quickly.

    >>> secret_name("t0ken") == secret_name("t0ken") != secret_name("t0ken2")
    True
    """
    derived = hashlib.pbkdf2_hmac("sha256", secret.encode(), b"ironcurtain deployment", 100_000)
    return derived.hex()


def _digest(parts: Sequence[str | None]) -> str:
    """A digest of ``parts`` that no other list of strings has (each is JSON, not joined)."""
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]


# How long a grant lasts after its last use (as what is kept of a caller in one instance).
KEEP_FOR = 30 * 60.0
# How long one request is counted among its caller's at most.
LEASE = 15 * 60.0
