"""A session ends cleanly: nothing of any sandbox survives EOF or SIGTERM (psutil)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import psutil
import pytest

from tests.support.client import Client
from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.paths import IRONCURTAIN, TESTS
from tests.support.probe import write_probe_config

pytestmark = needs_bwrap


def start(user: Home) -> tuple[subprocess.Popen[bytes], list[psutil.Process]]:
    client = Client.spawn([IRONCURTAIN, "run", "--workspace", str(user.ws())], user.env, user.root)
    answer = client.initialize()
    assert answer["result"]["serverInfo"]["name"] == "ironcurtain"
    tree = psutil.Process(client.proc.pid).children(recursive=True)
    # bwrap, the sandbox's init and the server, for each of the three servers
    assert len(tree) >= 6, [p.name() for p in tree]
    return client.proc, tree


def start_lingering_probe(user: Home) -> tuple[subprocess.Popen[bytes], list[psutil.Process]]:
    ws = user.ws("probe-ws")
    policy = TESTS / "data" / "probe-policy-allow-all"
    config = write_probe_config(user)
    argv = ["--config", str(config), "--workspace", str(ws), "--policy-dir", str(policy)]
    client = Client.spawn([IRONCURTAIN, "run", *argv], user.env, user.root)
    client.initialize()
    answer = client.call("probe__linger", {})
    assert answer["result"]["content"][0]["text"] == "lingering"
    return client.proc, psutil.Process(client.proc.pid).children(recursive=True)


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
