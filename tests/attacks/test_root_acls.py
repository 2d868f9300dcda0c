"""Running as root, ironcurtain lets its servers' user (uid 65534) at the roots they may
write with ACL entries; afterwards the user's tree must be as it was. A hostile server
writes in a tree with ACLs the user set (a 0600 secrets file, an entry the mask limits to
read, a directory passing entries on); after the session ``getfacl -R`` is what it was
(what the server made carries no entry for its user), and uid 65534, as any process of
that user's on the host after the session, can neither read the secrets file nor write the
file the owner let others only read. The same after ironcurtain is killed mid-session, once
the next start has run. CONTROL: the grant these replace (recursive, mask recomputed, never
undone) leaves both open to uid 65534 and bob's read-only entry writable."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.acls import (
    BOB,
    SANDBOX_UID,
    SECRET,
    getfacl,
    names_sandbox,
    needs_acl_tools,
    setfacl,
    user_tree,
)
from tests.support.client import Client
from tests.support.home import Home
from tests.support.marks import needs_bwrap, needs_installed
from tests.support.paths import IRONCURTAIN
from tests.support.probe import probe_server_config, write_raw_policy

SYSTEM_PYTHON = "/usr/bin/python3"
pytestmark = [
    needs_bwrap,
    needs_acl_tools,
    pytest.mark.skipif(os.geteuid() != 0, reason="root mode: needs root (servers run as 65534)"),
    needs_installed(
        shutil.which("setpriv") is None or not os.path.exists(SYSTEM_PYTHON),
        "root mode needs setpriv (util-linux) and /usr/bin/python3",
    ),
]


@pytest.fixture
def ws() -> Iterator[Path]:
    """The user's tree, where uid 65534 can reach it (every directory above it searchable
    by others, as a home or /srv is), so only its own permissions stand in the way."""
    above = Path(tempfile.mkdtemp(prefix="ic-acl-", dir="/tmp"))
    try:
        above.chmod(0o711)
        yield user_tree(above / "ws")
    finally:
        shutil.rmtree(above)


def _as_sandbox_user(*argv: str) -> subprocess.CompletedProcess[str]:
    """``argv`` run on the host as uid 65534 (no supplementary groups): what any process of
    that user's could do once the session is over."""
    ids = [f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}", "--clear-groups"]
    return subprocess.run(
        ["setpriv", *ids, *argv], capture_output=True, text=True, timeout=30, check=False
    )


def _what_uid_65534_can_do(ws: Path) -> dict[str, bool]:
    read = _as_sandbox_user("cat", str(ws / "secrets.txt"))
    write = _as_sandbox_user("sh", "-c", f"echo PLANTED >> {ws / 'shared.txt'}")
    return {"read secrets": SECRET in read.stdout, "write shared": write.returncode == 0}


def _session(user: Home, ws: Path) -> Client:
    """A root session of the probe (the hostile server): its workspace ``ws``, the
    directory ``hidden`` in it masked; up and initialized."""
    server: dict[str, Any] = probe_server_config(True)
    server["sandbox"]["filesystem"]["denyRead"] = [str(ws / "hidden")]
    config = user.root / "probe.json"
    config.write_text(json.dumps({"mcpServers": {"probe": server}}))
    policy = write_raw_policy(user.root / "policy")
    argv = [IRONCURTAIN, "run", "--config", str(config), "--policy-dir", str(policy)]
    client = Client.spawn([*argv, "--workspace", str(ws)], user.env)
    client.initialize()
    return client


def _attack(client: Client, ws: Path) -> list[str]:
    """What the server does with what it is let at: reads the secrets, writes files old and
    new, and tries the masked directory (not opened at all)."""
    calls: list[tuple[str, dict[str, Any]]] = [
        ("read_path", {"path": str(ws / "secrets.txt")}),
        ("read_path", {"path": str(ws / "hidden" / "private.key")}),
        ("write_path", {"path": str(ws / "made.txt"), "content": "new"}),
        ("write_path", {"path": str(ws / "sub/new/inner.txt"), "content": "x", "parents": True}),
        ("write_path", {"path": str(ws / "shared.txt"), "content": "rewritten"}),
    ]
    out = []
    for tool, arguments in calls:
        answer = client.call(f"probe__{tool}", arguments)
        out.append(answer["result"]["content"][0]["text"])
    return out


def _same_but_made(before: dict[str, str], after: dict[str, str], made: set[str]) -> None:
    """``after`` is ``before`` but for the files the session made, which give the sandbox's
    user nothing."""
    for block in after.values():
        assert not names_sandbox(block), block
    assert set(after) - set(before) == made
    assert {p: b for p, b in after.items() if p not in made} == before


