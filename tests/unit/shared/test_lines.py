"""JSON-lines framing fed from protocol callbacks: any chunking gives the same lines."""

from __future__ import annotations

import itertools
import random

import pytest

from launcher.shared.lines import LineBuffer

STREAM = b'{"a":1}\n\n{"b":"two"}\n' + b"x" * 40 + b'\n{"c":3}\n' + b"y" * 11 + b"\ntail"


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = [0, *sorted(cuts), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(points)]


@pytest.mark.parametrize("seed", range(40))
def test_any_chunking_gives_the_same_lines(seed: int) -> None:
    rng = random.Random(seed)
    cuts = [rng.randrange(len(STREAM)) for _ in range(rng.randrange(0, 12))]
    lines: list[bytes] = []
    overflows: list[None] = []
    buffer = LineBuffer(lines.append, limit=20, on_overflow=lambda: overflows.append(None))
    for chunk in split(STREAM, cuts):
        buffer.feed(chunk)
    buffer.close()
    # The 40-byte line is over the limit: dropped whole, reported once. 11 bytes is not.
    assert lines == [b'{"a":1}', b"", b'{"b":"two"}', b'{"c":3}', b"y" * 11, b"tail"]
    assert len(overflows) == 1


def test_a_line_of_exactly_the_limit_passes_and_one_more_byte_does_not() -> None:
    lines: list[bytes] = []
    buffer = LineBuffer(lines.append, limit=5)
    buffer.feed(b"12345\n123456\nok\n")
    assert lines == [b"12345", b"ok"]


def test_an_oversized_line_cut_at_its_end_is_still_dropped_whole() -> None:
    lines: list[bytes] = []
    buffer = LineBuffer(lines.append, limit=4)
    for chunk in (b"abc", b"defgh", b"ij", b"\n", b"k\n"):
        buffer.feed(chunk)
    buffer.close()
    assert lines == [b"k"]


def test_an_unfinished_oversized_line_is_not_delivered_at_the_end() -> None:
    lines: list[bytes] = []
    buffer = LineBuffer(lines.append, limit=4)
    buffer.feed(b"abcdefgh")
    buffer.close()
    assert lines == []
