"""What ``wrap`` writes and ``unwrap`` restores: each client file backed up, then written
atomically with its mode kept, and recorded (its digest before and after), so ``unwrap``
restores it exactly and refuses a file that changed since; the user policy made from the
bundled one; the wrapped servers annotated."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from launcher import dirs
from launcher.errors import UsageError
from launcher.wrap_cmd import Change, user_config, user_policy


def _records() -> Path:
    return dirs.state_dir() / "wrap" / "records.json"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def write_atomically(path: Path, text: str) -> None:
    """``text`` to ``path`` through a temporary file in the same directory, with the mode
    the file had (0600 for a new one)."""
    mode = path.stat().st_mode & 0o7777 if path.exists() else 0o600
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.ironcurtain-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.write(fd, text.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def _load_records() -> list[dict[str, Any]]:
    path = _records()
    if not path.exists():
        return []
    data = json.loads(path.read_text(encoding="utf-8"))
    return list(data) if isinstance(data, list) else []


def apply_wrap(changes: Sequence[Change], config: Change) -> list[str]:
    """Back up, write, record; the lines to tell the user."""
    said: list[str] = []
    records = _load_records()
    backups = dirs.state_dir() / "wrap" / "backups"
    backups.mkdir(parents=True, exist_ok=True, mode=0o700)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for change in [c for c in changes if c.after != c.before]:
        backup = backups / f"{sha(str(change.path))[:12]}-{stamp}-{change.path.name}"
        shutil.copy2(change.path, backup)
        write_atomically(change.path, change.after)
        records.append({
            "path": str(change.path), "backup": str(backup), "before": sha(change.before),
            "after": sha(change.after), "servers": change.servers,
        })  # fmt: skip
        said.append(f"wrapped {', '.join(change.servers)} in {change.path} (backup: {backup})")
    if config.after != config.before:
        write_atomically(config.path, config.after)
        said.append(f"moved their definitions to {config.path}")
    write_atomically(_records(), json.dumps(records, indent=1) + "\n")
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


def unwrap(paths: Sequence[Path]) -> list[str]:
    """Restore each file in ``paths`` as it was before it was wrapped (each level of
    wrapping, newest first); refuse a file that changed since."""
    records = _load_records()
    said: list[str] = []
    for path in paths:
        mine = [r for r in records if r["path"] == str(path)]
        if not mine:
            continue
        for record in reversed(mine):
            current = path.read_text(encoding="utf-8") if path.exists() else ""
            if sha(current) != record["after"]:
                servers = ", ".join(record["servers"])
                raise UsageError(
                    f"{path} changed since ironcurtain wrapped {servers} in it; not restored "
                    f"(its original is kept in {record['backup']}: compare and restore by hand)"
                )
            original = Path(record["backup"]).read_text(encoding="utf-8")
            if sha(original) != record["before"]:
                raise UsageError(
                    f"{record['backup']}: the backup of {path} is not what it was; not restored"
                )
            write_atomically(path, original)
            records.remove(record)
            said.append(f"restored {path} (unwrapped {', '.join(record['servers'])})")
    write_atomically(_records(), json.dumps(records, indent=1) + "\n")
    return said
