"""Servers start before the session's event loop exists (``launcher.session.prestart``): a session
that fails after they started stops them having sent them nothing, and leaves nothing."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from launcher.host.launch_spec import LaunchSpec
from launcher.plan.session_plan import RunOptions, SessionPlan, plan_session
from launcher.session.prestart import prestart
from launcher.session.wiring import Session
from launcher.shared.user_errors import StartupError
from launcher.transports.approvals.session_socket import ApprovalsSocket
from tests.support.client import Client
from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.paths import IRONCURTAIN, REPO
from tests.support.probe import write_raw_policy

pytestmark = needs_bwrap

# A server that keeps whatever it is sent (its file is there once it runs).
RECORDER = 'exec cat > "$WS/$NAME.received"'


def _recorders(user: Home, names: tuple[str, ...]) -> tuple[list[str], Path]:
    ws = user.ws()
    servers = {
        name: {
            "command": "/bin/sh",
            "args": ["-c", RECORDER],
            "env": {"WS": "${workspace}", "NAME": name},
            "sandbox": {"filesystem": {"allowWrite": ["${workspace}"]}},
        }
        for name in names
    }
    config = user.root / "recorders.json"
    config.write_text(json.dumps({"mcpServers": servers}))
    policy = write_raw_policy(user.root / "policy", {name: {} for name in names})
    return ["--config", str(config), "--policy-dir", str(policy), "--workspace", str(ws)], ws


def _plan(user: Home, monkeypatch: pytest.MonkeyPatch, args: list[str]) -> SessionPlan:
    for name, value in user.env.items():
        monkeypatch.setenv(name, value)
    options = dict(zip(args[::2], args[1::2], strict=True))
    return plan_session(
        RunOptions(
            config=options["--config"],
            policy_dir=options["--policy-dir"],
            workspace=options["--workspace"],
        )
    )


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + 20
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


_BEFORE: set[int] = set()


@pytest.fixture(autouse=True)
def _children_before() -> None:
    """The processes this test process had before the test (another test's that outlive
    it, on the same worker): not this test's."""
    _BEFORE.clear()
    _BEFORE.update(p.pid for p in psutil.Process(os.getpid()).children(recursive=True))


def _ours() -> list[psutil.Process]:
    """The processes this test started (and that are still there)."""
    children = psutil.Process(os.getpid()).children(recursive=True)
    return [p for p in children if p.pid not in _BEFORE]


