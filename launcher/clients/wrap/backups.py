"""wrap's records (``state/wrap/records.json``) and backups (``state/wrap/backups/``): what it
changed in each client file, so ``unwrap`` can put it back.

Neither is trusted more than it must be. A record is checked field by field (a damaged one
is an error naming the file and the record, never a traceback); a record names its backup
by file name only, and a backup is read only from the backup directory, reached without
following a link, and only when it is a regular file the user owns and no one else may
read or write. The records are saved after each file, so a run cut short leaves records
that match the files.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import stat
import time
from pathlib import Path
from typing import Any

from launcher.clients.files.file_io import (
    MAX_SIZE,
    Refused,
    Source,
    open_dir,
    read_user,
    write_new,
    write_own,
)
from launcher.clients.files.path_identity import identity
from launcher.shared import dirs
from launcher.shared.user_errors import UsageError
from policy.json_text import NotJson, parse_json
from sandbox_profiles.regular_file import UNTRUSTED, NotRegular, read_regular

_DIGEST = re.compile(r"[0-9a-f]{64}")
_BACKUP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def records_path() -> Path:
    return dirs.state_dir() / "wrap" / "records.json"


def backups_dir() -> Path:
    return dirs.state_dir() / "wrap" / "backups"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def load() -> list[dict[str, Any]]:
    """The records, each checked; UsageError names what is wrong and where."""
    path = records_path()
    try:
        source = read_user(path.parent, path.name, None)
    except Refused as exc:
        raise UsageError(str(exc)) from None
    if source is None:
        return []
    try:
        data = parse_json(source.text)
    except NotJson as exc:
        where = f" (line {exc.line}, column {exc.column}: {exc.reason})" if exc.line else ""
        raise UsageError(
            f"{path}: not JSON{where}; move it "
            "away to start afresh (the backups it names stay in "
            f"{backups_dir()})"
        ) from None
    if not isinstance(data, list):
        raise UsageError(f"{path}: expected a list of records")
    for i, record in enumerate(data):
        problem = _problem(record)
        if problem is not None:
            raise UsageError(f"{path}: record {i + 1}: {problem}")
        record["backup"] = os.path.basename(record["backup"])
    return data


def _problem(record: Any) -> str | None:
    """What is wrong with one record (None: nothing)."""
    if not isinstance(record, dict):
        return "not an object"
    path, backup = record.get("path"), record.get("backup")
    if not isinstance(path, str) or not os.path.isabs(path):
        return "its path is not an absolute path"
    real = record.get("real", path)
    if not isinstance(real, str) or not os.path.isabs(real):
        return "its real path is not an absolute path"
    if not isinstance(backup, str):
        return "its backup is not a file name"
    name = os.path.basename(backup)
    # Written by older versions as the full path: it must be in the backup directory.
    inside = backup == name or os.path.dirname(backup) == str(backups_dir())
    if not inside or not _BACKUP_NAME.fullmatch(name):
        return f"its backup {backup!r} is not a file of {backups_dir()}"
    for key in ("before", "after"):
        if not isinstance(record.get(key), str) or not _DIGEST.fullmatch(record[key]):
            return f"its {key} is not a SHA-256 digest"
    servers = record.get("servers")
    if not isinstance(servers, list) or not all(isinstance(s, str) for s in servers):
        return "its servers are not a list of names"
    entries = record.get("entries", [])
    if not isinstance(entries, list):
        return "its entries are not a list"
    for entry in entries:
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("name"), str)
            and isinstance(entry.get("at"), list)
            and all(isinstance(k, str) for k in entry["at"])
            and isinstance(entry.get("before"), dict)
            and isinstance(entry.get("after"), dict)
        ):
            return "an entry of it is not {at, name, before, after}"
    return None


def names(record: dict[str, Any], source: Source) -> bool:
    """Whether ``record`` is of the file ``source`` was read from: by the path or the real
    path written, or by the identity of the directory holding it and its name."""
    written = [record["path"], *([record["real"]] if isinstance(record.get("real"), str) else [])]
    real = str(source.real)
    if str(source.path) in written or real in written:
        return True
    if any(os.path.realpath(p) == real for p in written):
        return True
    here = identity(source.real.parent)
    return here is not None and any(
        os.path.basename(p) == source.real.name and identity(os.path.dirname(p)) == here
        for p in written
    )


def unmatched(records: list[dict[str, Any]], sources: list[Source]) -> list[str]:
    """The files records name that none of ``sources`` is."""
    return sorted({r["path"] for r in records if not any(names(r, s) for s in sources)})


def save(records: list[dict[str, Any]]) -> None:
    write_own(records_path(), json.dumps(records, indent=1) + "\n")


def backup(source: Source) -> str:
    """The bytes wrap read of ``source``, kept in a new owner-only file of the backup
    directory (never written through anything already there); its file name."""
    where = backups_dir()
    where.mkdir(parents=True, exist_ok=True, mode=0o700)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    # The file's name, shortened: the digest of its path already tells backups apart, and a
    # project's file may have a name as long as a name may be.
    label = re.sub(r"[^A-Za-z0-9._-]", "_", source.path.name).lstrip(".")[:64] or "file"
    name = f"{sha(str(source.path))[:12]}-{stamp}-{secrets.token_hex(3)}-{label}"
    write_new(where / name, source.text)
    return name


def read_backup(name: str) -> str:
    """The text of backup ``name``, read only from the backup directory: reached without
    following a link, a regular file the user owns that no one else may read or write.
    UsageError says what is wrong."""
    where = backups_dir()
    shown = where / name
    if not _BACKUP_NAME.fullmatch(name):
        raise UsageError(f"{shown}: not a backup's name")
    try:
        fd = open_dir(Path(os.path.realpath(where)))
    except (OSError, UsageError):
        raise UsageError(f"{where}: cannot open the backup directory") from None
    try:
        try:
            file = os.open(name, UNTRUSTED | os.O_NOFOLLOW, dir_fd=fd)
        except FileNotFoundError:
            raise UsageError(f"{shown}: the backup is gone") from None
        except OSError as exc:
            raise UsageError(f"{shown}: cannot read the backup: {exc.strerror}") from None
        try:
            data, st = read_regular(file, MAX_SIZE)
        except NotRegular as exc:
            raise UsageError(f"{shown}: the backup is {exc.reason}: not read") from None
        finally:
            os.close(file)
        if st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise UsageError(
                f"{shown}: the backup is not yours alone (owner uid {st.st_uid}, mode "
                f"{stat.S_IMODE(st.st_mode):o}): not trusted"
            )
    finally:
        os.close(fd)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{shown}: the backup is not UTF-8 text") from None
