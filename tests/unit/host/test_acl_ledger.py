"""What a session running as root opens to its servers' user, undone (as any user: the
owner of a file may set its ACLs, so the ledger works the same here without root). The
whole root session with a hostile server: ``tests/attacks/test_root_acls.py``."""

from __future__ import annotations

import errno
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.host import acl
from launcher.host.acl_ledger import AclLedger, View, ledger_dir, replay_stale
from launcher.shared.user_errors import StartupError
from tests.support.acls import (
    BOB,
    SANDBOX_UID,
    getfacl,
    names_sandbox,
    needs_acl_tools,
    setfacl,
    user_tree,
)
from tests.support.paths import REPO

pytestmark = needs_acl_tools


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return user_tree(tmp_path / "ws")


def _view(tree: Path) -> View:
    hidden = str(tree / "hidden")
    return lambda p: None if p == hidden or p.startswith(hidden + "/") else acl.WRITE


def test_opened_for_the_session_and_put_back_exactly(tree: Path) -> None:
    before = getfacl(tree)
    ledger = AclLedger.open_roots("s1", SANDBOX_UID, [str(tree)], _view(tree))
    during = getfacl(tree)
    assert f"user:{SANDBOX_UID}:rw-" in during[str(tree / "secrets.txt")]
    # bob's entry was limited to r-- by the mask; the mask grew for the sandbox, his entry
    # did not become writable.
    shared = during[str(tree / "shared.txt")]
    assert f"user:{BOB}:r--" in shared and f"user:{BOB}:rw-" not in shared
    # What no server is shown is not opened.
    assert (
        during[str(tree / "hidden" / "private.key")] == before[str(tree / "hidden" / "private.key")]
    )
    record = Path(ledger.path)
    assert stat.S_IMODE(record.stat().st_mode) == 0o600
    assert stat.S_IMODE(ledger_dir().stat().st_mode) == 0o700
    ledger.close()
    assert getfacl(tree) == before
    assert not record.exists() and not ledger_dir().exists()  # nothing left in the state


def test_control_a_recursive_grant_with_a_recomputed_mask_widens_bobs_entry(tree: Path) -> None:
    """What a plain ``setfacl -R -m`` (a recomputed mask, never undone) does to the same tree:
    bob's read-only entry becomes writable, the secrets file stays open."""
    subprocess.run(["setfacl", "-R", "-m", f"u:{SANDBOX_UID}:rwX", str(tree)], check=True)
    after = getfacl(tree)
    assert f"user:{BOB}:rw-" in after[str(tree / "shared.txt")]
    assert "#effective" not in after[str(tree / "shared.txt")]
    assert f"user:{SANDBOX_UID}:rw-" in after[str(tree / "secrets.txt")]


def test_what_is_made_meanwhile_keeps_no_entry_for_the_sandbox(tree: Path) -> None:
    before = getfacl(tree)
    ledger = AclLedger.open_roots("s2", SANDBOX_UID, [str(tree)], _view(tree))
    (tree / "sub" / "new").mkdir()
    (tree / "sub" / "new" / "made.txt").write_text("made")
    (tree / "made.txt").write_text("made")
    os.rename(tree / "secrets.txt", tree / "sub" / "moved-secrets.txt")  # found by inode
    assert names_sandbox(getfacl(tree)[str(tree / "sub" / "new" / "made.txt")])
    ledger.close()
    after = getfacl(tree)
    for block in after.values():
        assert not names_sandbox(block), block
    moved = after.pop(str(tree / "sub" / "moved-secrets.txt"))
    assert moved.split("\n", 1)[1] == before.pop(str(tree / "secrets.txt")).split("\n", 1)[1]
    made = {p: after.pop(p) for p in list(after) if p not in before}
    assert sorted(made) == sorted(
        str(tree / p) for p in ("made.txt", "sub/new", "sub/new/made.txt")
    )
    assert after == before
    # A directory made in sub passes on what sub passes on now, as it would have.
    assert f"default:user:{BOB}:r-x" in made[str(tree / "sub" / "new")]


KILLED = """
import os, signal, sys
from launcher.host.acl_ledger import AclLedger
from launcher.host import acl
AclLedger.open_roots("killed", 65534, [sys.argv[1]], lambda p: acl.WRITE)
open(os.path.join(sys.argv[1], "made-then-killed.txt"), "w").close()
if sys.argv[2] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
sys.stdin.read()  # held open until the test closes its stdin
"""


