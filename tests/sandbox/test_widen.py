"""Approvals that take effect: an approved call that needs paths beyond its server's
sandbox runs with exactly those paths, for that call only (real bwrap, the real filesystem
server with the bundled config and policy, the real MCP client)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import tempfile
import threading
from pathlib import Path
from typing import Any

import mcp.types as types
import pytest

from tests.support.audit import audit_entries
from tests.support.cli import run_args
from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.paths import BUNDLED_POLICY
from tests.support.probe import (
    PROBE_TOOLS,
    probe_server_config,
    write_probe_config,
    write_raw_policy,
)
from tests.support.sdk import (
    Answer,
    answer_asked,
    answering,
    attached_terminal,
    call,
    connect,
    leave,
)

pytestmark = needs_bwrap


def fs_calls(
    user: Home, ws: Path, audit: Path, answer: Answer | None, *calls: tuple[str, dict[str, Any]]
) -> list[tuple[bool, str]]:
    """One session of the bundled filesystem server: each call in turn."""
    out: list[tuple[bool, str]] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert answer is not None
        return await answer(params)

    async def scenario() -> None:
        args = ["--server", "filesystem", "--workspace", str(ws), "--audit-log", str(audit)]
        async with connect(user, *args, elicitation=elicit if answer else None) as s:
            for tool, arguments in calls:
                out.append(await call(s, tool, arguments))  # one server: names unprefixed

    asyncio.run(scenario())
    return out


def _places(user: Home) -> tuple[Path, Path, Path]:
    ws = user.ws()
    notes = user.root / "notes"
    notes.mkdir()
    (notes / "keep.txt").write_text("the user's own file\n")
    return ws, notes, user.root / "audit.jsonl"


def test_an_approved_write_outside_the_workspace_happens_and_only_that(user: Home) -> None:
    ws, notes, audit = _places(user)
    todo = notes / "todo.md"
    answer, seen = answering("approve", "deny")
    out = fs_calls(
        user,
        ws,
        audit,
        answer,
        ("write_file", {"path": str(todo), "content": "buy milk\n"}),
        ("write_file", {"path": str(todo), "content": "second\n"}),
    )
    assert out[0][0] is False, out[0][1]
    assert todo.read_text() == "buy milk\n"
    # The question said what approving gives.
    assert f"write access to the new file {todo}" in seen[0]
    assert "approving gives this one call" in seen[0] and "nothing else" in seen[0]
    assert "approved for the session, each identical call after it gets the same" in seen[0]
    # The next write to the same path is asked again (and denied: nothing happens).
    assert len(seen) == 2
    assert out[1][0] and out[1][1].startswith("ESCALATION DENIED")
    assert todo.read_text() == "buy milk\n"
    assert sorted(p.name for p in notes.iterdir()) == ["keep.txt", "todo.md"]
    entries = audit_entries(audit)
    assert entries[0]["escalation"] == "approved"
    assert entries[0]["granted"] == [{"argument": "path", "access": "write", "removes": False}]
    assert entries[0]["carriedOver"][0]["outcome"] == "written"
    assert str(todo) not in audit.read_text()


def _hostile_session(user: Home, allow_write: tuple[str, ...] = ()) -> tuple[list[str], Path, Path]:
    """The probe, whose ``overreach`` tool writes what it is asked and then whatever else
    it can, under rules like the bundled ones: writes in the workspace allowed, elsewhere
    escalated. ``allow_write``: directories its standing sandbox gets writable too."""
    return _probe_session(user, "overreach", {"path": ["write-path"]}, allow_write=allow_write)


def _probe_session(
    user: Home,
    tool: str,
    roles: dict[str, list[str]],
    allow_read: tuple[str, ...] = (),
    allow_write: tuple[str, ...] = (),
) -> tuple[list[str], Path, Path]:
    """The probe with ``tool``'s arguments given ``roles``, under rules like the bundled
    ones but asking about reads too: in the workspace allowed, elsewhere escalated."""
    ws = user.ws()
    audit = user.root / "audit.jsonl"
    tools = {tool: PROBE_TOOLS[tool], "instance": []}
    policy = write_raw_policy(user.root / "policy", {"probe": tools})
    annotations = json.loads((policy / "tool-annotations.json").read_text())
    annotation = annotations["servers"]["probe"]["tools"][0]
    writes = any("read-path" not in r for r in roles.values())
    annotation.update(effect="write" if writes else "read", args={**annotation["args"], **roles})
    (policy / "tool-annotations.json").write_text(json.dumps(annotations))
    rules = [
        {"name": "allow-instance", "if": {"tool": ["instance"]}, "then": "allow", "reason": "t"},
        {
            "name": "allow-in-workspace",
            "if": {
                "paths": {
                    "roles": ["read-path", "write-path", "delete-path"],
                    "within": "${workspace}",
                }
            },
            "then": "allow",
            "reason": "Within the workspace",
        },
        {
            "name": "escalate-elsewhere",
            "if": {"effect": ["read", "write"]},
            "then": "escalate",
            "reason": "Outside the workspace requires human approval",
        },
    ]
    (policy / "compiled-policy.json").write_text(json.dumps({"rules": rules}))
    server = probe_server_config(True, allow_read=allow_read)
    server["sandbox"]["filesystem"]["allowWrite"] += list(allow_write)
    config = write_probe_config(user, server)
    return run_args(config, policy, ws, audit), ws, audit


def _probe_calls(
    user: Home, args: list[str], answer: Answer, tool: str, *calls: dict[str, Any]
) -> list[tuple[bool, str]]:
    """One session: ``probe__<tool>`` with each of ``calls`` in turn."""
    out: list[tuple[bool, str]] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return await answer(params)

    async def scenario() -> None:
        async with connect(user, *args, elicitation=elicit) as s:
            for arguments in calls:
                out.append(await call(s, f"probe__{tool}", arguments))

    asyncio.run(scenario())
    return out


def _overreach(
    user: Home, args: list[str], answer: Answer, *calls: dict[str, Any]
) -> tuple[bool, str]:
    """One session: ``probe__overreach`` with each of ``calls`` in turn; the first answer."""
    return _overreach_all(user, args, answer, *calls, instance=False)[0]


def _overreach_all(
    user: Home, args: list[str], answer: Answer, *calls: dict[str, Any], instance: bool = True
) -> list[tuple[bool, str]]:
    """Every answer; with ``instance``, then which process the standing server is."""
    out: list[tuple[bool, str]] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return await answer(params)

    async def scenario() -> None:
        async with connect(user, *args, elicitation=elicit) as s:
            for arguments in calls:
                out.append(await call(s, "probe__overreach", arguments))
            if instance:
                out.append(await call(s, "probe__instance", {}))

    asyncio.run(scenario())
    return out


def _targets(user: Home, ws: Path, notes: Path) -> list[Path]:
    """What a hostile server would like to write besides the approved file."""
    return [
        notes / "planted.sh",  # beside the approved file
        notes / "keep.txt",  # the user's own file there
        user.home / ".bashrc",  # elsewhere outside the workspace
        ws / "planted-in-workspace",  # the workspace itself
    ]


def test_a_hostile_server_gets_the_approved_file_and_nothing_else(user: Home) -> None:
    ws, notes, _ = _places(user)
    todo = notes / "todo.md"
    args, ws, audit = _hostile_session(user)
    targets = _targets(user, ws, notes)
    answer, _ = answering("approve")
    arguments = {"path": str(todo), "content": "approved", "others": [str(t) for t in targets]}
    error, text = _overreach(user, args, answer, arguments)
    assert not error, text
    assert todo.read_text() == "approved"
    # Every other write went to the one-shot instance's staging tree, and was discarded.
    assert not (notes / "planted.sh").exists()
    assert (notes / "keep.txt").read_text() == "the user's own file\n"
    assert not (user.home / ".bashrc").exists()
    assert not (ws / "planted-in-workspace").exists()
    assert [e["escalation"] for e in audit_entries(audit)] == ["approved"]


@pytest.mark.parametrize("mode", ["777", "4777", "666"])
def test_a_new_file_an_approved_call_makes_gets_the_users_umask(user: Home, mode: str) -> None:
    """The server makes the approved new file world-writable (or set-id): on the host it
    has the mode the user's own tools would give it, never the server's bits."""
    _, notes, _ = _places(user)
    made = notes / "made.txt"
    args, _, _ = _hostile_session(user)
    answer, _ = answering("approve")
    arguments = {"path": str(made), "content": "new", "others": [], "mode": mode}
    was = os.umask(0o027)
    try:
        error, text = _overreach(user, args, answer, arguments)
    finally:
        os.umask(was)
    assert not error, text
    assert made.read_text() == "new"
    assert made.stat().st_mode & 0o7777 == 0o640


def test_an_approved_write_does_not_show_the_server_what_it_replaces(user: Home) -> None:
    # write-path alone: the call may replace the file, not read it.
    _, notes, _ = _places(user)
    diary = notes / "diary.txt"
    diary.write_text(user.secret)
    args, _, _ = _hostile_session(user)
    answer, _ = answering("approve")
    error, text = _overreach(
        user, args, answer, {"path": str(diary), "content": "new", "others": []}
    )
    assert not error, text
    assert "it held: ''" in text and user.secret not in text
    assert diary.read_text() == "new"


def test_without_the_one_shot_sandbox_the_same_server_writes_beside_it(user: Home) -> None:
    # The control: the same server, its standing sandbox given the notes directory (so the
    # call runs where any call runs), writes beside the approved file.
    ws, notes, _ = _places(user)
    args, ws, _ = _hostile_session(user, allow_write=(str(notes),))
    targets = _targets(user, ws, notes)
    answer, _ = answering("approve")
    arguments = {
        "path": str(notes / "todo.md"),
        "content": "x",
        "others": [str(t) for t in targets],
    }
    error, text = _overreach(user, args, answer, arguments)
    assert not error, text
    assert (notes / "planted.sh").read_text() == "PLANTED by the server"
    assert (notes / "keep.txt").read_text() == "PLANTED by the server"


@pytest.mark.parametrize("leave", ["symlink", "fifo"])
def test_a_server_that_leaves_no_file_gets_nothing_carried_over(user: Home, leave: str) -> None:
    _, notes, _ = _places(user)
    todo = notes / "todo.md"
    args, _, audit = _hostile_session(user)
    answer, _ = answering("approve")
    secret = user.home / ".ssh" / "id_rsa"
    arguments: dict[str, Any] = {"path": str(todo), "content": "x", "others": []}
    arguments.update({"link_to": str(secret)} if leave == "symlink" else {"fifo": True})
    error, text = _overreach(user, args, answer, arguments)
    assert error and "not carried over to the host" in text and "something other than" in text
    assert not todo.exists() and not todo.is_symlink()
    assert user.secret not in audit.read_text()
    assert audit_entries(audit)[0]["result"] == "error"


def test_approved_for_the_session_one_widened_instance_serves_the_identical_calls(
    user: Home,
) -> None:
    _, notes, _ = _places(user)
    todo = notes / "todo.md"
    args, _, audit = _hostile_session(user)
    answer, seen = answering("approve for this session")
    same = {"path": str(todo), "content": "v1", "others": [str(notes / "planted.sh")]}
    out = _overreach_all(user, args, answer, same, same, same)
    assert [error for error, _ in out] == [False] * 4, out
    instances = [text.splitlines()[-1] for _, text in out]
    # The three identical calls: one widened instance, not the standing one.
    assert instances[0] == instances[1] == instances[2] != instances[3]
    assert len(seen) == 1
    assert todo.read_text() == "v1"
    assert not (notes / "planted.sh").exists()
    entries = audit_entries(audit)
    assert [e["escalation"] for e in entries] == [
        "approved-for-session",
        "session-whitelist",
        "session-whitelist",
        None,
    ]


def test_approve_for_the_session_widens_each_identical_call_and_only_those(user: Home) -> None:
    ws, notes, audit = _places(user)
    todo = notes / "todo.md"
    write = ("write_file", {"path": str(todo), "content": "same\n"})
    other = ("write_file", {"path": str(notes / "other.md"), "content": "same\n"})
    answer, seen = answering("approve for this session", "deny")
    remove = ("move_file", {"source": str(todo), "destination": str(ws / "todo.md")})
    out = fs_calls(user, ws, audit, answer, write, write, other, remove)
    assert [error for error, _ in out[:2]] == [False, False], out
    assert todo.read_text() == "same\n"
    assert len(seen) == 2  # the identical write was not asked again; the other one was
    assert out[2][0] and out[2][1].startswith("ESCALATION DENIED")
    assert not (notes / "other.md").exists()
    # A move whose source is outside the workspace is denied by the bundled policy.
    assert out[3][0] and out[3][1].startswith("DENIED (rule: deny-move-elsewhere)")
    assert todo.exists() and not (ws / "todo.md").exists()
    entries = audit_entries(audit)
    assert [e["escalation"] for e in entries[:2]] == ["approved-for-session", "session-whitelist"]
    assert entries[1]["carriedOver"][0]["outcome"] == "unchanged"


def test_an_approved_move_out_of_the_workspace_moves_the_file(user: Home) -> None:
    ws, notes, audit = _places(user)
    (ws / "report.txt").write_text("quarterly\n")
    (ws / "draft.txt").write_text("stays\n")
    answer, seen = answering("approve")
    move = {"source": str(ws / "report.txt"), "destination": str(notes / "report.txt")}
    out = fs_calls(user, ws, audit, answer, ("move_file", move))
    assert out[0][0] is False, out[0][1]
    assert (notes / "report.txt").read_text() == "quarterly\n"
    assert not (ws / "report.txt").exists()
    assert (ws / "draft.txt").read_text() == "stays\n"
    assert f"write access to the new file {notes / 'report.txt'}" in seen[0]
    carried = audit_entries(audit)[0]["carriedOver"]
    assert [c["outcome"] for c in carried] == ["moved", "moved"]


def test_an_approved_edit_and_a_new_directory_outside_the_workspace(user: Home) -> None:
    ws, notes, audit = _places(user)
    keep = notes / "keep.txt"
    keep.chmod(0o640)
    answer, seen = answering("approve", "approve")
    edit = {"path": str(keep), "edits": [{"oldText": "own", "newText": "edited"}]}
    out = fs_calls(
        user,
        ws,
        audit,
        answer,
        ("edit_file", edit),
        ("create_directory", {"path": str(notes / "archive")}),
    )
    assert [error for error, _ in out] == [False, False], out
    assert keep.read_text() == "the user's edited file\n"
    assert keep.stat().st_mode & 0o777 == 0o640
    assert (notes / "archive").is_dir() and list((notes / "archive").iterdir()) == []
    assert "write access to the file" in seen[0] and "new file" in seen[1]


def test_unapproved_writes_outside_do_not_happen(user: Home) -> None:
    ws, notes, audit = _places(user)
    todo = notes / "todo.md"
    write = ("write_file", {"path": str(todo), "content": "x"})
    no_channel = fs_calls(user, ws, audit, None, write)
    assert no_channel[0][0] and no_channel[0][1].startswith("ESCALATION REQUIRED")

    async def slow(params: types.ElicitRequestParams) -> types.ElicitResult:
        await asyncio.sleep(5)
        return types.ElicitResult(action="accept", content={"answer": "approve"})

    out: list[tuple[bool, str]] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return await slow(params)

    async def scenario() -> None:
        args = ["--server", "filesystem", "--workspace", str(ws), "--approval-timeout", "1"]
        async with connect(user, *args, elicitation=elicit) as s:
            out.append(await call(s, *write))

    asyncio.run(scenario())
    assert out[0][0] and "no answer within 1 s" in out[0][1]
    assert not todo.exists()


def test_a_path_no_approval_can_open_is_refused_without_asking(user: Home) -> None:
    ws, notes, audit = _places(user)
    config = user.root / "fs.json"
    server = {
        "command": "mcp-server-filesystem",
        "args": ["${workspace}", str(notes)],
        "sandbox": {"filesystem": {"allowRead": [str(notes)]}},
    }
    config.write_text(json.dumps({"mcpServers": {"filesystem": server}}))
    answer, seen = answering("approve")
    out: list[tuple[bool, str]] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return await answer(params)

    async def scenario() -> None:
        args = ["--config", str(config), "--workspace", str(ws), "--audit-log", str(audit)]
        async with connect(user, *args, elicitation=elicit) as s:
            arguments = {"path": str(notes / "k"), "content": "x"}
            out.append(await call(s, "filesystem__write_file", arguments))

    asyncio.run(scenario())
    assert out[0][0] and out[0][1].startswith("ESCALATION CANNOT TAKE EFFECT")
    assert "sees read-only" in out[0][1] and "allowWrite" in out[0][1]
    assert seen == []
    assert not (notes / "k").exists()
    assert audit_entries(audit)[0]["escalation"] == "cannot-take-effect"


def test_a_write_outside_approved_at_an_attached_terminal_happens(
    user: Home, run_dir: Path
) -> None:
    ws, notes, audit = _places(user)
    todo = notes / "todo.md"
    out: list[tuple[bool, str]] = []
    shown: list[str] = []

    async def scenario() -> None:
        args = ["--server", "filesystem", "--workspace", str(ws), "--audit-log", str(audit)]
        async with connect(user, *args) as s:  # a client that cannot elicit
            terminal = await attached_terminal(user)
            writing = {"path": str(todo), "content": "from tty"}
            asked = asyncio.create_task(call(s, "write_file", writing))
            shown.append(await answer_asked(terminal, b"a"))
            out.append(await asked)
        await leave(terminal)

    asyncio.run(scenario())
    assert out[0][0] is False, out[0][1]
    assert todo.read_text() == "from tty"
    assert f"approving gives this one call write access to the new file {todo}" in shown[0]
    assert audit_entries(audit)[0]["escalation"] == "approved"


def test_a_kept_instance_sees_what_the_user_changed_between_calls(user: Home) -> None:
    ws, notes, audit = _places(user)
    keep = notes / "keep.txt"
    answer, seen = answering("approve for this session")
    out: list[tuple[bool, str]] = []
    edit = {"path": str(keep), "edits": [{"oldText": "file", "newText": "file, edited"}]}

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return await answer(params)

    async def scenario() -> None:
        args = ["--server", "filesystem", "--workspace", str(ws), "--audit-log", str(audit)]
        async with connect(user, *args, elicitation=elicit) as s:
            out.append(await call(s, "edit_file", edit))
            keep.write_text("the user's new file\n")  # the user, between two calls
            out.append(await call(s, "edit_file", edit))

    asyncio.run(scenario())
    assert [error for error, _ in out] == [False, False], out
    assert keep.read_text() == "the user's new file, edited\n"
    assert len(seen) == 1


def test_where_sandboxes_have_no_mounts_an_approval_cannot_widen(
    user: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Seatbelt (macOS) has no mounts to stand a staging tree on: refused before asking.
    from launcher.plan.session_plan import RunOptions, plan_session
    from launcher.relay.approving.grants import CannotWiden
    from launcher.servers.widen import Widener

    for name, value in user.env.items():
        monkeypatch.setenv(name, value)
    ws, notes, _ = _places(user)
    plan = plan_session(RunOptions(workspace=str(ws), servers=("filesystem",), display_only=True))
    widener = Widener(plan)
    arguments = {"path": str(notes / "todo.md"), "content": "x"}
    assert [g.path for g in widener.grants("filesystem", "write_file", arguments)] == [
        str(notes / "todo.md")
    ]
    widener.platform = "darwin"
    with pytest.raises(CannotWiden, match="on darwin an approval cannot give"):
        widener.grants("filesystem", "write_file", arguments)
    # A call the standing sandbox reaches needs nothing there either.
    assert widener.grants("filesystem", "write_file", {"path": str(ws / "a"), "content": "x"}) == []


class HostSocket:
    """A unix socket of the host's that anyone may connect to (as D-Bus's, or an agent's
    reachable by the server's user): it greets each connection and counts them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.accepted = 0
        self._sock = socket.socket(socket.AF_UNIX)
        self._sock.bind(str(path))
        path.chmod(0o666)
        self._sock.listen(8)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self.accepted += 1
            with conn:
                conn.sendall(b"HELLO from the host\n")

    def close(self) -> None:
        self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self._thread.join(5)


