"""ironcurtain's state directory (audit logs, tool pins, wrap's records and backups, the
--http token) out of a server's reach even when a grant holds it and the session works in
one of its workspaces (the default): a hostile server with write access to the directory
above cannot rewrite what ironcurtain reads back (wrap's records name the backup `unwrap`
restores a client's file from)."""

from __future__ import annotations

import asyncio
import json
import os

from tests.support.cli import ironcurtain
from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.probe import probe_server_config, write_probe_config, write_raw_policy
from tests.support.sdk import call, connect

pytestmark = needs_bwrap

RECORDS = '{"records": []}\n'


def _session(user: Home, *calls: tuple[str, dict[str, object]]) -> list[tuple[bool, str]]:
    """The probe, its sandbox given the directory that holds ironcurtain's state directory
    to write, in a workspace of ironcurtain's own (no --workspace): each call in turn."""
    server = probe_server_config(True)
    granted = user.state
    server["sandbox"]["filesystem"]["allowWrite"] += [str(granted)]
    server["env"] = {**server.get("env", {}), "GRANTED": str(granted)}
    config = write_probe_config(user, server)
    policy = write_raw_policy(user.root / "policy")
    args = ["--config", str(config), "--policy-dir", str(policy)]
    out: list[tuple[bool, str]] = []

    async def scenario() -> None:
        async with connect(user, *args) as session:
            for tool, arguments in calls:
                out.append(await call(session, f"probe__{tool}", arguments))

    asyncio.run(scenario())
    return out


def test_a_grant_through_a_link_to_ironcurtains_state_is_refused_at_start(user: Home) -> None:
    """Named through a link, a grant that holds (or lies in) the state directory does not
    start: shown at the link's place, it would be out of reach of every protection."""
    for target in (user.state, user.state / "ironcurtain" / "wrap"):
        target.mkdir(parents=True, exist_ok=True)
        link = user.root / f"link-{target.name}"
        link.symlink_to(target)
        server = probe_server_config(True)
        server["sandbox"]["filesystem"]["allowWrite"] += [str(link)]
        config = write_probe_config(user, server)
        policy = write_raw_policy(user.root / "policy")
        done = ironcurtain(user, "run", "--config", str(config), "--policy-dir", str(policy))
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert "allowWrite" in done.stderr and "ironcurtain's state" in done.stderr


def test_a_server_cannot_rewrite_ironcurtains_state_from_a_grant_that_holds_it(
    user: Home,
) -> None:
    state = user.state / "ironcurtain"
    records = state / "wrap" / "records.json"
    records.parent.mkdir(parents=True)
    records.write_text(RECORDS)
    forged = json.dumps({"records": [{"backup": "/tmp/evil.json"}]})
    token = state / "http-token"
    if os.geteuid() == 0:
        # Running as root, what a server makes in a root goes to root at the end: the grant
        # holds the ACL ledger, whose records the next start undoes as root. Refused.
        server = probe_server_config(True)
        server["sandbox"]["filesystem"]["allowWrite"] += [str(user.state)]
        config = write_probe_config(user, server)
        done = ironcurtain(user, "run", "--config", str(config))
        assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
        assert "where ironcurtain running as root records" in done.stderr
        assert records.read_text() == RECORDS
        return
    # The server finds them by itself, from its workspace (state/ironcurtain/workspaces/ID):
    # named in arguments, the policy refuses them before any server is asked.
    out = _session(
        user,
        ("write_above", {"levels": 2, "rel": "wrap/records.json", "content": forged}),
        ("write_above", {"levels": 2, "rel": "http-token", "content": "the server's"}),
        # ... and through the grant as the server's configuration names it.
        (
            "write_under_env",
            {"var": "GRANTED", "rel": "ironcurtain/wrap/records.json", "content": forged},
        ),
        (
            "write_under_env",
            {"var": "GRANTED", "rel": "ironcurtain/pins/probe.json", "content": "{}"},
        ),
        ("write_path", {"path": str(user.state / "elsewhere.txt"), "content": "granted"}),
    )
    assert "WRITE FAILED" in out[0][1], out
    assert records.read_text() == RECORDS
    assert not token.exists() or token.read_text() != "the server's"
    assert "WRITE OK" not in out[2][1] and "WRITE OK" not in out[3][1], out
    assert records.read_text() == RECORDS
    assert json.loads((state / "pins" / "probe.json").read_text()) != {}
    # The grant itself holds: the server writes where it was given.
    assert "WRITE OK" in out[4][1] and (user.state / "elsewhere.txt").read_text() == "granted"
    # ironcurtain's own audit log of the session was written as ever.
    logs = list((state / "audit").glob("*.jsonl"))
    assert logs and "write_path" in logs[0].read_text()