def _session(tree: Path, how: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", KILLED, str(tree), how],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_a_killed_session_is_undone_at_the_next_start(tree: Path) -> None:
    before = getfacl(tree)
    with _session(tree, "kill") as proc:
        assert proc.wait() == -signal.SIGKILL
    assert names_sandbox(getfacl(tree)[str(tree / "secrets.txt")])  # left behind
    replay_stale()
    after = getfacl(tree)
    assert not names_sandbox(after.pop(str(tree / "made-then-killed.txt")))
    assert after == before
    assert not list(ledger_dir().glob("*.json"))


def test_a_running_sessions_record_is_left_alone_and_its_roots_refused(tree: Path) -> None:
    before = getfacl(tree)
    proc = _session(tree, "wait")
    try:
        while not (tree / "made-then-killed.txt").exists():
            assert proc.poll() is None
            os.sched_yield()
        replay_stale()  # another start while that session runs
        assert names_sandbox(getfacl(tree)[str(tree / "secrets.txt")])
        with pytest.raises(StartupError, match="opened to the sandbox's user by another"):
            AclLedger.open_roots("second", SANDBOX_UID, [str(tree / "sub")], _view(tree))
    finally:
        proc.communicate("")  # it ends without closing its ledger: like a killed one
    replay_stale()
    after = getfacl(tree)
    after.pop(str(tree / "made-then-killed.txt"))
    assert after == before


def test_with_user_never_widens_another_entry() -> None:
    entries = [
        (1, 7, acl._UNDEFINED),
        (2, 7, BOB),
        (4, 5, acl._UNDEFINED),
        (8, 6, 77),
        (16, 1, acl._UNDEFINED),
        (32, 0, acl._UNDEFINED),
    ]
    opened = acl.with_user(entries, SANDBOX_UID, 6)
    mask = next(p for tag, p, _ in opened if tag == 16)
    effective = {(t, i): p & mask for t, p, i in opened if t in (2, 4, 8) and i != SANDBOX_UID}
    assert effective == {(2, BOB): 1, (4, acl._UNDEFINED): 1, (8, 77): 0}
    assert (2, 6, SANDBOX_UID) in opened and mask & 6 == 6


def test_a_record_anybody_else_could_have_written_is_never_replayed(tree: Path) -> None:
    """What a record says is written back as root: one planted by someone else (or left
    readable to others) stops the start instead."""
    ledger = AclLedger.open_roots("s3", SANDBOX_UID, [str(tree)], _view(tree))
    planted = ledger_dir() / "planted.json"
    planted.write_text(Path(ledger.path).read_text())
    planted.chmod(0o644)
    ledger.close()
    with pytest.raises(StartupError, match=r"planted\.json is not ironcurtain's own"):
        replay_stale()


def _deep(base: Path, levels: int) -> int:
    """A chain of ``levels`` directories of 200-byte names under ``base``, made one at a time
    (as a sandbox can: the path soon passes PATH_MAX); the deepest one's descriptor."""
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(levels):
        os.mkdir("d" * 200, dir_fd=fd)
        deeper = os.open("d" * 200, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = deeper
    return fd


def test_a_file_moved_deeper_than_a_path_reaches_is_put_back_too(tree: Path) -> None:
    """The sandbox moves the secrets file to the bottom of a chain of directories longer
    than any path may be, and makes files there: they are reached all the same."""
    before = getfacl(tree / "secrets.txt")
    ledger = AclLedger.open_roots("deep", SANDBOX_UID, [str(tree)], _view(tree))
    fd = _deep(tree / "sub", 30)
    try:
        os.rename(tree / "secrets.txt", "secrets.txt", dst_dir_fd=fd)
        os.close(os.open("made.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
        deep_name = str(tree / "sub" / "/".join(["d" * 200] * 30) / "secrets.txt")
        with pytest.raises(OSError, match="File name too long"):  # out of a path's reach
            os.lstat(deep_name)
        ledger.close()
        for name in ("secrets.txt", "made.txt", "."):
            assert not acl.names_user(_acl(fd, name, acl.ACCESS), SANDBOX_UID), name
        assert not acl.names_user(_acl(fd, ".", acl.DEFAULT), SANDBOX_UID)
        assert _acl(fd, "secrets.txt", acl.ACCESS) is None
        assert stat.S_IMODE(os.lstat("secrets.txt", dir_fd=fd).st_mode) == 0o600
        os.rename("secrets.txt", tree / "secrets.txt", src_dir_fd=fd)
    finally:
        os.close(fd)
    assert getfacl(tree / "secrets.txt") == before


def _acl(fd: int, name: str, which: str) -> bytes | None:
    """ACL ``which`` of ``name`` in the directory open as ``fd``, None when it has none."""
    try:
        return os.getxattr(f"/proc/self/fd/{fd}/{name}", which, follow_symlinks=False)
    except OSError as exc:
        if exc.errno == errno.ENODATA:
            return None
        raise


def test_what_is_made_meanwhile_is_no_wider_than_the_umask_makes_it(tree: Path) -> None:
    """A directory without a default ACL passes the sandbox's entry on through one made for
    the session; files made in it then get their mode from that ACL, not the umask. Built
    from the umask, it leaves a file made under ``umask 077`` as private as ever."""
    old = os.umask(0o077)
    try:
        ledger = AclLedger.open_roots("umask", SANDBOX_UID, [str(tree)], _view(tree))
        os.close(os.open(tree / "private.txt", os.O_WRONLY | os.O_CREAT, 0o666))
        ledger.close()
    finally:
        os.umask(old)
    assert stat.S_IMODE((tree / "private.txt").stat().st_mode) == 0o600
    # Control: the directory's own mode (0755 and up) as the default would have left it
    # readable to everyone.
    (tree / "control").mkdir(mode=0o755)
    setfacl("-d", "-m", "u::rwx,g::r-x,o::r-x", str(tree / "control"))
    os.close(os.open(tree / "control" / "private.txt", os.O_WRONLY | os.O_CREAT, 0o666))
    assert stat.S_IMODE((tree / "control" / "private.txt").stat().st_mode) == 0o644
