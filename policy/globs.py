"""Globs as the policy files write names: ``*`` stands for any run of characters, and
every other character stands for itself (``?``, ``[`` and ``]`` too: caller names, which an
identity provider chooses, may hold them)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache


def star_regex(glob: str) -> str:
    """A regular expression (not anchored) for ``glob``.

    >>> star_regex("svc[prod]-*")
    'svc\\\\[prod\\\\]\\\\-.*'
    """
    return ".*".join(re.escape(part) for part in glob.split("*"))


@lru_cache(maxsize=4096)
def _compiled(glob: str) -> re.Pattern[str]:
    return re.compile(star_regex(glob), re.DOTALL)


def star_match(name: str, glob: str) -> bool:
    """Whether ``glob`` matches the whole of ``name`` (case-sensitive).

    >>> star_match("get_customer", "get_*"), star_match("ops1", "ops?"), star_match("ops?", "ops?")
    (True, False, True)
    """
    return _compiled(glob).fullmatch(name) is not None


def star_pattern(globs: Iterable[str]) -> re.Pattern[str]:
    """One pattern matching a whole name any of ``globs`` matches (none: nothing)."""
    either = "|".join(f"(?:{star_regex(g)})" for g in globs)
    return re.compile(f"(?:{either})\\Z" if either else "(?!)", re.DOTALL)
