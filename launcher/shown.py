"""Text from servers, clients and files made safe to show a person: characters that act
(move the cursor, erase, ring, reorder text) or hide instead of showing are written as
escapes. The one table for everything ironcurtain prints or asks from others' data: the
operator's lines, ``audit tail`` and ``audit verify``, a server's stderr, approval
questions, the forms and messages a server puts to the client."""

from __future__ import annotations

import re

# C0 controls (newline and tab apart), DEL, C1 controls; the soft hyphen, the Arabic letter
# mark, the Mongolian vowel separator and free variation selectors; zero-width spaces and
# joiners, the direction marks, embeddings, overrides and isolates, the line and paragraph
# separators; word joiner and invisible operators; the byte-order mark; interlinear
# annotation marks; tag characters; fillers that draw nothing (combining grapheme joiner,
# Hangul and Khmer fillers); and lone surrogates, which a terminal cannot even be sent.
_ACTS = (
    "\x00-\x08\x0b-\x1f\x7f-\x9f\xad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f"
    "\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufeff\uffa0\ufff9-\ufffb"
    "\U000e0000-\U000e007f\ud800-\udfff"
)
_HIDDEN = re.compile(f"[{_ACTS}]")
_HIDDEN_OR_NEWLINE = re.compile(f"[{_ACTS}\n]")


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
    if text.isascii() and text.isprintable():  # the common case: nothing to look for
        return text
    return (_HIDDEN_OR_NEWLINE if one_line else _HIDDEN).sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