def _notes_with_a_socket(user: Home) -> tuple[Path, HostSocket]:
    notes = user.root / "notes"
    notes.mkdir()
    (notes / "keep.txt").write_text("the user's own file\n")
    (notes / "sub").mkdir()
    (notes / "sub" / "deep.txt").write_text("deep\n")
    return notes, HostSocket(notes / "agent.sock")


def test_a_server_given_a_directory_to_read_reaches_no_socket_in_it(user: Home) -> None:
    # As a hostile server: a read approval of a directory used to mount it read-only,
    # and a unix socket in a read-only mount still connects (the approvals socket, D-Bus,
    # an ssh-agent). The directory is a copy now: its files, never its sockets.
    notes, host = _notes_with_a_socket(user)
    try:
        args, _, audit = _probe_session(user, "peek", {"path": ["read-path"]})
        answer, seen = answering("approve")
        peek = {"path": str(notes), "socket_path": str(notes / "agent.sock")}
        [(error, text)] = _probe_calls(user, args, answer, "peek", peek)
    finally:
        host.close()
    assert not error, text
    assert f"read access to the directory {notes}" in seen[0]
    assert "listed: keep.txt sub\n" in text  # the files are there to read; no socket
    assert "connected: HELLO" not in text and host.accepted == 0
    assert audit_entries(audit)[0]["escalation"] == "approved"


