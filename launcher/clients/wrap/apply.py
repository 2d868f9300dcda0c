"""What ``wrap`` writes and ``unwrap`` restores: each client file backed up (the bytes that
were read, in a new owner-only file), then written atomically with its mode kept (a link's
target, so the link stays one; :mod:`launcher.clients.files.file_io`), and recorded after each file
(its digest before and after, and each wrapped entry's value before and after:
:mod:`launcher.clients.wrap.backups`). ``unwrap`` restores a file exactly when it still holds what
wrap wrote; when it changed elsewhere (a client rewrites its file as it runs), it puts back
the wrapped entries that still hold what wrap wrote and keeps the rest as it is now; what it
cannot restore it says, and still does the rest. The user policy is made from the bundled
one; the wrapped servers are annotated. Every file must still be the one that was read,
and be one wrap may write, or nothing is written."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from typing import Any

from launcher.clients.catalogue.known import ClientFile, Found, user_policy
from launcher.clients.files.file_io import Source, read_user, writable, write, write_own
from launcher.clients.files.formats import NotEditable, entry_at, replace
from launcher.clients.files.jsonc import unwritable
from launcher.clients.wrap import backups
from launcher.clients.wrap.backups import sha
from launcher.clients.wrap.changes import Change
from launcher.shared.user_errors import UsageError


def apply_wrap(changes: Sequence[Change], config: Change) -> list[str]:
    """Back up, write, record (after each file); the lines to tell the user. Every file
    must still be the one that was read, and may be written, or nothing is written."""
    said: list[str] = []
    records = backups.load()
    todo = [c for c in changes if c.after != c.before]
    for change in todo:
        assert change.source is not None  # a client's file is always read first
        writable(change.source)
    for text, path in [(config.after, config.path), *((c.after, c.path) for c in todo)]:
        problem = unwritable(text)
        if problem is not None:  # each entry is checked when planned: this is the last guard
            raise UsageError(f"{path}: the new text holds {problem}; nothing written")
    if config.after != config.before and os.path.lexists(config.path):
        source = read_user(config.path.parent, config.path.name, None)
        if source is None or source.text != config.before:
            raise UsageError(f"{config.path}: changed since it was read; nothing written")
        writable(source)
    if config.after != config.before:
        # First: a client's entry written before its definition would start nothing.
        write_own(config.path, config.after, config.before or None)
        said.append(f"moved their definitions to {config.path}")
    for change in todo:
        assert change.source is not None
        backup = backups.backup(change.source)
        write(change.source, change.after)
        records.append({
            "path": str(change.path), "real": str(change.source.real), "backup": backup,
            "before": sha(change.before), "after": sha(change.after), "servers": change.servers,
            "entries": change.entries,
        })  # fmt: skip
        backups.save(records)
        where = backups.backups_dir() / backup
        said.append(f"wrapped {', '.join(change.servers)} in {change.path} (backup: {where})")
    return said


def ensure_user_policy() -> str | None:
    """The user policy directory the wrapped entries name: made from the bundled one when
    missing (say so)."""
    target = user_policy()
    if target.is_dir():
        return None
    from policy.loader import bundled_policy_dir

    shutil.copytree(bundled_policy_dir(), target, ignore=shutil.ignore_patterns("__*", "*.py*"))
    return f"made {target} from the bundled policy"


def unwrap(files: Found) -> tuple[list[str], list[str]]:
    """Put back each file of ``files`` as it was before it was wrapped (each level of
    wrapping, newest first): exactly, when it holds what wrap wrote; else the wrapped
    entries that still hold what wrap wrote get their original values back, the rest of
    the file kept as it is now. A record names its file by path and real path, and is
    matched by either, or by the identity of its directory (the home reached by another
    path is the same home). What was done, and what could not be (the rest is done)."""
    records = backups.load()
    said: list[str] = []
    # A file that cannot be read (a project's, which may be hostile) stops nothing else.
    problems = [f"{why}: not restored" for _, why in files.refused]
    for f in {str(f.path): f for f in files.files}.values():
        source = f.source
        for record in reversed([r for r in records if backups.names(r, f.source)]):
            entries = list(record.get("entries") or [])
            try:
                source, line, left = _restore(f, source, record)
            except UsageError as exc:
                problems.append(str(exc))
                break  # an older level would undo what this one keeps
            if left:
                record["entries"] = left
            else:
                records.remove(record)
            backups.save(records)  # at once: the next run sees what was done
            said.append(line)
            said += _changed_since(f, [e for e in entries if e not in left])
            if left:
                names = ", ".join(e["name"] for e in left)
                problems.append(
                    f"{f.path}: {names} changed since ironcurtain wrapped them; not restored "
                    f"(the original is kept in {backups.backups_dir() / record['backup']})"
                )
                break
    return said, problems


def _changed_since(f: ClientFile, done: list[dict[str, Any]]) -> list[str]:
    """What to say of the remote entries put back (``done``) whose server ironcurtain's
    config now defines otherwise (the client gets back what it had)."""
    from launcher.clients.wrap.changes import user_servers
    from launcher.clients.wrap.remote_entries import changed_since

    servers = user_servers()
    return [line for e in done if (line := changed_since(f, e, servers))]


def _restore(
    f: ClientFile, source: Source, record: dict[str, Any]
) -> tuple[Source, str, list[dict[str, Any]]]:
    """One record undone in ``f``'s file: what is there now, what to say, and the entries
    that could not be put back."""
    servers = ", ".join(record["servers"])
    kept = backups.backups_dir() / record["backup"]
    original = backups.read_backup(record["backup"])
    if sha(original) != record["before"]:
        raise UsageError(f"{kept}: the backup of {f.path} is not what it was; not restored")
    if sha(source.text) == record["after"]:
        return write(source, original), f"restored {f.path} (unwrapped {servers})", []
    text, done, left = source.text, [], []
    for entry in record.get("entries") or []:
        changed = _put_back(f, text, entry, original)
        if changed is None:
            left.append(entry)
        else:
            text = changed
            done.append(entry["name"])
    if not done:
        raise UsageError(
            f"{f.path} changed since ironcurtain wrapped {servers} in it, in those entries "
            f"too; not restored (its original is kept in {kept}: compare and restore by hand)"
        )
    line = f"put back {', '.join(done)} in {f.path} (the rest of it kept as it is now)"
    return write(source, text), line, left


def _put_back(f: ClientFile, text: str, entry: dict[str, Any], original: str) -> str | None:
    """``text`` with one wrapped entry's original value back, or None when the entry no
    longer holds what wrap wrote. The original value is taken from the backup (checked
    against its digest), never from the record itself."""
    at, name = tuple(entry["at"]), entry["name"]
    try:
        now = entry_at(f.syntax, f.listed, text, at, name)
        before = entry_at(f.syntax, f.listed, original, at, name)
        if not _same_entry(f.syntax, now, entry["after"]) or not isinstance(before, dict):
            return None
        return replace(f.syntax, f.listed, text, at, name, before)
    except (KeyError, TypeError, StopIteration, UsageError, NotEditable):
        return None


def _same_entry(syntax: str, now: Any, after: dict[str, Any]) -> bool:
    """Whether ``now`` is the entry wrap wrote (records of a TOML table written before
    whole entries were recorded hold only its command, args and env)."""
    if now == after:
        return True
    partial = syntax == "toml" and set(after) <= {"command", "args", "env"}
    return partial and isinstance(now, dict) and {k: now[k] for k in after if k in now} == after
