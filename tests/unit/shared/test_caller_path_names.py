"""A caller's name made safe for a path: one directory name per caller, never shared with
another caller (not even where the filesystem ignores case), never leading out of the
directory it is put in."""

from __future__ import annotations

import itertools
import os
import re
from pathlib import Path

from launcher.shared.caller_identity import MAX_NAME, MAX_PATH_NAME, name_problem, path_name

# Characters that have tripped path encodings: separators, the escape character itself and
# what it looks like escaped, dots, case, and what an identity provider puts in a subject.
TRICKY = "aAbB.%/|:2Ff~-_\\"
TABLE = [
    "a/b",
    "a%2Fb",
    "a%2fb",
    "..",
    ".a",
    "a.",
    "...x",
    "auth0|507f1f77bcf86cd799439011",
    "auth0%7C507f1f77bcf86cd799439011",
    "Bob",
    "bob",
    "BOB",
    "%42ob",
    "../x",
    "..%2Fx",
    "/etc",
    "~root",
    "a" * MAX_NAME,
    "a" * (MAX_NAME - 1) + "b",
    "A" * MAX_NAME,
    "A" * (MAX_NAME - 1) + "a",
    "%" * MAX_NAME,
    "x" * 200,
    "x" * 201,
]
SHAPE = re.compile(r"[a-z0-9._%A-F~-]+")


def _names() -> list[str]:
    """Every name of one to three tricky characters, and the table."""
    found = ["".join(chars) for n in (1, 2, 3) for chars in itertools.product(TRICKY, repeat=n)]
    return [n for n in dict.fromkeys(found + TABLE) if name_problem(n) is None]


def test_no_two_callers_share_a_directory_name_even_ignoring_case() -> None:
    names = _names()
    assert len(names) > 4000
    encoded = [path_name(n) for n in names]
    assert len(set(encoded)) == len(names)
    assert len({e.casefold() for e in encoded}) == len(names)


def test_a_path_name_is_one_plain_component() -> None:
    for name in _names():
        encoded = path_name(name)
        assert SHAPE.fullmatch(encoded), encoded
        assert "/" not in encoded and encoded not in (".", "..")
        assert not encoded.startswith(".")
        assert 0 < len(encoded.encode()) <= MAX_PATH_NAME


def test_every_name_is_its_own_directory_on_the_real_filesystem(tmp_path: Path) -> None:
    """Made for real: each name's directory is directly in the parent, and a different
    directory from every other's (a case-insensitive filesystem would merge some)."""
    names = list(dict.fromkeys([n for n in _names() if len(n) <= 2] + TABLE))
    for name in names:
        directory = tmp_path / path_name(name)
        directory.mkdir()
        assert os.path.realpath(directory.parent) == os.path.realpath(tmp_path)
        (directory / "owner").write_text(name)
    for name in names:
        assert (tmp_path / path_name(name) / "owner").read_text() == name
    assert len(os.listdir(tmp_path)) == len(names)


def test_short_names_read_as_themselves() -> None:
    assert path_name("billing-agent") == "billing-agent"
    assert path_name("auth0|507f") == "auth0%7C507f"
    assert path_name("x" * 200) == "x" * 200
    long = path_name("x" * 201)
    assert len(long) <= MAX_PATH_NAME and "~" in long and long.startswith("x" * 100)
