"""What the end of a root session puts back is put back on the files it looked at: someone
who may write the tree meanwhile (its owner, another process of the sandbox's user) swaps a
directory for a symlink to a host directory at the worst moment, between the look and the
change; the file outside keeps its mode and ACLs. (The swap is made from inside the change
itself, so the moment is always the worst one: no timing.)"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from launcher.host import acl
from launcher.host.acl_ledger import AclLedger
from tests.support.acls import SANDBOX_UID, getfacl, needs_acl_tools, user_tree

pytestmark = needs_acl_tools


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return user_tree(tmp_path / "ws")


def _swapping(tree: Path, outside: Path, real: Callable[..., None]) -> Callable[..., None]:
    """``real`` (put_back), that first swaps ``sub`` for a symlink to ``outside`` when it is
    about to put ``sub/note.txt`` back."""

    def put_back(reach: str, snap: acl.Snapshot, is_dir: bool) -> None:
        note = tree / "sub" / "note.txt"
        swap = not is_dir and not (tree / "sub").is_symlink() and note.exists()
        if swap and os.stat(reach).st_ino == note.stat().st_ino:
            (tree / "sub").rename(tree / "sub.moved")
            (tree / "sub").symlink_to(outside)
        real(reach, snap, is_dir)

    return put_back


def test_a_directory_swapped_for_a_symlink_mid_undo_leads_nowhere(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = tmp_path / "etc"
    outside.mkdir()
    (outside / "note.txt").write_text("host file")
    (outside / "note.txt").chmod(0o600)
    (tree / "sub" / "note.txt").chmod(0o666)  # the mode the record holds for it
    host_before = getfacl(outside)
    ledger = AclLedger.open_roots("r1", SANDBOX_UID, [str(tree)], lambda p: acl.WRITE)
    monkeypatch.setattr(acl, "put_back", _swapping(tree, outside, acl.put_back))
    ledger.close()
    assert (tree / "sub").is_symlink()  # the swap was made
    assert stat.S_IMODE((outside / "note.txt").stat().st_mode) == 0o600
    assert getfacl(outside) == host_before
    # The file the record was about got its own mode back, under its new name.
    assert stat.S_IMODE((tree / "sub.moved" / "note.txt").stat().st_mode) == 0o666
