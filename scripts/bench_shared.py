"""The shared-state benchmark of scripts/bench.py: per call over ``--http`` (the stateless
era), two instances sharing their state in Redis (``--state``) behind HAProxy, against one
instance alone behind the same HAProxy, alternating, same run; and how long an approval
for the session written by one instance takes to be seen by another (one Redis round
trip after the write). Needs ``redis-server`` and ``haproxy``. Returns its summary line."""

from __future__ import annotations

import os
import statistics
import time
from contextlib import ExitStack
from pathlib import Path

from benchlib import HttpPeer, RawHttp, Scratch, compare

from launcher.shared_state.redis_store import connect
from tests.support.shared_state import haproxy, redis_server


def _argv(scratch: Scratch, name: str, *extra: str) -> list[str]:
    """``run`` of the time server on its own workspace and audit log."""
    ws = os.path.join(scratch.root, f"ws-{name}")
    os.makedirs(ws)
    argv = scratch.run_argv("--server", "time", *extra, workspace=ws)
    at = argv.index("--audit-log") + 1
    argv[at] = os.path.join(scratch.root, f"audit-{name}.jsonl")
    return argv


def bench_shared(quick: bool) -> str:
    calls, warm = (300, 30) if quick else (2000, 200)
    scratch = Scratch.make()
    env = scratch.env()
    args: dict[str, object] = {"timezone": "UTC"}
    print(f"per call over HTTP behind HAProxy, {calls} calls each, alternating")
    a: list[float] = []
    b: list[float] = []
    with ExitStack() as stack, redis_server() as redis:
        stack.callback(scratch.remove)
        alone = HttpPeer(_argv(scratch, "alone"), env, stateless=True)
        stack.callback(alone.close)
        pair = [
            HttpPeer(_argv(scratch, f"shared-{n}", "--state", redis.url), env, stateless=True)
            for n in range(2)
        ]
        for peer in pair:
            stack.callback(peer.close)
        root = Path(scratch.root)
        (root / "lb-alone").mkdir()
        (root / "lb-pair").mkdir()
        one = stack.enter_context(haproxy(root / "lb-alone", [alone.port]))
        two = stack.enter_context(haproxy(root / "lb-pair", [p.port for p in pair]))
        alone.raw = RawHttp(int(one.rsplit(":", 1)[1].split("/")[0]))  # through HAProxy
        pair[0].raw = RawHttp(int(two.rsplit(":", 1)[1].split("/")[0]))
        for i in range(warm + calls):
            x = alone.call("get_current_time", args)
            y = pair[0].call("get_current_time", args)
            if i >= warm:
                a.append(x)
                b.append(y)
        label = "time: get_current_time, stateless era, each request to the next instance"
        med, p99 = compare(label, a, b, ("one alone", "two + Redis"))
        seen = _approval_seen(redis.url, 200 if quick else 2000)
    ratio = statistics.median(b) / statistics.median(a)
    print(f"  an approval written on one instance, read on another: {seen * 1e3:.3f} ms median")
    return (
        f"{ratio:.2f}x per call ({med * 1000:+.3f} ms median, {p99 * 1000:+.3f} ms p99); "
        f"an approval seen by another instance {seen * 1e3:.2f} ms after it is given"
    )


def _approval_seen(url: str, rounds: int) -> float:
    """Median seconds from one instance writing an approval for the session to another
    finding it (each its own connection, as two instances have)."""
    giver, other = connect(url, print), connect(url, print)
    times = []
    try:
        for n in range(rounds):
            start = time.perf_counter()
            giver.grant("bench", "time\0get_current_time", f"sha256:{n}")
            while not other.granted("bench", "time\0get_current_time", f"sha256:{n}"):
                pass
            times.append(time.perf_counter() - start)
    finally:
        giver.close()
        other.close()
    return statistics.median(times)