def test_without_the_copy_a_read_only_mount_lets_the_server_connect(user: Home) -> None:
    # The control: the same directory mounted read-only (the standing sandbox given it
    # with allowRead, so the call is not widened): the socket in it connects.
    notes, host = _notes_with_a_socket(user)
    try:
        args, _, _ = _probe_session(user, "peek", {"path": ["read-path"]}, allow_read=(str(notes),))
        answer, seen = answering("approve")
        peek = {"path": str(notes), "socket_path": str(notes / "agent.sock")}
        [(error, text)] = _probe_calls(user, args, answer, "peek", peek)
    finally:
        host.close()
    assert not error and "cannot reach this" not in seen[0], text
    assert "agent.sock" in text and "connected: HELLO from the host" in text
    assert host.accepted == 1


def _escalating_reads(user: Home) -> Path:
    """The bundled policy, but a read outside the workspace asked about, not denied."""
    policy = user.root / "policy"
    shutil.copytree(BUNDLED_POLICY, policy)
    compiled = json.loads((policy / "compiled-policy.json").read_text())
    for rule in compiled["rules"]:
        if rule["name"] == "deny-read-elsewhere":
            rule.update(name="escalate-read-elsewhere", then="escalate")
    (policy / "compiled-policy.json").write_text(json.dumps(compiled))
    return policy


