"""Other names (hard links) of protected files in the writable roots: every one found, and
the protected trees (a home's ``.pyenv``: some 100 000 files) walked only when a file of the
roots has another name at all, or a directory there cannot be listed."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sandbox_profiles.gitconfig import UnreadableConfig
from sandbox_profiles.hardlinks import other_names


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A home whose ``.pyenv`` is protected whole, and a workspace beside it."""
    tool = tmp_path / "home" / ".pyenv" / "shims" / "python"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\n")
    (tmp_path / "ws" / "src").mkdir(parents=True)
    (tmp_path / "ws" / "src" / "main.py").write_text("print()\n")
    return tmp_path


def _protected(home: Path) -> dict[str, str]:
    return {str(home / "home" / ".pyenv"): "a PATH place"}


def _listed(monkeypatch: pytest.MonkeyPatch, refuse: str | None = None) -> list[str]:
    """The directories ``other_names`` lists from now on (``refuse``: one that cannot be)."""
    listed: list[str] = []
    real: Callable[[str], Iterator[os.DirEntry[str]]] = os.scandir

    def scandir(path: str) -> Iterator[os.DirEntry[str]]:
        if path == refuse:
            raise PermissionError(errno.EACCES, "Permission denied", path)
        listed.append(path)
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    return listed


def test_another_name_in_a_root_is_found(home: Path) -> None:
    tool = home / "home" / ".pyenv" / "shims" / "python"
    os.link(tool, home / "ws" / "src" / "innocent")
    found = other_names(_protected(home), [str(home / "ws")])
    assert found == {
        str(home / "ws" / "src" / "innocent"): f"another name (hard link) of {tool}, which is "
        "protected"
    }


def test_a_name_outside_the_roots_is_not_theirs(home: Path) -> None:
    os.link(home / "home" / ".pyenv" / "shims" / "python", home / "elsewhere")
    assert other_names(_protected(home), [str(home / "ws")]) == {}


def test_the_protected_tree_is_not_walked_when_no_file_of_the_roots_has_two_names(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pyenv = str(home / "home" / ".pyenv")
    listed = _listed(monkeypatch)
    assert other_names(_protected(home), [str(home / "ws")]) == {}
    assert str(home / "ws" / "src") in listed
    assert not [d for d in listed if d.startswith(pyenv)]
    # The control: a file of the workspace with a second name (anyone's) makes it walked.
    os.link(home / "ws" / "src" / "main.py", home / "ws" / "copy.py")
    assert other_names(_protected(home), [str(home / "ws")]) == {}
    assert pyenv in listed


def test_a_root_that_cannot_be_listed_fails_closed_when_a_protected_file_has_two_names(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hidden = str(home / "ws" / "src")
    _listed(monkeypatch, refuse=hidden)
    # No protected file has another name: nothing in the hidden directory can be one.
    assert other_names(_protected(home), [str(home / "ws")]) == {}
    os.link(home / "home" / ".pyenv" / "shims" / "python", home / "elsewhere")
    with pytest.raises(UnreadableConfig) as caught:
        other_names(_protected(home), [str(home / "ws")])
    assert caught.value.path == hidden
