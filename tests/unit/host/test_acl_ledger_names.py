"""What a session running as root opens to its servers' user when a file of a root has
other names, and where the record of it may be (as any user: the owner of a file may set its
ACLs). The whole root session with a hostile server: ``tests/attacks/test_root_acls_review.py``."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from launcher.host import acl
from launcher.host.acl_ledger import AclLedger, View, ledger_dir, replay_stale
from launcher.shared.user_errors import StartupError
from tests.support.acls import SANDBOX_UID, getfacl, names_sandbox, needs_acl_tools, user_tree

pytestmark = needs_acl_tools


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return user_tree(tmp_path / "ws")


def _view(tree: Path) -> View:
    hidden = str(tree / "hidden")
    return lambda p: None if p == hidden or p.startswith(hidden + "/") else acl.WRITE


def test_a_file_with_a_name_outside_the_roots_is_not_opened(tree: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.key"
    outside.write_text("host secret")
    outside.chmod(0o600)
    os.link(outside, tree / "linked.key")  # a hard link: one file, named inside and outside
    os.link(tree / "secrets.txt", tree / "sub" / "again.txt")  # both names inside
    before = getfacl(tree)
    ledger = AclLedger.open_roots("n1", SANDBOX_UID, [str(tree)], _view(tree))
    try:
        during = getfacl(tree)
        assert not names_sandbox(during[str(tree / "linked.key")])
        # CONTROL: a file whose every name is inside a root is opened as before.
        assert names_sandbox(during[str(tree / "sub" / "again.txt")])
    finally:
        ledger.close()
    assert getfacl(tree) == before


def test_a_file_named_in_a_hidden_place_too_is_not_opened(tree: Path) -> None:
    # walked before the hidden name: the first name seen decided before
    os.link(tree / "hidden" / "private.key", tree / "a-key-again")
    ledger = AclLedger.open_roots("n2", SANDBOX_UID, [str(tree)], _view(tree))
    try:
        assert not names_sandbox(getfacl(tree)[str(tree / "a-key-again")])
    finally:
        ledger.close()


def test_a_root_holding_the_record_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = user_tree(tmp_path / "ws")
    monkeypatch.setenv("XDG_STATE_HOME", str(tree / "state"))
    before = getfacl(tree)
    with pytest.raises(StartupError, match=r"holds .*acl-ledger"):
        AclLedger.open_roots("n3", SANDBOX_UID, [str(tree)], _view(tree))
    assert getfacl(tree) == before


def test_the_end_undoes_the_record_it_wrote_not_one_put_in_its_place(tree: Path) -> None:
    """Whatever is at the record's name at the end (renamed, replaced) is never read: the
    session undoes what it wrote, through the descriptor it kept."""
    before = getfacl(tree)
    ledger = AclLedger.open_roots("n4", SANDBOX_UID, [str(tree)], _view(tree))
    record = Path(ledger.path)
    record.rename(record.with_suffix(".moved"))
    planted = {"uid": SANDBOX_UID, "roots": [], "skip": [], "files": []}
    record.write_text(json.dumps(planted))
    os.chmod(record, 0o600)
    ledger.close()
    assert getfacl(tree) == before  # undone from what it wrote
    assert not record.exists() and ledger_dir().exists()  # the moved one is left, to be seen


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting needs root")
def test_a_mount_made_during_the_session_is_left_alone(tree: Path, tmp_path: Path) -> None:
    """What the servers' user owns in a tree mounted inside a root meanwhile (a disk, a
    share) is another tree's: not given to the root's owner at the end."""
    other = tmp_path / "share"
    other.mkdir()
    (other / "theirs.txt").write_text("nobody's")
    os.chown(other / "theirs.txt", SANDBOX_UID, SANDBOX_UID)
    (tree / "sub" / "mnt").mkdir()
    ledger = AclLedger.open_roots("n5", SANDBOX_UID, [str(tree)], _view(tree))
    subprocess.run(["mount", "--bind", str(other), str(tree / "sub" / "mnt")], check=True)
    try:
        ledger.close()
    finally:
        subprocess.run(["umount", str(tree / "sub" / "mnt")], check=True)
    assert (other / "theirs.txt").stat().st_uid == SANDBOX_UID


@pytest.mark.skipif(os.geteuid() != 0, reason="files of the servers' user: needs root")
def test_a_state_directory_a_server_put_in_place_is_never_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ironcurtain's state lies in a root, kept read-only there (allowed): a server renames
    a directory above it and makes its own in its place, with a record naming a root-only
    host file 0666. What it made there stays its own (given to root, the next start would
    trust the record), so the next start refuses rather than undo it."""
    target = tmp_path / "etc" / "shadow"
    target.parent.mkdir()
    target.write_text("host")
    target.chmod(0o600)
    tree = user_tree(tmp_path / "ws")
    state = tree / "deep" / "state" / "ironcurtain"
    state.mkdir(parents=True)
    monkeypatch.setenv("XDG_STATE_HOME", str(state.parent))
    kept = str(state)

    def view(path: str) -> str | None:
        return acl.READ if path == kept or path.startswith(kept + "/") else acl.WRITE

    ledger = AclLedger.open_roots("n6", SANDBOX_UID, [str(tree)], view)
    (tree / "deep").rename(tree / "deep-old")  # as the server: its own state in the place
    planted = state / "acl-ledger" / "planted.json"
    planted.parent.mkdir(parents=True)
    st = target.stat()
    files = [[str(target), st.st_dev, st.st_ino, 0, [0o666, None, None]]]
    planted.write_text(
        json.dumps({"uid": 0, "roots": [str(target.parent)], "skip": [], "files": files})
    )
    planted.chmod(0o600)
    for made in (tree / "deep", tree / "deep" / "state", state, planted.parent, planted):
        os.chown(made, SANDBOX_UID, SANDBOX_UID)
    with pytest.raises(StartupError):
        ledger.close()  # undone, then its record cannot be removed: not the ledger's own
    with pytest.raises(StartupError, match="not ironcurtain's own"):
        replay_stale()
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert planted.stat().st_uid == SANDBOX_UID
