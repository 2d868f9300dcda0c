"""Text from servers, clients and files made safe to show a person: characters that act
(move the cursor, erase, ring, reorder text) or hide instead of showing are written as
escapes. The one table for everything ironcurtain prints or asks from others' data: the
operator's lines, ``audit tail`` and ``audit verify``, a server's stderr, approval
questions, the forms and messages a server puts to the client."""

from __future__ import annotations

import functools
import re

# Every character of the categories that act or draw nothing in Unicode 14 (Cc controls,
# newline and tab apart; Cf formats: direction marks, embeddings, overrides and isolates,
# zero-width spaces and joiners, invisible operators, the byte-order mark, tags; Cs lone
# surrogates, which a terminal cannot even be sent; Co private use; Zl and Zp separators),
# with the variation selectors (one per byte: text can be hidden after any character) and
# the fillers that draw nothing (soft hyphen, combining grapheme joiner, Hangul, Khmer and
# Mongolian fillers, braille blank). Written out, not computed at import (that costs a
# start 0.1 s); tests/attacks/test_audit_integrity.py holds it against the running Python's tables.
_ACTS = (
    "\x00-\x08\x0b-\x1f\x7f-\x9f\xad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891"
    "\u08e2\u115f-\u1160\u17b4-\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f"
    "\u2800\u3164\ud800-\uf8ff\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb\U000110bd\U000110cd"
    "\U00013430-\U00013438\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e007f"
    "\U000e0100-\U000e01ef\U000f0000-\U000ffffd\U00100000-\U0010fffd"
)


@functools.cache
def _hidden(one_line: bool) -> re.Pattern[str]:
    """The characters to escape (with the newline when ``one_line``): compiled at the first
    text that needs it (some 4 ms of a start that shows plain text only)."""
    return re.compile(f"[{_ACTS}\n]" if one_line else f"[{_ACTS}]")


def visible(text: str, *, one_line: bool = False) -> str:
    """``text`` with characters that act or hide instead of showing as escapes. Newlines and
    tabs are kept, unless ``one_line``: then a newline is an escape too, so a name cannot
    start a line that looks like one of ironcurtain's own.

    >>> print(visible("Name?\\x1b[2K\\r\\u202eevil\\nnext"))
    Name?\\x1b[2K\\x0d\\u202eevil
    next
    >>> print(visible("a.txt\\nironcurtain: all clear", one_line=True))
    a.txt\\x0aironcurtain: all clear
    """
    if text.isascii():  # the common case: only ASCII's controls to look for
        kept = text.replace("\t", "") if one_line else text.replace("\t", "").replace("\n", "")
        if kept.isprintable():
            return text
    return _hidden(one_line).sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
