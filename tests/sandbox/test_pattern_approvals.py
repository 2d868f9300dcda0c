"""Pattern approvals end to end: the real filesystem server in bwrap behind the real relay,
an agent (a real MCP client that cannot elicit) with allowed calls only, and the operator's
real ``ironcurtain approvals`` terminal that is shown the pattern and chooses it; then
``ironcurtain approvals --list`` and ``--revoke``."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from mcp import ClientSession

from policy.argument_scan import SECRET_RULE
from policy.models import ToolAnnotation
from policy.patterns import Pattern, call_shape, covers, offered
from tests.sandbox.test_approvals_page import ASK, _browser, _opened, _page_server
from tests.support.audit import audit_entries
from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.paths import BUNDLED_POLICY, IRONCURTAIN
from tests.support.probe import probe_session
from tests.support.sdk import answer_asked, attached_terminal, call, connect, leave

pytestmark = needs_bwrap

RULE = "escalate-write-elsewhere"  # the bundled policy's, for a write outside the workspace


def _places(user: Home) -> tuple[Path, Path, Path, Path]:
    """The workspace, a directory ``a`` outside it (holding a link ``out`` to its sibling
    ``b``), ``b``, and the audit log."""
    notes = user.root / "notes"
    a, b = notes / "a", notes / "b"
    a.mkdir(parents=True)
    b.mkdir()
    (a / "secret").mkdir()
    (a / "out").symlink_to(b)
    return user.ws(), a.resolve(), b.resolve(), user.root / "audit.jsonl"


def _policy_denying(user: Home, denied: Path) -> Path:
    """The bundled policy with a first rule denying any write under ``denied``."""
    directory = user.root / "policy"
    directory.mkdir()
    shutil.copy(BUNDLED_POLICY / "tool-annotations.json", directory)
    compiled = json.loads((BUNDLED_POLICY / "compiled-policy.json").read_text())
    deny = {
        "name": "deny-secret-dir",
        "description": "nothing is written to the secret directory",
        "principle": "Containment",
        "if": {"paths": {"roles": ["write-path"], "within": str(denied)}},
        "then": "deny",
        "reason": "the secret directory is never written",
    }
    compiled["rules"] = [deny, *compiled["rules"]]
    (directory / "compiled-policy.json").write_text(json.dumps(compiled))
    return directory


def _annotation() -> ToolAnnotation:
    """The bundled annotation of the filesystem server's ``write_file``."""
    servers = json.loads((BUNDLED_POLICY / "tool-annotations.json").read_text())["servers"]
    (tool,) = [t for t in servers["filesystem"]["tools"] if t["toolName"] == "write_file"]
    return ToolAnnotation(
        tool_name="write_file",
        server_name="filesystem",
        effect=tool["effect"],
        side_effects=tool["sideEffects"],
        args=tool["args"],
    )


