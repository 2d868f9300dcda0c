"""Text from servers and clients made safe to show a person: characters that act (move the
cursor, erase, reorder text) instead of showing are written as escapes."""

from __future__ import annotations

import re

_HIDDEN = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\xad\u061c\u180e\u200b-\u200f\u2028-\u202e"
    "\u2060-\u2069\ufeff\ufff9-\ufffb\U000e0000-\U000e007f]"
)


def visible(text: str) -> str:
    """``text`` with characters that act instead of showing as escapes (newlines and tabs
    are kept).

    >>> print(visible("Name?\\x1b[2K\\r\\u202eevil\\nnext"))
    Name?\\x1b[2K\\x0d\\u202eevil
    next
    """
    return _HIDDEN.sub(lambda m: _escape(m.group()), text)


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
