"""A record of what a root session opened knows its files by inode number and birth time:
a file the session made on an inode number a deleted recorded file freed (ext4 hands a freed
number to the next file made nearby) never gets that file's recorded mode and ACLs, a
set-user-id mode above all, even when an undo cut short already gave it to the recorded
owner. CONTROL: the same record, the birth time matching, is put back."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from launcher.host.acl_ledger import undo
from launcher.host.oscalls import birth_time
from tests.support.acls import SANDBOX_UID
from tests.support.marks import lacks

SETUID_PROGRAM = [0o4755, None, None]  # what the record says the deleted file was


def _record(tree: Path, made: Path, born: int) -> dict[str, object]:
    st = made.stat()
    entry = [str(tree / "tool"), st.st_dev, st.st_ino, st.st_uid, SETUID_PROGRAM, born]
    return {"uid": SANDBOX_UID, "roots": [str(tree)], "skip": [], "files": [entry]}


def test_a_reused_inode_number_is_not_the_recorded_file(tmp_path: Path) -> None:
    tree = tmp_path / "ws"
    tree.mkdir()
    made = tree / "made-by-the-server"
    made.write_text("#!/bin/sh\nid\n")
    made.chmod(0o755)
    born = birth_time(str(made))
    if born is None:
        lacks("this filesystem does not record when a file was made")
    undo(_record(tree, made, born - 1_000_000_000))  # the deleted file was made earlier
    assert stat.S_IMODE(made.stat().st_mode) == 0o755
    # CONTROL: the file the record was made of is put back as the record says.
    undo(_record(tree, made, born))
    assert stat.S_IMODE(os.stat(made).st_mode) == 0o4755
