"""Names that differ from a catalogue entry only in ways some file systems ignore.

A Mac's file system (and an ext4 directory with case folding) takes ``.BASHRC``, ``.baſhrc``
(long s) and ``.bashrc`` with a combining mark decomposed differently as the same name; a
Windows share drops trailing dots and blanks. What the host tool opens by its usual name is
then the file the server made, so each such name counts as the entry (over-matching names
no file system folds is harmless: they are only kept out of the root).
"""

from __future__ import annotations

import pytest

from sandbox_profiles import autorun


def _none(_: str) -> bool:
    return False


VARIANTS = [
    ([".BASHRC"], ".bashrc"),
    ([".ba\u017fhrc"], ".bashrc"),  # long s: case-folds to s
    ([".\u212ashrc"], ".kshrc"),  # Kelvin sign: folds to k
    ([".envrc. "], ".envrc"),
    ([".envrc.."], ".envrc"),
    (["src", ".GIT", "Hooks"], ".git/hooks"),
    (["a", "MISE.staging.TOML"], "{,.}mise.*.toml"),
    (["a", "mise.\u017ftaging.toml"], "{,.}mise.*.toml"),
    (["lib", "evil.PTH"], "*.pth"),
    (["lib", "evil.pth "], "*.pth"),
    (["\uff0evscode"], ".vscode"),  # fullwidth full stop: compatibility-decomposes to "."
]


@pytest.mark.parametrize(("parts", "entry"), VARIANTS, ids=[repr(v[0]) for v in VARIANTS])
def test_a_folded_variant_of_a_name_is_that_entry(parts: list[str], entry: str) -> None:
    found = autorun.match(parts, False, _none)
    assert found is not None and found.match == entry, found


def test_a_decomposed_name_is_the_composed_one() -> None:
    """No catalogue name has an accent today; the comparison is made decomposed on both
    sides, so ``é`` as one character or as ``e`` plus a combining mark is the same."""
    assert autorun.fold("caf\u00e9") == autorun.fold("cafe\u0301")


def test_a_git_directory_member_in_another_case_is_protected() -> None:
    """``CONFIG`` beside ``HEAD``, ``objects`` and ``refs``: git on a case-folding file
    system opens it as ``config``."""
    has = {"HEAD", "objects", "refs"}.__contains__
    for name in ("CONFIG", "Hooks", "Config.Worktree", "COMMONDIR"):
        assert autorun.match(["repo.git", name], False, has) is autorun.GIT_DIR_ENTRY, name


@pytest.mark.parametrize("name", ["bashrc", ".bashrc-notes", "notes.md", "mise.toml.md"])
def test_other_names_stay_ordinary_work(name: str) -> None:
    assert autorun.match(["proj", name], False, _none) is None


def test_an_ascii_name_folds_as_the_full_folding_would() -> None:
    import unicodedata

    from sandbox_profiles.autorun import fold

    for char in map(chr, range(128)):
        name = f".A{char}b{char}"
        assert fold(name) == unicodedata.normalize("NFKD", name).casefold().rstrip(". ")