def test_a_session_that_fails_after_its_servers_started_sends_them_nothing(
    user: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    args, ws = _recorders(user, ("a", "b"))
    plan = _plan(user, monkeypatch, args)
    started = prestart(plan)
    _wait_for(ws / "a.received")
    _wait_for(ws / "b.received")
    tree = _ours()
    assert tree, "the servers run"

    async def refuse(self: ApprovalsSocket) -> None:
        raise OSError(98, "Address already in use")

    monkeypatch.setattr(ApprovalsSocket, "start", refuse)
    with pytest.raises(StartupError, match="cannot open the approvals socket"):
        asyncio.run(Session(plan, started).run())
    assert (ws / "a.received").read_bytes() == b""
    assert (ws / "b.received").read_bytes() == b""
    _gone, alive = psutil.wait_procs(tree, timeout=5)
    assert not alive
    assert not os.path.exists(plan.runtime_dir)


def test_the_same_servers_in_a_session_that_starts_are_sent_initialize(user: Home) -> None:
    # The control: what the recorders keep is what they were sent.
    args, ws = _recorders(user, ("a",))
    client = Client.spawn([IRONCURTAIN, "run", *args], user.env, user.root)
    try:
        _wait_for(ws / "a.received")
        deadline = time.monotonic() + 20
        while b'"method":"initialize"' not in (ws / "a.received").read_bytes():
            assert time.monotonic() < deadline, (ws / "a.received").read_bytes()
            time.sleep(0.05)
    finally:
        client.close(timeout=5)


def test_a_server_that_cannot_start_stops_the_ones_started_before_it(
    user: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    args, ws = _recorders(user, ("a", "b"))
    plan = _plan(user, monkeypatch, args)
    real = LaunchSpec.spawn

    def spawn(spec: LaunchSpec) -> object:
        if spec.name == "b":
            _wait_for(ws / "a.received")
            raise OSError(24, "Too many open files")
        return real(spec)

    monkeypatch.setattr(LaunchSpec, "spawn", spawn)
    with pytest.raises(StartupError, match=r"server 'b' failed to start: .*Too many open files"):
        prestart(plan)
    assert (ws / "a.received").read_bytes() == b""
    _gone, alive = psutil.wait_procs(_ours(), timeout=5)
    assert not alive
    assert not os.path.exists(plan.runtime_dir)


# The stdlib server, then (once its input has ended) a word that it was let finish.
STOPPED_AFTER = (
    "import os, runpy; runpy.run_path(os.environ['SERVER'], run_name='__main__'); "
    "open(os.environ['WS'] + '/stopped', 'w').write('stopped\\n')"
)


def test_servers_started_early_are_stopped_gently_when_the_session_ends(user: Home) -> None:
    # A server taken over from the early start is stopped like any other: its input is
    # closed and it is given time to finish (here: to say so in a file), not killed.
    ws = user.ws()
    server = REPO / "scripts" / "stdlib_server.py"
    entry = {
        "command": sys.executable,
        "args": ["-I", "-c", STOPPED_AFTER],
        "env": {"SERVER": str(server), "WS": "${workspace}"},
        "sandbox": {
            "filesystem": {"allowRead": [str(server.parent)], "allowWrite": ["${workspace}"]}
        },
    }
    config = user.root / "stdlib.json"
    config.write_text(json.dumps({"mcpServers": {"echo": entry}}))
    policy = write_raw_policy(user.root / "policy", {"echo": {"echo": ["text"]}})
    args = ["--config", str(config), "--policy-dir", str(policy), "--workspace", str(ws)]
    client = Client.spawn([IRONCURTAIN, "run", *args], user.env, user.root)
    try:
        client.initialize()
        answer = client.call("echo__echo", {"text": "hello"})
        assert answer["result"]["content"][0]["text"] == "hello", answer
    finally:
        assert client.close(timeout=10) == 0
    assert (ws / "stopped").read_text() == "stopped\n"


def _slow_config(user: Home, seconds: str) -> list[str]:
    """A server that takes ``seconds`` to start (then echoes nothing useful)."""
    ws = user.ws()
    entry = {"command": "/bin/sh", "args": ["-c", f"sleep {seconds}; exec cat"]}
    config = user.root / "slow.json"
    config.write_text(json.dumps({"mcpServers": {"slow": entry}}))
    policy = write_raw_policy(user.root / "policy", {"slow": {}})
    return ["--config", str(config), "--policy-dir", str(policy), "--workspace", str(ws)]


def _sleeping(seconds: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if proc.info["cmdline"] and seconds in proc.info["cmdline"]:
            found.append(proc)
    return found


def test_a_client_that_leaves_during_start_up_ends_the_session(user: Home) -> None:
    # The client closes its end before the server is ready, having sent nothing: the
    # session stops (and stops the server) instead of waiting up to a minute for it.
    seconds = f"29.{secrets.randbelow(10**6):06d}"  # names this test's server alone
    proc = subprocess.Popen(
        [IRONCURTAIN, "run", *_slow_config(user, seconds)],
        env=user.env,
        cwd=user.root,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 20
        while not _sleeping(seconds):
            assert time.monotonic() < deadline, "the server never started"
            time.sleep(0.05)
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=15)
        assert proc.stderr is not None
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
        proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    assert proc.returncode == 0, err
    assert b"the client closed its input before the servers were ready" in err
    _gone, alive = psutil.wait_procs(_sleeping(seconds), timeout=5)
    assert not alive


def test_a_client_that_sent_its_requests_and_closed_is_answered(user: Home) -> None:
    # Closing the input is not leaving while requests are still unread: a scripted client
    # that writes them and closes its end gets its answers, then the session ends.
    ws = user.ws()
    server = REPO / "scripts" / "stdlib_server.py"
    entry = {
        "command": sys.executable,
        "args": ["-I", str(server)],
        "sandbox": {"filesystem": {"allowRead": [str(server.parent)]}},
    }
    config = user.root / "stdlib.json"
    config.write_text(json.dumps({"mcpServers": {"echo": entry}}))
    policy = write_raw_policy(user.root / "policy", {"echo": {"echo": ["text"]}})
    args = ["--config", str(config), "--policy-dir", str(policy), "--workspace", str(ws)]
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": {"name": "script", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]  # fmt: skip
    done = subprocess.run(
        [IRONCURTAIN, "run", *args],
        input="".join(json.dumps(r) + "\n" for r in requests).encode(),
        env=user.env,
        cwd=user.root,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    answers = {m["id"]: m for m in map(json.loads, done.stdout.splitlines())}
    assert answers[1]["result"]["serverInfo"]
    assert [t["name"] for t in answers[2]["result"]["tools"]] == ["echo__echo"]
    assert b"closed its input" not in done.stderr


def test_an_http_port_that_cannot_be_had_starts_no_server(user: Home) -> None:
    # The --http socket is bound before any server starts: a port in use is said at once,
    # and the recorder is never started (before, it was started and sent initialize).
    args, ws = _recorders(user, ("a",))
    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        done = subprocess.run(
            [IRONCURTAIN, "run", *args, "--http", str(port)],
            env={**user.env, "IRONCURTAIN_HTTP_TOKEN": "t" * 32},
            cwd=user.root,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    finally:
        taken.close()
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"--http {port}: cannot listen on 127.0.0.1: Address already in use" in done.stderr
    assert not (ws / "a.received").exists()
    assert not list((user.state / "ironcurtain" / "audit").glob("*.jsonl"))
