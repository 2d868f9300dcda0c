"""The one ``${…}`` expander: ``${NAME}`` and ``${NAME:-default}``.

Used for the config file's values (environment variables and ``${workspace}``) and for the
policy's ``within`` paths (``${workspace}``). A name that is not set and has no default, or a
reference that is not a name, is a :class:`PlaceholderError`; the caller says where it was.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

PLACEHOLDER = re.compile(r"\$\{([^}]*)\}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class PlaceholderError(ValueError):
    """A ``${…}`` that cannot be expanded; the message says which and why."""


def placeholder_names(value: str) -> list[str]:
    """The names ``value`` refers to, defaults stripped.

    >>> placeholder_names("${workspace}/a/${HOME:-/h}")
    ['workspace', 'HOME']
    """
    return [body.partition(":-")[0] for body in PLACEHOLDER.findall(value)]


def expand(value: str, variables: Mapping[str, str]) -> str:
    """``value`` with every ``${NAME}`` replaced; an empty value counts as unset.

    >>> expand("${A}-${B:-x}", {"A": "1"})
    '1-x'
    """

    def sub(match: re.Match[str]) -> str:
        body = match.group(1)
        name, sep, default = body.partition(":-")
        if not _NAME.fullmatch(name):
            raise PlaceholderError(f"invalid variable reference ${{{body}}}")
        found = variables.get(name)
        if found:
            return found
        if sep:
            return default
        raise PlaceholderError(
            f"${{{name}}} is not set (use ${{{name}:-default}} to give a default)"
        )

    return PLACEHOLDER.sub(sub, value)
