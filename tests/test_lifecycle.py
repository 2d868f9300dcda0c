"""A session ends cleanly: nothing of any sandbox survives EOF or SIGTERM (psutil)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import psutil
import pytest

from tests.conftest import IRONCURTAIN, TESTS, Home, needs_bwrap, probe_config

pytestmark = needs_bwrap

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}


def start(user: Home) -> tuple[subprocess.Popen[bytes], list[psutil.Process]]:
    ws = user.ws()
    proc = subprocess.Popen(
        [IRONCURTAIN, "run", "--workspace", str(ws)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=user.env,
        cwd=user.root,
    )
    assert proc.stdin and proc.stdout
    proc.stdin.write(json.dumps(INIT).encode() + b"\n")
    proc.stdin.flush()
    answer = json.loads(proc.stdout.readline())
    assert answer["result"]["serverInfo"]["name"] == "ironcurtain"
    tree = psutil.Process(proc.pid).children(recursive=True)
    # bwrap, the sandbox's init and the server, for each of the three servers
    assert len(tree) >= 6, [p.name() for p in tree]
    return proc, tree


def send(proc: subprocess.Popen[bytes], message: dict[str, object]) -> dict[str, object]:
    assert proc.stdin and proc.stdout
    proc.stdin.write(json.dumps(message).encode() + b"\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())  # type: ignore[no-any-return]


def start_lingering_probe(user: Home) -> tuple[subprocess.Popen[bytes], list[psutil.Process]]:
    ws = user.ws("probe-ws")
    config = probe_config(user, ws, {})
    proc = subprocess.Popen(
        [
            IRONCURTAIN,
            "run",
            "--config",
            str(config),
            "--workspace",
            str(ws),
            "--policy-dir",
            str(TESTS / "data" / "probe-policy-allow-all"),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=user.env,
        cwd=user.root,
    )
    send(proc, INIT)
    answer = send(
        proc,
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "probe__linger", "arguments": {}},
        },
    )
    assert answer["result"]["content"][0]["text"] == "lingering"  # type: ignore[index]
    return proc, psutil.Process(proc.pid).children(recursive=True)


def assert_all_gone(tree: list[psutil.Process]) -> None:
    _gone, alive = psutil.wait_procs(tree, timeout=5)
    assert not alive, [(p.pid, p.name()) for p in alive]


@pytest.mark.parametrize("starter", ["reference servers", "a server that refuses to exit"])
def test_eof_stops_everything(user: Home, starter: str) -> None:
    # The second ignores SIGTERM and the end of its input: stop must escalate to SIGKILL.
    proc, tree = start(user) if starter == "reference servers" else start_lingering_probe(user)
    assert proc.stdin
    proc.stdin.close()
    assert proc.wait(timeout=10) == 0
    assert_all_gone(tree)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_everything(user: Home, sig: signal.Signals) -> None:
    proc, tree = start(user)
    time.sleep(0.1)
    proc.send_signal(sig)
    assert proc.wait(timeout=10) == 0
    assert_all_gone(tree)


def test_killed_launcher_takes_its_sandboxes_along(user: Home) -> None:
    # --die-with-parent: even a SIGKILLed launcher, which cleans nothing up, leaves no
    # server behind, though this one ignores SIGTERM and the end of its input.
    proc, tree = start_lingering_probe(user)
    proc.kill()
    proc.wait(timeout=10)
    assert_all_gone(tree)


@pytest.mark.parametrize("kind", ["devnull", "file"])
def test_stdin_that_epoll_refuses_still_ends_the_session(user: Home, kind: str) -> None:
    # /dev/null and regular files cannot be watched by epoll; they are read in a thread.
    source = user.root / "input.jsonl"
    source.write_text(json.dumps({"jsonrpc": "2.0", "id": 7, "method": "ping"}) + "\n")
    with open(os.devnull if kind == "devnull" else source, "rb") as stdin:
        done = subprocess.run(
            [IRONCURTAIN, "run", "--server", "time", "--workspace", str(user.ws())],
            stdin=stdin,
            capture_output=True,
            env=user.env,
            timeout=60,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()
    assert b"Traceback" not in done.stderr
    expected = b"" if kind == "devnull" else b'{"jsonrpc":"2.0","id":7,"result":{}}\n'
    assert done.stdout == expected


def test_a_new_session_sweeps_runtime_dirs_of_sessions_that_are_gone(user: Home) -> None:
    run_dir = user.root / "run"
    run_dir.mkdir()
    user.env["XDG_RUNTIME_DIR"] = str(run_dir)
    dead = run_dir / "ironcurtain-20200101-000000-dead00"
    alive = run_dir / "ironcurtain-20200101-000000-a1ive0"
    for directory, pid in ((dead, 4_000_000), (alive, os.getpid())):
        directory.mkdir()
        (directory / "pid").write_text(str(pid))
        (directory / "approvals.sock").write_text("")
        os.utime(directory, (0, 0))
    done = subprocess.run(
        [IRONCURTAIN, "run", "--server", "time", "--workspace", str(user.ws())],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=user.env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert not dead.exists() and alive.exists()
