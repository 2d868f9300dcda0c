"""Plain ASCII text is shown as it is without the escape table's pattern being compiled;
every ASCII character is escaped or kept exactly as the table says, in both modes."""

from __future__ import annotations

import re

from launcher.shared import shown
from launcher.shared.shown import visible


def test_every_ascii_character_is_shown_as_the_table_says() -> None:
    for one_line in (False, True):
        table = re.compile(f"[{shown._ACTS}\n]" if one_line else f"[{shown._ACTS}]")
        for code in range(0x80):
            text = f"a{chr(code)}b\tc"
            expected = table.sub(shown._escape, text)
            assert visible(text, one_line=one_line) == expected, (hex(code), one_line)


def test_plain_text_of_several_lines_needs_no_pattern() -> None:
    shown._hidden.cache_clear()
    assert visible("ironcurtain: session\n  fast\tsandboxed\n") == (
        "ironcurtain: session\n  fast\tsandboxed\n"
    )
    assert shown._hidden.cache_info().currsize == 0
    assert visible("a\nb", one_line=True) == "a\\x0ab"
    assert shown._hidden.cache_info().currsize == 1