def _made(ws: Path) -> set[str]:
    return {str(ws / p) for p in ("made.txt", "sub/new", "sub/new/inner.txt", "probe-calls.jsonl")}


def test_after_a_root_session_the_tree_is_as_the_user_left_it(user: Home, ws: Path) -> None:
    before = getfacl(ws)
    client = _session(user, ws)
    try:
        said = _attack(client, ws)
        during = getfacl(ws)
    finally:
        assert client.close(timeout=30) == 0
    assert said[0] == f"READ OK: {SECRET}"  # a writable root is the server's to read
    assert said[1].startswith("READ FAILED") and said[2:] == ["WRITE OK"] * 3
    # During the session: the masked directory was never opened, bob's entry was never
    # widened by the larger mask.
    hidden = str(ws / "hidden" / "private.key")
    assert during[hidden] == before[hidden]
    assert f"user:{BOB}:r--" in during[str(ws / "shared.txt")]
    _same_but_made(before, getfacl(ws), _made(ws))
    assert _what_uid_65534_can_do(ws) == {"read secrets": False, "write shared": False}
    assert not (user.state / "ironcurtain" / "acl-ledger").exists()


def test_a_killed_root_session_is_undone_by_the_next_start(user: Home, ws: Path) -> None:
    before = getfacl(ws)
    client = _session(user, ws)
    _attack(client, ws)
    client.proc.kill()  # SIGKILL: ironcurtain cannot clean up after itself
    client.proc.wait()
    left = getfacl(ws)
    assert names_sandbox(left[str(ws / "secrets.txt")])
    assert _what_uid_65534_can_do(ws)["read secrets"]  # until the next start
    records = list((user.state / "ironcurtain" / "acl-ledger").glob("*.json"))
    assert len(records) == 1 and records[0].stat().st_mode & 0o077 == 0
    # The next start undoes it first: else it would record what was left as the user's and
    # put that back at its own end.
    assert _session(user, ws).close(timeout=30) == 0
    _same_but_made(before, getfacl(ws), _made(ws))
    assert _what_uid_65534_can_do(ws) == {"read secrets": False, "write shared": False}
    assert not records[0].exists()


DEEP = "/".join(["d" * 200] * 30)  # a path far longer than PATH_MAX, made one step at a time
READ_DEEP = """
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
for part in sys.argv[2].split("/"):
    fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
try:
    print(os.read(os.open("secrets.txt", os.O_RDONLY, dir_fd=fd), 100).decode())
except OSError as exc:
    print("refused:", exc.strerror)
"""


def test_secrets_hidden_below_paths_too_long_to_name_are_closed_too(user: Home, ws: Path) -> None:
    """The server moves the secrets file to the bottom of a chain of directories no path can
    name whole (a walk by paths would stop there and leave it open), and writes beside it."""
    client = _session(user, ws)
    try:
        ops = [["rename", "secrets.txt", f"{DEEP}/secrets.txt"], ["write", f"{DEEP}/x", "x"]]
        done = client.call("probe__fs_ops", {"base": str(ws), "ops": ops})
        assert "FAILED" not in json.dumps(done), done
    finally:
        client.close(timeout=30)  # 1: the guard cannot sweep that deep, and says so
    python = SYSTEM_PYTHON  # one uid 65534 may run
    read = _as_sandbox_user(python, "-c", READ_DEEP, str(ws), DEEP)
    assert read.stdout.strip() == "refused: Permission denied", read
    assert read.returncode == 0, read.stderr
    # As root, the same walk reads it: the file is there, closed to uid 65534.
    assert (
        SECRET
        in subprocess.run(
            [python, "-c", READ_DEEP, str(ws), DEEP], capture_output=True, text=True, check=True
        ).stdout
    )


def test_control_the_old_recursive_grant_leaves_the_tree_open(ws: Path) -> None:
    """What a session left behind before: an entry for uid 65534 on every file (and a
    default one on every directory), the mask recomputed, never removed."""
    setfacl("-R", "-m", f"u:{SANDBOX_UID}:rwX", str(ws))
    setfacl("-R", "-d", "-m", f"u:{SANDBOX_UID}:rwx", str(ws))
    after = getfacl(ws)
    assert f"user:{BOB}:rw-" in after[str(ws / "shared.txt")]  # bob's read-only entry, writable
    assert _what_uid_65534_can_do(ws) == {"read secrets": True, "write shared": True}