def test_an_approved_directory_read_lists_what_is_there(user: Home) -> None:
    # As the agent, with the real filesystem server: the copy serves the work.
    ws, audit = user.ws(), user.root / "audit.jsonl"
    notes, host = _notes_with_a_socket(user)
    policy = _escalating_reads(user)
    answer, seen = answering("approve", "approve")
    out: list[tuple[bool, str]] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return await answer(params)

    async def scenario() -> None:
        args = ["--server", "filesystem", "--workspace", str(ws), "--policy-dir", str(policy)]
        async with connect(user, *args, "--audit-log", str(audit), elicitation=elicit) as s:
            out.append(await call(s, "list_directory", {"path": str(notes)}))
            out.append(await call(s, "read_text_file", {"path": str(notes / "sub" / "deep.txt")}))

    try:
        asyncio.run(scenario())
    finally:
        host.close()
    assert [error for error, _ in out] == [False, False], out
    assert "[FILE] keep.txt" in out[0][1] and "[DIR] sub" in out[0][1]
    assert "agent.sock" not in out[0][1]
    assert out[1][1] == "deep\n"
    assert len(seen) == 2 and host.accepted == 0


def test_no_approval_opens_ironcurtains_own_places_or_the_kernels(user: Home) -> None:
    # As the agent: reads (and writes) that would reach the session's runtime directory
    # (its approvals socket), ironcurtain's state through a symlink, or /proc are refused
    # before anyone is asked; a read elsewhere is asked as usual.
    ws, audit = user.ws(), user.root / "audit.jsonl"
    run = Path(tempfile.mkdtemp(prefix="icrun-", dir="/tmp"))  # short: sockets fit in it
    user.env["XDG_RUNTIME_DIR"] = str(run)
    real_state = user.root / "real-state"
    (real_state / "ironcurtain").mkdir(parents=True)
    user.env["XDG_STATE_HOME"] = str(user.root / "state-link")
    (user.root / "state-link").symlink_to(real_state)
    notes = user.root / "notes"
    notes.mkdir()
    policy = _escalating_reads(user)
    answer, seen = answering("deny")
    calls = [
        ("list_directory", {"path": str(run)}),
        ("list_directory", {"path": str(real_state)}),
        ("list_directory", {"path": "/"}),
        ("write_file", {"path": str(real_state / "ironcurtain" / "planted"), "content": "x"}),
        ("list_directory", {"path": "/proc"}),
        ("read_text_file", {"path": "/proc/self/environ"}),
        ("list_directory", {"path": str(notes)}),
    ]
    out: list[tuple[bool, str]] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return await answer(params)

    async def scenario() -> None:
        args = ["--server", "filesystem", "--workspace", str(ws), "--policy-dir", str(policy)]
        async with connect(user, *args, "--audit-log", str(audit), elicitation=elicit) as s:
            for tool, arguments in calls:
                out.append(await call(s, tool, arguments))

    try:
        asyncio.run(scenario())
    finally:
        shutil.rmtree(run, ignore_errors=True)
    texts = [text for _, text in out]
    assert all(t.startswith("ESCALATION CANNOT TAKE EFFECT") for t in texts[:3]), texts
    assert "holds the session's runtime directory" in texts[0]
    assert "holds ironcurtain's state" in texts[1]
    assert "holds" in texts[2]
    # The policy's own structural rules deny these before any approval comes into it.
    assert all(t.startswith("DENIED (rule: structural-") for t in texts[3:6]), texts
    assert not (real_state / "ironcurtain" / "planted").exists()
    assert user.secret not in "".join(texts)
    assert texts[6].startswith("ESCALATION DENIED") and len(seen) == 1
    escalations = [e["escalation"] for e in audit_entries(audit)]
    assert escalations == ["cannot-take-effect"] * 3 + [None] * 3 + ["denied"]


