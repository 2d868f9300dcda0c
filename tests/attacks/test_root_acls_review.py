"""Running as root, ironcurtain opens the roots its servers may write to uid 65534 with ACL
entries for the session. What it opens must not reach past those roots: a hostile server
(the probe, as uid 65534) tries a file of the workspace that is also a host file outside it
(a hard link, as ``cp -al``, ``git clone --local`` or a package store make), and a host
directory mounted inside the workspace. It reads and writes neither; the same file named
only inside the workspace it reads (CONTROL: what the roots hold is still the server's)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.acls import SECRET, getfacl, names_sandbox, needs_acl_tools, user_tree
from tests.support.client import Client
from tests.support.home import Home
from tests.support.marks import needs_bwrap, needs_installed
from tests.support.paths import IRONCURTAIN
from tests.support.probe import probe_server_config, write_raw_policy

HOST_SECRET = "HOST-ONLY-51c9"
pytestmark = [
    needs_bwrap,
    needs_acl_tools,
    pytest.mark.skipif(os.geteuid() != 0, reason="root mode: needs root (servers run as 65534)"),
    needs_installed(shutil.which("setpriv") is None, "root mode needs setpriv (util-linux)"),
]


@pytest.fixture
def above() -> Iterator[Path]:
    """A directory every user may search, holding the workspace and host files outside it."""
    path = Path(tempfile.mkdtemp(prefix="ic-acl-", dir="/tmp"))
    try:
        path.chmod(0o711)
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path / "ws" / "mnt")], capture_output=True)
        shutil.rmtree(path)


def _host_secret(directory: Path) -> Path:
    """A root file outside the workspace only root may read."""
    directory.mkdir(mode=0o700)
    secret = directory / "shadow"
    secret.write_text(HOST_SECRET)
    secret.chmod(0o600)
    return secret


def _session(user: Home, ws: Path) -> Client:
    server: dict[str, Any] = probe_server_config(True)
    config = user.root / "probe.json"
    config.write_text(json.dumps({"mcpServers": {"probe": server}}))
    policy = write_raw_policy(user.root / "policy")
    argv = [IRONCURTAIN, "run", "--config", str(config), "--policy-dir", str(policy)]
    client = Client.spawn([*argv, "--workspace", str(ws)], user.env)
    client.initialize()
    return client


def _try(client: Client, path: Path) -> tuple[str, str]:
    """What the server gets reading ``path``, then overwriting it."""
    out = []
    for tool, arguments in (
        ("read_path", {"path": str(path)}),
        ("write_path", {"path": str(path), "content": "PLANTED"}),
    ):
        out.append(client.call(f"probe__{tool}", arguments)["result"]["content"][0]["text"])
    return out[0], out[1]


def test_a_workspace_file_hard_linked_to_a_host_file_is_not_opened(user: Home, above: Path) -> None:
    ws = user_tree(above / "ws")
    secret = _host_secret(above / "etc")
    os.link(secret, ws / "linked")
    os.link(ws / "secrets.txt", ws / "sub" / "again.txt")  # every name inside the workspace
    before = getfacl(ws)
    client = _session(user, ws)
    try:
        linked = _try(client, ws / "linked")
        inside = client.call("probe__read_path", {"path": str(ws / "sub" / "again.txt")})
    finally:
        assert client.close(timeout=30) == 0
    assert linked[0].startswith("READ FAILED") and linked[1].startswith("WRITE FAILED"), linked
    assert secret.read_text() == HOST_SECRET
    # CONTROL: the same kind of file, named only inside the workspace, is the server's.
    assert inside["result"]["content"][0]["text"] == f"READ OK: {SECRET}"
    after = getfacl(ws)
    assert after[str(ws / "linked")] == before[str(ws / "linked")]
    assert not any(names_sandbox(b) for b in after.values())


def test_a_host_directory_mounted_inside_the_workspace_is_not_opened(
    user: Home, above: Path
) -> None:
    ws = user_tree(above / "ws")
    secret = _host_secret(above / "etc")
    (ws / "mnt").mkdir()
    subprocess.run(["mount", "--bind", str(secret.parent), str(ws / "mnt")], check=True)
    client = _session(user, ws)
    try:
        mounted = _try(client, ws / "mnt" / "shadow")
        listed = client.call("probe__list_dir", {"path": str(ws / "mnt")})
        # CONTROL: the workspace's own 0600 file is the server's to read.
        own = client.call("probe__read_path", {"path": str(ws / "secrets.txt")})
    finally:
        assert client.close(timeout=30) == 0
    assert mounted[0].startswith("READ FAILED") and mounted[1].startswith("WRITE FAILED"), mounted
    assert "shadow" not in listed["result"]["content"][0]["text"]
    assert secret.read_text() == HOST_SECRET
    assert own["result"]["content"][0]["text"] == f"READ OK: {SECRET}"
    assert not names_sandbox(getfacl(secret.parent)[str(secret)])


def test_what_the_server_made_is_left_without_a_set_id_bit(user: Home, above: Path) -> None:
    """The server makes a directory set-group-id and a program set-user-id: at the end both
    go to the owner of the workspace (root), and neither keeps its bit (a set-group-id root
    directory would give everything made in it later root's group). CONTROL: during the
    session both bits are set, as the server asked."""
    ws = user_tree(above / "ws")
    client = _session(user, ws)
    ops = [
        ["mkdir", "made"],
        ["chmod", "made", "2777"],
        ["write", "made/tool", "#!/bin/sh\nid\n"],
        ["chmod", "made/tool", "6755"],
    ]
    try:
        done = client.call("probe__fs_ops", {"base": str(ws), "ops": ops})
        during = {p: (ws / p).stat() for p in ("made", "made/tool")}
    finally:
        assert client.close(timeout=30) == 0
    assert "OK 4" in json.dumps(done), done
    assert during["made"].st_mode & 0o2000 and during["made/tool"].st_mode & 0o6000
    for rel in ("made", "made/tool"):
        st = (ws / rel).stat()
        assert (st.st_uid, st.st_gid) == (0, 0), rel
        assert st.st_mode & 0o7000 == 0, (rel, oct(st.st_mode))


def test_a_record_planted_in_the_ledger_is_never_undone_as_root(user: Home, above: Path) -> None:
    """The server is given the directory holding ironcurtain's state to write (a grant the
    product supports: the state stays read-only inside it) and works in a workspace of
    ironcurtain's own. It writes a record of its own, owner-only, into the ledger directory,
    naming a root-only host file with mode 0666. Were it walked as a file the session made,
    the end would give it to root, and the next start would undo it as root: the host file
    world-writable. Running as root, a start in which a server could write the ledger is
    refused, naming it, and the host file keeps its mode. (Before, the end gave the planted
    record to root, owner-only, and the next start made the file 0666.)"""
    target = _host_secret(above / "etc")
    st = target.stat()
    planted = {
        "uid": 65534,
        "roots": [str(target.parent)],
        "skip": [],
        "files": [[str(target), st.st_dev, st.st_ino, 0, [0o666, None, None]]],
    }
    rel = "ironcurtain/acl-ledger/planted.json"
    ops = [["write", rel, json.dumps(planted)], ["chmod", rel, "600"]]
    server: dict[str, Any] = probe_server_config(True)
    server["sandbox"]["filesystem"]["allowWrite"] += [str(user.state)]
    server["env"]["PROBE_START_OPS"] = json.dumps({"base": str(user.state), "ops": [ops]})
    user.state.mkdir(exist_ok=True)
    config = user.root / "probe.json"
    config.write_text(json.dumps({"mcpServers": {"probe": server}}))
    policy = write_raw_policy(user.root / "policy")
    argv = [IRONCURTAIN, "run", "--config", str(config), "--policy-dir", str(policy)]
    refusals = []
    for _ in range(2):  # the session, then the next start (which replays what it finds)
        client = Client.spawn(argv, user.env, stderr=subprocess.PIPE)
        try:
            client.initialize()
            client.call("probe__hello", {})  # the server has run its start by now
        except EOFError:
            pass  # the start was refused
        finally:
            code = client.close(timeout=30)
        assert client.proc.stderr is not None
        refusals.append((code, client.proc.stderr.read().decode()))
    assert stat.S_IMODE(target.stat().st_mode) == 0o600, refusals
    for code, said in refusals:
        assert code != 0 and "where ironcurtain running as root records" in said, said
