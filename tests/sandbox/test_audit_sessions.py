"""The audit log of a running session, the probe server in its sandbox: a log removed
mid-session denies that call and every later one; ``--audit-args clear`` keeps the fields
the annotations mark as personal hashed, and warns at every start."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from tests.support.cli import ironcurtain
from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.probe import PROBE_TOOLS, probe_session, write_probe_config, write_raw_policy
from tests.support.sdk import call, connect


def _probe_policy_with_pii(directory: Path) -> Path:
    write_raw_policy(directory)
    annotations = json.loads((directory / "tool-annotations.json").read_text())
    for tool in annotations["servers"]["probe"]["tools"]:
        if tool["toolName"] == "write_path":
            tool["piiFields"] = ["content"]
    (directory / "tool-annotations.json").write_text(json.dumps(annotations))
    assert "write_path" in PROBE_TOOLS
    return directory


@needs_bwrap
def test_a_removed_log_denies_that_call_and_every_later_one(user: Home) -> None:
    args, ws, audit = probe_session(user)
    texts: list[tuple[bool, str]] = []

    async def scenario() -> None:
        async with connect(user, *args) as s:
            texts.append(await call(s, "probe__write_path", {"path": f"{ws}/a", "content": "1"}))
            os.unlink(audit)
            texts.append(await call(s, "probe__write_path", {"path": f"{ws}/b", "content": "2"}))
            texts.append(await call(s, "probe__env_value", {"name": "HOME"}))

    asyncio.run(scenario())
    assert texts[0] == (False, "WRITE OK")
    assert all(error and "audit-log-unwritable" in text for error, text in texts[1:])
    assert "was removed" in texts[1][1]
    assert not (ws / "b").exists()  # the call was never made


@needs_bwrap
def test_audit_args_clear_keeps_pii_hashed_and_warns(user: Home) -> None:
    ws = user.ws()
    audit = user.root / "audit.jsonl"
    config = write_probe_config(user)
    policy = _probe_policy_with_pii(user.root / "policy")
    args = ["--config", str(config), "--policy-dir", str(policy), "--workspace", str(ws)]

    async def scenario() -> None:
        async with connect(user, *args, "--audit-log", str(audit), "--audit-args", "clear") as s:
            await call(s, "probe__write_path", {"path": f"{ws}/n.txt", "content": "my secret"})

    asyncio.run(scenario())
    (entry, end) = [json.loads(line) for line in audit.read_text().splitlines()]
    assert end["event"] == "session-end" and end["entries"] == 1
    assert entry["arguments"]["path"] == f"{ws}/n.txt"
    assert entry["arguments"]["content"].startswith("sha256:")
    assert "my secret" not in audit.read_text()
    # The warning is printed at every start.
    done = ironcurtain(user, "run", *args, "--audit-args", "clear")
    assert "WARNING: --audit-args clear" in done.stderr
    done = ironcurtain(user, "run", *args, "--audit-args", "plain")
    assert done.returncode == 2 and "--audit-args plain" in done.stderr