def _approvals(user: Home, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [IRONCURTAIN, "approvals", *args],
        env=user.env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _write(path: Path | str) -> tuple[str, dict[str, Any]]:
    return "write_file", {"path": str(path), "content": "written"}


async def _asked_and_denied(
    s: ClientSession, terminal: asyncio.subprocess.Process, path: Path | str
) -> tuple[tuple[bool, str], str]:
    """Write ``path``: it must be put to the terminal, which denies it."""
    asked = asyncio.create_task(call(s, *_write(path)))
    shown = await answer_asked(terminal, b"d")
    return await asked, shown


def test_a_directory_pattern_holds_within_bounds_and_is_revocable(
    user: Home, run_dir: Path
) -> None:
    ws, a, b, audit = _places(user)
    denied_dir = a / "secret"
    policy = _policy_denying(user, denied_dir)
    out: dict[str, Any] = {}

    async def scenario() -> None:
        args = ["--server", "filesystem", "--workspace", str(ws), "--audit-log", str(audit)]
        async with connect(user, *args, "--policy-dir", str(policy)) as s:
            terminal = await attached_terminal(user)
            first = asyncio.create_task(call(s, *_write(a / "one.txt")))
            out["offer"] = await answer_asked(terminal, b"p1")
            out["first"] = await first
            # Under the pattern: not asked (the terminal is shown nothing more).
            out["second"] = await call(s, *_write(a / "deeper.txt"))
            # The agent's next tries, each put to the human (who denies them).
            out["dotdot"] = await _asked_and_denied(s, terminal, f"{a}/../b/escaped.txt")
            out["link"] = await _asked_and_denied(s, terminal, a / "out" / "linked.txt")
            # A file host tools run, under the directory: asked, with the warning.
            out["envrc"] = await _asked_and_denied(s, terminal, a / ".envrc")
            # A deny rule under the approved directory is decided before any pattern.
            out["denied"] = await call(s, *_write(denied_dir / "x.txt"))
            (sock,) = run_dir.glob("*/patterns.sock")
            out["mode"] = sock.stat().st_mode & 0o777
            listing = await asyncio.to_thread(_approvals, user, "--list")
            out["list"] = listing
            pid = re.search(r"^(p-[0-9a-f]+) ", listing.stdout, re.M)
            assert pid, listing.stdout + listing.stderr
            out["revoke"] = await asyncio.to_thread(_approvals, user, "--revoke", pid[1])
            out["again"] = await asyncio.to_thread(_approvals, user, "--revoke", pid[1])
            out["after"] = await _asked_and_denied(s, terminal, a / "after.txt")
        await leave(terminal)

    asyncio.run(scenario())
    offer = out["offer"]
    assert (
        f"[p1] approve for this session all calls of write_file on server 'filesystem' "
        f"escalated by rule {RULE} whose every path is under {a} (reads and writes there)"
    ) in offer
    assert out["first"][0] is False and out["second"][0] is False, out
    assert (a / "one.txt").read_text() == (a / "deeper.txt").read_text() == "written"
    given = Pattern("directory", "filesystem", "write_file", RULE, str(a))
    for trick in ("dotdot", "link", "envrc"):
        (failed, text), shown = out[trick]
        assert failed and "ESCALATION DENIED" in text, text
        assert "needs your approval" in shown
    assert not (b / "escaped.txt").exists() and not (b / "linked.txt").exists()
    assert not (a / ".envrc").exists() and "beware" in out["envrc"][1]
    assert "[p1]" not in out["envrc"][1]  # and no pattern is offered for it
    # Control: the directory pattern covers that write by its path alone.
    _, envrc = _write(a / ".envrc")
    assert covers(given, call_shape("filesystem", "write_file", RULE, _annotation(), envrc, "/"))
    failed, text = out["denied"]
    assert failed and "deny-secret-dir" in text and not (denied_dir / "x.txt").exists()
    # Control: the pattern given covers that write; only the policy's deny, decided before
    # anyone is asked, stops it.
    _, arguments = _write(denied_dir / "x.txt")
    shape = call_shape("filesystem", "write_file", RULE, _annotation(), arguments, str(ws))
    assert covers(given, shape)
    assert out["mode"] == 0o600  # the lister's socket is its owner's alone
    assert out["list"].returncode == 0 and f"under {a}" in out["list"].stdout
    assert out["revoke"].returncode == 0 and "revoked p-" in out["revoke"].stdout
    assert out["again"].returncode == 2 and "no running session" in out["again"].stderr
    assert "Traceback" not in out["again"].stderr
    (failed, text), _ = out["after"]
    assert failed and not (a / "after.txt").exists()
    entries = audit_entries(audit)
    calls = [e for e in entries if "event" not in e]
    assert [e.get("escalation") for e in calls] == [
        "approved-pattern",
        "pattern",
        "denied",
        "denied",
        "denied",
        None,  # denied by the rule: never escalated
        "denied",
    ]
    audited = calls[0]["pattern"]
    assert calls[1]["pattern"] == {"id": audited["id"]}
    assert audited["kind"] == "directory" and audited["value"].startswith("sha256:")
    (revoked,) = [e for e in entries if e.get("event") == "pattern-revoked"]
    assert revoked["pattern"]["id"] == audited["id"]
    assert str(a) not in json.dumps(revoked) + json.dumps(audited)


def test_list_with_no_session_running_says_so(user: Home, run_dir: Path) -> None:
    listing = _approvals(user, "--list")
    assert listing.returncode == 0 and "no pattern approvals in force" in listing.stdout
    revoking = _approvals(user, "--revoke", "p-00000000")
    assert revoking.returncode == 2 and "Traceback" not in revoking.stderr
    assert os.path.isdir(run_dir)
    for wrong in (["--list", "--revoke", "p-1"], ["--list", "--web"], ["--revoke", "p-1", "--web"]):
        refused = _approvals(user, *wrong)
        assert refused.returncode == 2 and "Traceback" not in refused.stderr, wrong
        assert "each a command of their own" in refused.stderr


def test_a_tool_pattern_chosen_on_the_page_answers_the_next_calls(
    user: Home, run_dir: Path
) -> None:
    args, _, audit = probe_session(user, first=[ASK])
    out: dict[str, Any] = {}

    async def scenario() -> None:
        async with (
            connect(user, *args) as client,
            _page_server(user) as (url, _),
            _browser() as browser,
        ):
            page = await _opened(browser, url)
            asked = asyncio.create_task(call(client, "probe__env_value", {"name": "HOME"}))
            question = page.locator(".question")
            await question.wait_for(timeout=60_000)
            button = page.locator(".pattern button")
            out["button"] = await button.inner_text()
            await button.click()
            out["first"] = await asyncio.wait_for(asked, 60)
            # Another name: the pattern answers it, nobody is asked.
            out["second"] = await asyncio.wait_for(
                call(client, "probe__env_value", {"name": "LANG"}), 60
            )
            out["listed"] = await asyncio.to_thread(_approvals, user, "--list")

    asyncio.run(scenario())
    assert out["button"] == (
        "Approve for this session all calls of env_value on server 'probe' escalated by rule "
        "ask-before-env, with any arguments (none of them names a path or a URL)"
    )
    assert out["first"][0] is False and out["second"][0] is False, out
    assert "env_value on server 'probe'" in out["listed"].stdout
    calls = [e for e in audit_entries(audit) if "event" not in e]
    assert [e["escalation"] for e in calls] == ["approved-pattern", "pattern"]


def test_a_directory_pattern_never_answers_a_write_into_a_place_host_tools_run(
    user: Home, run_dir: Path
) -> None:
    """The agent, given a directory pattern, writes a git hook, Claude Code's settings (its
    hooks run commands) and VS Code's tasks under the approved directory: files in places
    host tools load or run, each below the catalogued place rather than the place itself.
    Each is put to the human (who denies it), never answered by the pattern."""
    ws, a, _, audit = _places(user)
    tricks = [a / ".git" / "hooks" / "pre-commit", a / ".claude" / "settings.json"]
    tricks.append(a / ".vscode" / "tasks.json")
    for trick in tricks:
        trick.parent.mkdir(parents=True)
    out: dict[str, Any] = {}

    async def scenario() -> None:
        args = ["--server", "filesystem", "--workspace", str(ws), "--audit-log", str(audit)]
        async with connect(user, *args) as s:
            terminal = await attached_terminal(user)
            first = asyncio.create_task(call(s, *_write(a / "one.txt")))
            out["offer"] = await answer_asked(terminal, b"p1")
            out["first"] = await first
            for trick in tricks:
                out[str(trick)] = await _asked_and_denied(s, terminal, trick)
            out["plain"] = await call(s, *_write(a / "plain.txt"))  # the pattern still holds
        await leave(terminal)

    asyncio.run(scenario())
    assert "[p1]" in out["offer"] and out["first"][0] is False, out
    given = Pattern("directory", "filesystem", "write_file", RULE, str(a))
    for trick in tricks:
        (failed, text), shown = out[str(trick)]
        assert failed and "ESCALATION DENIED" in text, text
        assert "needs your approval" in shown and "[p1]" not in shown
        assert not trick.exists()
        # Control: the pattern covers the write by its path alone.
        _, arguments = _write(trick)
        shape = call_shape("filesystem", "write_file", RULE, _annotation(), arguments, str(ws))
        assert covers(given, shape)
    assert out["plain"][0] is False and (a / "plain.txt").read_text() == "written"
    calls = [e for e in audit_entries(audit) if "event" not in e]
    escalations = [e.get("escalation") for e in calls]
    assert escalations == ["approved-pattern", "denied", "denied", "denied", "pattern"]


def test_a_write_under_the_pattern_never_reaches_a_file_outside_through_a_hard_link(
    user: Home, run_dir: Path
) -> None:
    """A hard link under the approved directory to a file outside it (``b/target``): the
    path is under the directory, so the pattern answers the write, but the file outside
    keeps its content (the write replaces the link's name; it never writes the shared
    inode)."""
    ws, a, b, audit = _places(user)
    target = b / "target"
    target.write_text("outside, unchanged")
    os.link(target, a / "linked")
    out: dict[str, Any] = {}

    async def scenario() -> None:
        args = ["--server", "filesystem", "--workspace", str(ws), "--audit-log", str(audit)]
        async with connect(user, *args) as s:
            terminal = await attached_terminal(user)
            first = asyncio.create_task(call(s, *_write(a / "one.txt")))
            out["offer"] = await answer_asked(terminal, b"p1")
            out["first"] = await first
            out["linked"] = await call(s, *_write(a / "linked"))
        await leave(terminal)

    asyncio.run(scenario())
    assert "[p1]" in out["offer"] and out["first"][0] is False, out
    assert out["linked"][0] is False, out  # answered by the pattern, not asked
    assert (a / "linked").read_text() == "written"
    assert target.read_text() == "outside, unchanged"
    calls = [e for e in audit_entries(audit) if "event" not in e]
    assert [e.get("escalation") for e in calls] == ["approved-pattern", "pattern"]
    # Control: a write through the link's name in place (what a server writing the file it
    # is handed would do) changes the file outside.
    os.link(target, a / "again")
    with open(a / "again", "w") as f:
        f.write("changed")
    assert target.read_text() == "changed"


def _policy_asking_reads(user: Home) -> Path:
    """The bundled policy, with a read outside the workspace asked instead of denied."""
    directory = user.root / "policy"
    directory.mkdir()
    shutil.copy(BUNDLED_POLICY / "tool-annotations.json", directory)
    compiled = json.loads((BUNDLED_POLICY / "compiled-policy.json").read_text())
    for rule in compiled["rules"]:
        if rule["name"] == "deny-read-elsewhere":
            rule.update(name="escalate-read-elsewhere", then="escalate")
    (directory / "compiled-policy.json").write_text(json.dumps(compiled))
    return directory


def test_a_tool_pattern_on_a_read_tool_never_answers_a_read_of_the_homes_secrets(
    user: Home, run_dir: Path
) -> None:
    """Reads outside the workspace are asked; the operator gives ``read_text_file`` "any
    arguments". The agent then reads the SSH key and the AWS credentials of the home: each
    is put to the human (who denies it), never answered by the pattern."""
    ws, a, b, audit = _places(user)
    (a / "doc.txt").write_text("doc")
    (b / "other.txt").write_text("other")
    aws = user.home / ".aws" / "credentials"
    aws.parent.mkdir()
    aws.write_text("aws_secret_access_key = AKIAREADME")
    secrets = [user.home / ".ssh" / "id_rsa", aws]
    secrets.append(Path(f"/proc/self/root{aws}"))  # the same file by another name
    policy = _policy_asking_reads(user)
    out: dict[str, Any] = {}

    async def scenario() -> None:
        args = ["--server", "filesystem", "--workspace", str(ws), "--audit-log", str(audit)]
        async with connect(user, *args, "--policy-dir", str(policy)) as s:
            terminal = await attached_terminal(user)
            first = asyncio.create_task(call(s, "read_text_file", {"path": str(a / "doc.txt")}))
            out["offer"] = await answer_asked(terminal, b"p1")
            out["first"] = await first
            out["other"] = await call(s, "read_text_file", {"path": str(b / "other.txt")})
            for secret in secrets:
                asked = asyncio.create_task(call(s, "read_text_file", {"path": str(secret)}))
                shown = await answer_asked(terminal, b"d")
                out[str(secret)] = (await asked, shown)
        await leave(terminal)

    asyncio.run(scenario())
    assert "with any arguments (the paths it names are read)" in out["offer"], out["offer"]
    assert out["first"] == (False, "doc") and out["other"] == (False, "other"), out
    given = Pattern("tool", "filesystem", "read_text_file", "escalate-read-elsewhere", "read")
    for secret in secrets:
        (failed, text), shown = out[str(secret)]
        assert failed and "ESCALATION DENIED" in text and "AKIA" not in text, text
        assert user.secret not in text and "[p1]" not in shown
        # Control: the tool pattern covers the read by its arguments alone.
        shape = call_shape(
            "filesystem", "read_text_file", given.rule, _read_annotation(),
            {"path": str(secret)}, str(ws),
        )  # fmt: skip
        assert covers(given, shape)
    calls = [e for e in audit_entries(audit) if "event" not in e]
    escalations = [e.get("escalation") for e in calls]
    assert escalations == ["approved-pattern", "pattern", "denied", "denied", "denied"]


def _read_annotation() -> ToolAnnotation:
    servers = json.loads((BUNDLED_POLICY / "tool-annotations.json").read_text())["servers"]
    (tool,) = [t for t in servers["filesystem"]["tools"] if t["toolName"] == "read_text_file"]
    return ToolAnnotation(
        tool_name="read_text_file",
        server_name="filesystem",
        effect=tool["effect"],
        side_effects=tool["sideEffects"],
        args=tool["args"],
    )


AWS_KEY = "AKIA" + "QYLPMN5HJKT2XWRB"  # the shape of a key, nobody's
GITHUB_TOKEN = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A"


def test_no_pattern_sends_a_credential_unasked(user: Home, run_dir: Path) -> None:
    """A write in the workspace (allowed) whose content holds a credential is asked. Were a
    pattern offered for it, every later credential written there would leave unasked; so
    none is: the operator approves each credential, and another one is asked again."""
    ws, _, _, audit = _places(user)
    out: dict[str, Any] = {}

    def with_secret(name: str, secret: str) -> tuple[str, dict[str, Any]]:
        return "write_file", {"path": str(ws / name), "content": f"key = {secret}\n"}

    async def scenario() -> None:
        args = ["--server", "filesystem", "--workspace", str(ws), "--audit-log", str(audit)]
        async with connect(user, *args) as s:
            terminal = await attached_terminal(user)
            first = asyncio.create_task(call(s, *with_secret("one.txt", AWS_KEY)))
            out["offer"] = await answer_asked(terminal, b"d")
            out["first"] = await first
            second = asyncio.create_task(call(s, *with_secret("two.txt", GITHUB_TOKEN)))
            out["asked"] = await answer_asked(terminal, b"d")
            out["second"] = await second
        await leave(terminal)

    asyncio.run(scenario())
    assert "needs your approval" in out["offer"] and "[p1]" not in out["offer"], out["offer"]
    assert out["first"][0] is True and out["second"][0] is True, out
    assert "needs your approval" in out["asked"]
    assert not (ws / "one.txt").exists() and not (ws / "two.txt").exists()
    calls = [with_secret("one.txt", AWS_KEY), with_secret("two.txt", GITHUB_TOKEN)]
    for rule, asked_each_time in ((SECRET_RULE, True), (RULE, False)):
        first, then = [
            call_shape("filesystem", "write_file", rule, _annotation(), a, str(ws))
            for _, a in calls
        ]
        given = Pattern("directory", "filesystem", "write_file", rule, str(ws))
        # Control: by any other rule, the directory is offered and covers the second write.
        assert (offered(first, lambda d: None) == []) is asked_each_time
        assert covers(given, then) is not asked_each_time