def test_a_grant_to_remove_a_path_creates_nothing_there(user: Home) -> None:
    # As a hostile server: a call approved to remove two paths (the question says only
    # "the removal of") renames its own workspace file onto the second one. Carried over
    # as a move, that would create a file of the server's making where the human agreed
    # only to a removal.
    ws = user.ws()
    (ws / "payload").write_text("#!/bin/sh\necho PLANTED\n")
    notes = user.root / "notes"
    notes.mkdir()
    target = notes / "autostart.sh"
    args, _, audit = _probe_session(
        user, "move", {"source": ["delete-path"], "destination": ["delete-path"]}
    )
    answer, seen = answering("approve")
    moved = {"source": str(ws / "payload"), "destination": str(target)}
    [(_, text)] = _probe_calls(user, args, answer, "move", moved)
    assert f"the removal of the new file {target}" in seen[0]
    assert not target.exists(), text
    carried = {c["argument"]: c["outcome"] for c in audit_entries(audit)[0]["carriedOver"]}
    assert carried["destination"] == "unchanged"


def test_a_grant_to_write_the_destination_lets_the_same_move_happen(user: Home) -> None:
    # The control: the destination approved for writing, the same move is carried over.
    ws = user.ws()
    (ws / "payload").write_text("#!/bin/sh\necho PLANTED\n")
    notes = user.root / "notes"
    notes.mkdir()
    target = notes / "autostart.sh"
    args, _, _ = _probe_session(
        user, "move", {"source": ["delete-path"], "destination": ["write-path"]}
    )
    answer, seen = answering("approve")
    moved = {"source": str(ws / "payload"), "destination": str(target)}
    [(error, text)] = _probe_calls(user, args, answer, "move", moved)
    assert not error, text
    assert f"write access to the new file {target}" in seen[0]
    assert target.read_text() == "#!/bin/sh\necho PLANTED\n" and not (ws / "payload").exists()


def test_a_path_with_a_nul_byte_is_answered_and_audited(user: Home) -> None:
    ws, notes, audit = _places(user)
    answer, seen = answering("approve")
    write = ("write_file", {"path": str(notes / "a\0b"), "content": "x"})
    out = fs_calls(user, ws, audit, answer, write)
    assert out[0][0] and "NUL byte" in out[0][1], out
    assert seen == [] and list(notes.iterdir()) == [notes / "keep.txt"]
    assert audit_entries(audit)[0]["escalation"] == "cannot-take-effect"
