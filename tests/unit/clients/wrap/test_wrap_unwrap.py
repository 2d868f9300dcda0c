"""``unwrap`` against its own records and backups, and against files that changed since:
a record is trusted only as far as it is checked (a backup read only from wrap's backup
directory, the user's own and owner-only), a damaged one is a clear error, the records
match the files after every file, and what cannot be restored is said while the rest is
done."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.home import Home
from tests.support.paths import BIN, IRONCURTAIN

TIME = os.path.join(BIN, "mcp-server-time")


def _cli(user: Home, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [IRONCURTAIN, *args], env=user.env, cwd=cwd, capture_output=True, text=True,
        stdin=subprocess.DEVNULL, timeout=60,
    )  # fmt: skip


def _records(user: Home) -> Path:
    return user.state / "ironcurtain" / "wrap" / "records.json"


def _wrapped(user: Home) -> tuple[Path, Path, bytes]:
    """The user's ~/.claude.json, wrapped; the project wrap ran in, the file's bytes before."""
    project = user.root / "proj"
    project.mkdir()
    claude = user.home / ".claude.json"
    claude.write_text(json.dumps({"mcpServers": {"u": {"command": TIME, "args": []}}}))
    before = claude.read_bytes()
    assert _cli(user, project, "wrap", "--client", "claude-code", "--no-annotate").returncode == 0
    return project, claude, before


def _forge(user: Home, backup: str, text: bytes) -> None:
    records = json.loads(_records(user).read_text())
    records[0]["backup"] = backup
    records[0]["before"] = hashlib.sha256(text).hexdigest()
    _records(user).write_text(json.dumps(records))


@pytest.mark.parametrize("where", ["outside", "link-in-backups", "readable-by-others"])
def test_unwrap_reads_a_backup_only_from_its_own_directory(user: Home, where: str) -> None:
    # A record naming any file as the backup (its digest beside it) made unwrap write that
    # file's servers into ~/.claude.json: unsandboxed commands at the client's next start.
    project, claude, _ = _wrapped(user)
    wrapped = claude.read_bytes()
    evil = json.dumps({"mcpServers": {"u": {"command": "/bin/sh", "args": ["-c", "touch x"]}}})
    backups = user.state / "ironcurtain" / "wrap" / "backups"
    if where == "outside":
        planted = user.root / "evil.json"
        planted.write_text(evil)
        name = str(planted)
    elif where == "link-in-backups":
        (user.root / "evil.json").write_text(evil)
        (backups / "planted.json").symlink_to(user.root / "evil.json")
        name = "planted.json"
    else:
        (backups / "planted.json").write_text(evil)
        (backups / "planted.json").chmod(0o644)
        name = "planted.json"
    _forge(user, name, evil.encode())
    done = _cli(user, project, "unwrap", "--client", "claude-code")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert claude.read_bytes() == wrapped  # nothing of the planted file written
    assert "/bin/sh" not in claude.read_text()


def test_unwrap_restores_from_its_own_backup(user: Home) -> None:
    # The control of the test above: the record as wrap wrote it restores the file.
    project, claude, before = _wrapped(user)
    done = _cli(user, project, "unwrap", "--client", "claude-code")
    assert done.returncode == 0, done.stderr
    assert claude.read_bytes() == before


@pytest.mark.parametrize(
    "damage", ["not json {", '{"a": 1}', '[{"path": "relative"}]', "MISSING-BACKUP"]
)
def test_a_damaged_record_or_a_missing_backup_is_a_clear_error(user: Home, damage: str) -> None:
    project, claude, _ = _wrapped(user)
    wrapped = claude.read_bytes()
    if damage == "MISSING-BACKUP":
        for backup in (user.state / "ironcurtain" / "wrap" / "backups").iterdir():
            backup.unlink()
        says = "the backup is gone"
    else:
        _records(user).write_text(damage)
        says = f"{_records(user)}: "
    done = _cli(user, project, "unwrap", "--client", "claude-code")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and says in done.stderr, done.stderr
    assert claude.read_bytes() == wrapped
    if damage != "MISSING-BACKUP":  # wrap too refuses to add to records it cannot read
        again = _cli(user, project, "wrap", "--client", "claude-code", "--no-annotate")
        assert "Traceback" not in again.stderr


def test_unwrap_does_the_rest_and_keeps_records_that_match_the_files(user: Home) -> None:
    # unwrap restored ~/.claude.json, then stopped at Cursor's changed entry, and saved no
    # record: the next unwrap took the restored file as "changed since" and never went on.
    project = user.root / "proj"
    project.mkdir()
    claude = user.home / ".claude.json"
    claude.write_text(json.dumps({"mcpServers": {"u": {"command": TIME}}}))
    cursor = user.home / ".cursor" / "mcp.json"
    cursor.parent.mkdir()
    cursor.write_text(json.dumps({"mcpServers": {"c": {"command": TIME}}}))
    originals = {claude: claude.read_bytes(), cursor: cursor.read_bytes()}
    assert _cli(user, project, "wrap", "--all", "--no-annotate").returncode == 0
    wrapped_cursor = cursor.read_text()
    changed = json.loads(wrapped_cursor)
    changed["mcpServers"]["c"]["args"].append("--mine")
    cursor.write_text(json.dumps(changed))
    done = _cli(user, project, "unwrap", "--all")
    assert done.returncode == 2
    assert f"restored {claude}" in done.stderr
    assert f"{cursor} changed since ironcurtain wrapped c in it, in those entries" in done.stderr
    assert claude.read_bytes() == originals[claude]
    cursor.write_text(wrapped_cursor)  # the user puts the entry back as wrap wrote it
    done = _cli(user, project, "unwrap", "--all")
    assert done.returncode == 0, done.stderr
    assert cursor.read_bytes() == originals[cursor]
    assert json.loads(_records(user).read_text()) == []


def test_a_client_rewriting_its_file_does_not_block_unwrap(user: Home) -> None:
    # Claude Code rewrites ~/.claude.json at every start (counters, history): an exact
    # restore was refused nearly always. The wrapped entry is put back; the rest stays.
    project, claude, before = _wrapped(user)
    data = json.loads(claude.read_text())
    data["numStartups"] = 7
    claude.write_text(json.dumps(data, indent=2))
    done = _cli(user, project, "unwrap", "--client", "claude-code")
    assert done.returncode == 0, done.stderr
    now = json.loads(claude.read_text())
    assert now == {**json.loads(before), "numStartups": 7}


def test_a_forged_entry_in_a_record_is_not_what_unwrap_puts_back(user: Home) -> None:
    # The entries' original values are taken from the checked backup, never from the
    # record, which a process with the state directory could rewrite.
    project, claude, before = _wrapped(user)
    records = json.loads(_records(user).read_text())
    records[0]["entries"][0]["before"] = {"command": "/bin/sh", "args": ["-c", "touch x"]}
    _records(user).write_text(json.dumps(records))
    data = json.loads(claude.read_text())
    data["numStartups"] = 3
    claude.write_text(json.dumps(data))
    done = _cli(user, project, "unwrap", "--client", "claude-code")
    assert done.returncode == 0, done.stderr
    assert json.loads(claude.read_text()) == {**json.loads(before), "numStartups": 3}
