"""What ``wrap`` writes and ``unwrap`` restores: each client file backed up (the bytes that
were read, in a new owner-only file), then written atomically with its mode kept (a link's
target, so the link stays one; :mod:`launcher.client_io`), and recorded (its digest before
and after), so ``unwrap`` restores it exactly and refuses a file that changed since; the
user policy made from the bundled one; the wrapped servers annotated. Every file must
still be the one that was read, and be one wrap may write, or nothing is written."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from launcher import dirs
from launcher.client_io import Source, read_user, writable, write, write_new, write_own
from launcher.clients import Found, user_config, user_policy
from launcher.errors import UsageError
from launcher.wrap_cmd import Change, refuse


def _records() -> Path:
    return dirs.state_dir() / "wrap" / "records.json"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _load_records() -> list[dict[str, Any]]:
    path = _records()
    if not path.exists():
        return []
    data = json.loads(path.read_text(encoding="utf-8"))
    return list(data) if isinstance(data, list) else []


def _backup(source: Source) -> Path:
    """The bytes wrap read of ``source``, kept in a new owner-only file of the state
    directory (never written through anything already there)."""
    backups = dirs.state_dir() / "wrap" / "backups"
    backups.mkdir(parents=True, exist_ok=True, mode=0o700)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    backup = (
        backups / f"{sha(str(source.path))[:12]}-{stamp}-{secrets.token_hex(3)}-{source.path.name}"
    )
    write_new(backup, source.text)
    return backup


def apply_wrap(changes: Sequence[Change], config: Change) -> list[str]:
    """Back up, write, record; the lines to tell the user. Every file must still be the one
    that was read, and may be written, or nothing is written."""
    said: list[str] = []
    records = _load_records()
    todo = [c for c in changes if c.after != c.before]
    for change in todo:
        assert change.source is not None  # a client's file is always read first
        writable(change.source)
    if config.after != config.before and os.path.lexists(config.path):
        source = read_user(config.path.parent, config.path.name, None)
        if source is None or source.text != config.before:
            raise UsageError(f"{config.path}: changed since it was read; nothing written")
        writable(source)
    for change in todo:
        assert change.source is not None
        backup = _backup(change.source)
        write(change.source, change.after)
        records.append({
            "path": str(change.path), "backup": str(backup), "before": sha(change.before),
            "after": sha(change.after), "servers": change.servers,
        })  # fmt: skip
        said.append(f"wrapped {', '.join(change.servers)} in {change.path} (backup: {backup})")
    if config.after != config.before:
        write_own(config.path, config.after, config.before or None)
        said.append(f"moved their definitions to {config.path}")
    write_own(_records(), json.dumps(records, indent=1) + "\n")
    return said


def ensure_user_policy() -> str | None:
    """The user policy directory the wrapped entries name: made from the bundled one when
    missing (say so)."""
    target = user_policy()
    if target.is_dir():
        return None
    from policy import bundled_policy_dir

    shutil.copytree(bundled_policy_dir(), target, ignore=shutil.ignore_patterns("__*", "*.py*"))
    return f"made {target} from the bundled policy"


def annotate_new(servers: Sequence[str]) -> list[str]:
    """Heuristic drafts for the wrapped servers the user policy has no annotations of, so
    the constitution's role-based rules apply to them at once: each is started in its
    sandbox once to list its tools. What fails is said with the command to run later."""
    from launcher.annotate_cmd import annotate_tools
    from policy.loader import load_policy_dir

    annotations = user_policy() / "tool-annotations.json"
    known = load_policy_dir(user_policy()).annotations.servers
    new = [name for name in dict.fromkeys(servers) if name not in known]
    if not new:
        return []
    command = (
        f"ironcurtain annotate-tools --server {' --server '.join(new)} --heuristic "
        f"--config {user_config()} --output {annotations}"
    )
    try:
        annotate_tools(tuple(new), False, True, str(annotations), str(user_config()))
    except Exception as exc:  # a server that cannot start here: the user can retry
        return [f"could not annotate {', '.join(new)} ({exc}); run later: {command}"]
    said = [
        f"annotated {', '.join(new)} with the heuristic (drafts: review them with "
        f"`ironcurtain compile-policy --server NAME`, or edit {annotations})"
    ]
    servers_now = load_policy_dir(user_policy()).annotations.servers
    for name in new:
        entry = servers_now.get(name)
        unclassified = (
            sorted(t.tool_name for t in entry.tools if t.effect == "other") if entry else []
        )
        if unclassified:
            said.append(
                f"{name}: the heuristic could not classify {', '.join(unclassified)}; no rule "
                f"lets their calls through until reviewed: ironcurtain compile-policy --server "
                f"{name}"
            )
    return said


def unwrap(files: Found) -> list[str]:
    """Restore each file of ``files`` as it was before it was wrapped (each level of
    wrapping, newest first); refuse a file that changed since, or one that may not be
    written."""
    refuse(files, "nothing restored")
    records = _load_records()
    said: list[str] = []
    sources = {str(f.path): f.source for f in files.files}
    for path, source in sources.items():
        mine = [r for r in records if r["path"] == path]
        for record in reversed(mine):
            if sha(source.text) != record["after"]:
                servers = ", ".join(record["servers"])
                raise UsageError(
                    f"{path} changed since ironcurtain wrapped {servers} in it; not restored "
                    f"(its original is kept in {record['backup']}: compare and restore by hand)"
                )
            original = Path(record["backup"]).read_bytes().decode("utf-8")
            if sha(original) != record["before"]:
                raise UsageError(
                    f"{record['backup']}: the backup of {path} is not what it was; not restored"
                )
            source = write(source, original)
            records.remove(record)
            said.append(f"restored {path} (unwrapped {', '.join(record['servers'])})")
    write_own(_records(), json.dumps(records, indent=1) + "\n")
    return said
