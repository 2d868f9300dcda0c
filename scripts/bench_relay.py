#!/usr/bin/env python3
"""Side-by-side cost of IronCurtain on one server (mcp-server-time), measured in one run.

  per call:  tools/call answered, direct to the server   vs  through `ironcurtain run`
  start-up:  spawn to `initialize` answered: bare server  vs  the same under bwrap
             vs  `ironcurtain run --server time` (sandbox + policy + relay)

A and B alternate call by call (and start by start) so machine noise hits both alike; the
ratios are what to read, not the absolute times. Usage: bench_relay.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

BIN = os.path.dirname(sys.executable)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sandbox_profiles import ProfileRequest, build_profile, render_bwrap  # noqa: E402
from sandbox_profiles.profile import write_runtime_files  # noqa: E402

INIT = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "0"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


class Peer:
    """A stdio MCP server spoken to in raw JSON lines (no client library overhead)."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
        )
        self.ids = 0
        self.ready = self.roundtrip(INIT) - self.started
        self.send(INITIALIZED)

    def send(self, message: dict[str, object]) -> None:
        assert self.proc.stdin
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def roundtrip(self, message: dict[str, object]) -> float:
        self.send(message)
        assert self.proc.stdout
        while True:
            reply = json.loads(self.proc.stdout.readline())
            if reply.get("id") == message["id"]:
                if "error" in reply or reply.get("result", {}).get("isError"):
                    raise RuntimeError(f"call failed: {reply}")
                return time.perf_counter()

    def call(self, tool: str) -> float:
        self.ids += 1
        message = {
            "jsonrpc": "2.0",
            "id": self.ids,
            "method": "tools/call",
            "params": {"name": tool, "arguments": {"timezone": "UTC"}},
        }
        start = time.perf_counter()
        return self.roundtrip(message) - start

    def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(x: float) -> str:
    return f"{x * 1000:8.3f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    opts = parser.parse_args()
    calls, starts, warm = (200, 3, 20) if opts.quick else (2000, 10, 100)

    server = shutil.which("mcp-server-time") or os.path.join(BIN, "mcp-server-time")
    ironcurtain = os.path.join(BIN, "ironcurtain")
    scratch = tempfile.mkdtemp(prefix="ironcurtain-bench-")
    ws, runtime = os.path.join(scratch, "ws"), os.path.join(scratch, "run")
    os.makedirs(ws)
    write_runtime_files(runtime, os.getuid(), os.getgid())
    env = {
        "PATH": f"{BIN}:/usr/bin:/bin",
        "HOME": os.path.expanduser("~"),
        "LANG": "C.UTF-8",
        "XDG_STATE_HOME": os.path.join(scratch, "state"),
    }
    profile = build_profile(
        ProfileRequest(
            name="time",
            command_path=server,
            args=[],
            env={},
            workspace=ws,
            runtime_dir=runtime,
            search_path=env["PATH"].split(":"),
            host_env=env,
        )
    )
    variants = {
        "bare": ([server], env),
        "bwrap": (render_bwrap(profile, shutil.which("bwrap") or "bwrap"), dict(profile.env)),
        "ironcurtain": (
            [
                ironcurtain,
                "run",
                "--server",
                "time",
                "--workspace",
                ws,
                "--audit-log",
                os.path.join(scratch, "audit.jsonl"),
                # The same call thousands of times is the benchmark, not a stuck agent; a
                # huge limit keeps the breaker's cost in the measurement.
                "--max-identical-calls",
                "1000000000",
            ],
            env,
        ),
    }

    ready: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(starts):
        for name, (argv, penv) in variants.items():
            peer = Peer(argv, penv)
            ready[name].append(peer.ready)
            peer.close()

    direct, proxied = Peer(*variants["bare"]), Peer(*variants["ironcurtain"])
    for _ in range(warm):
        direct.call("get_current_time")
        proxied.call("get_current_time")
    a: list[float] = []
    b: list[float] = []
    for _ in range(calls):
        a.append(direct.call("get_current_time"))
        b.append(proxied.call("get_current_time"))
    direct.close()
    proxied.close()
    shutil.rmtree(scratch, ignore_errors=True)

    print(f"per call, {calls} calls each, alternating (mcp-server-time get_current_time)")
    print(f"  {'':12} {'median':>11} {'p99':>11}")
    print(f"  {'direct':12} {ms(statistics.median(a))} {ms(pct(a, 0.99))}")
    print(f"  {'ironcurtain':12} {ms(statistics.median(b))} {ms(pct(b, 0.99))}")
    print(
        f"  added: median {ms(statistics.median(b) - statistics.median(a))}, "
        f"p99 {ms(pct(b, 0.99) - pct(a, 0.99))}; "
        f"ratio {statistics.median(b) / statistics.median(a):.2f}x"
    )
    print(f"\nstart-up to `initialize` answered, median of {starts}")
    base = statistics.median(ready["bare"])
    for name, values in ready.items():
        med = statistics.median(values)
        print(f"  {name:12} {ms(med)}  added {ms(med - base)}  ratio {med / base:.2f}x")


if __name__ == "__main__":
    main()
