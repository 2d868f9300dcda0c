#!/usr/bin/env python3
"""IronCurtain's cost, measured against its performance goals, each comparison in one run.

  calls   per-call latency: a server called directly vs through `ironcurtain run` (the
          minimal stdlib server, scripts/stdlib_server.py; mcp-server-time, Python; the npm
          filesystem server, Node, whose read names a path), and through a relay that only
          copies lines (scripts/floor_relay.py: what the two extra pipe hops of any stdio
          proxy cost here); and the trusted process's CPU per call (its threads' schedstat)
  http    per-call latency through `ironcurtain run` over streamable HTTP (--http) vs the
          same over stdio (the time server), HTTP spoken from a raw socket as the stdio
          side is raw JSON lines; and what a client library's own work adds (Python's
          http.client against the raw socket)
  output  per-call cost of the credential detectors on a 100 kB answer (the filesystem
          server's read_text_file, detectors off vs on), and the scan alone in process
  start   spawn to `initialize` answered: bare vs the full sandbox (bwrap, seccomp, and as
          root the switch to an unprivileged uid), for a shell, the time and filesystem servers
  ready   `ironcurtain run` until the upstream `initialize` is answered vs the same
          servers started bare, in parallel, until the slowest of them has answered: one
          fast server (scripts/stdlib_server.py, the standard library only; also when its
          own code began to run, which shows the launcher's work before the spawn), the
          time server, the bundled config (every server), and one run per server at once
  policy  decisions per second of the engine on a 50-rule policy, without paths and with
          two paths (each canonicalised through the filesystem, as for a real call)
  memory  RSS of the trusted process with three servers, after a few hundred calls
  eras    per call, a client of the handshake era vs one of the stateless era (2026-07-28),
          over stdio and over --http
  gateway per call over --http, a caller known by its JWT (gateway mode, an identity
          provider on loopback) vs the static bearer token; and checking a token in process
          (first sight: its signature; seen again)
  callers per call in gateway mode, 20 callers at once (each with servers of its own,
          calling at a steady pace) vs one caller alone; and what each caller adds to the
          trusted process's memory
  telemetry per call over stdio, calls not exported vs each exported as an OpenTelemetry
          span and counters (OTEL_EXPORTER_OTLP_ENDPOINT: a receiver on loopback); and
          recording one call in process
  broker  a request to a brokered secret's host (TLS opened by the proxy, the secret put
          in) vs the same request through the plain CONNECT tunnel, kept alive; and a new
          host's first connection the two ways (scripts/bench_broker.py)
  arguments scanning 1 KiB of a call's arguments for credentials vs no scan, in process
  remote  per call, a remote server (the mcp SDK's, streamable HTTP on loopback) through
          `ironcurtain run` (a `url` entry, spoken to over stdio) vs the same server called
          directly over HTTP from a raw socket; and directly through the SDK's own client
          (scripts/bench_remote.py)
  peers   the same time server four ways, start to `initialize` answered and per call:
          bare, through ironcurtain, under srt (@anthropic-ai/sandbox-runtime, a sandbox
          wrapper with no proxy; installed from npm into ~/.cache on first use), and
          through a minimal proxy on the mcp SDK's classes (scripts/sdk_proxy.py)
  shared  per call over HTTP behind HAProxy, two instances sharing their state in Redis
          (--state) vs one instance alone; and how soon an approval written by one
          instance is read by another

A and B alternate call by call (start by start), after a warm-up; read the ratios and the
added times, not the absolute ones: this machine is noisy.

Usage: bench.py [--quick] [section ...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial

import bench_broker as brokers
import bench_callers as crowds
import bench_gateway as gateways
import bench_peers as peers
import bench_policy as policies
import bench_remote as remotes
import bench_shared as shareds
import bench_start as starting
import bench_telemetry as telemetries
from benchlib import BIN, ROOT, HttpPeer, Peer, Scratch, alternate, compare, cpu_seconds, ms

GOALS = {
    "calls": (
        "median added <= 0.1 ms and <= 1.5x the copying relay's (minimal), p99 added <= 0.6 ms; "
        "the trusted process's CPU per call <= 250 µs (time)"
    ),
    "http": "<= 0.5 ms added over stdio",
    "output": "a result without secrets pays only the scan",
    "start": "<= 8 ms added, limits on",
    "ready": "fast <= 75 ms added; the bundled config (all) <= 100 ms over its slowest",
    "policy": ">= 100 000/s without paths, >= 20 000/s with two paths",
    "memory": "<= 60 MB RSS",
    "peers": "ironcurtain's added start and call below srt's and the SDK proxy's",
    "eras": "the stateless era no slower per call than the handshake era",
    "gateway": "<= 0.05 ms added per call (keys cached)",
    "callers": "p99 <= 2x one caller's with 20 at once; <= 5 MB per caller",
    "telemetry": "export never holds a call (background batches)",
    "shared": "<= 1.2x per call, two instances + Redis vs one alone; an approval seen <= 100 ms",
    "broker": "<= 1.3x per request kept alive; a new host's first connection <= 5 ms more",
    "arguments": "<= 0.02 ms added for 1 KiB of arguments",
    "remote": "<= 0.3 ms added median over direct HTTP",
}
results: dict[str, str] = {}


# -- per-call latency ---------------------------------------------------------------------


def bench_calls(quick: bool) -> None:
    calls, warm = (300, 30) if quick else (2000, 200)
    scratch = Scratch.make()
    env = scratch.env()
    with open(os.path.join(scratch.ws, "notes.txt"), "w") as handle:
        handle.write("some notes\n" * 20)
    minimal = [sys.executable, "-I", os.path.join(ROOT, "scripts", "stdlib_server.py")]
    cases: list[_Case] = [
        (
            "minimal: echo (scripts/stdlib_server.py, the standard library only)",
            minimal,
            _minimal_run(scratch, minimal),
            "echo",
            {"text": "hello"},
        ),
        (
            "time: get_current_time",
            [os.path.join(BIN, "mcp-server-time")],
            ["--server", "time"],
            "get_current_time",
            {"timezone": "UTC"},
        ),
        (
            "filesystem: read_text_file (one path, canonicalised and checked)",
            [os.path.join(BIN, "mcp-server-filesystem"), scratch.ws],
            ["--server", "filesystem"],
            "read_text_file",
            {"path": os.path.join(scratch.ws, "notes.txt")},
        ),
    ]
    print(f"per call, {calls} calls each, alternating, after {warm} warm-up calls")
    added = [_calls_case(scratch, env, case, calls, warm) for case in cases]
    scratch.remove()
    results["calls"] = "; ".join(
        f"{name} +{med * 1000:.3f} ms median ({over:.2f}x the copying relay's), "
        f"+{p99 * 1000:.3f} ms p99, CPU {cpu * 1e6:.0f} µs"
        for name, med, p99, over, cpu in added
    )


_Case = tuple[str, list[str], list[str], str, dict[str, object]]


def _calls_case(
    scratch: Scratch, env: dict[str, str], case: _Case, calls: int, warm: int
) -> tuple[str, float, float, float, float]:
    """One server direct, through ironcurtain and through the copying relay, call by call:
    (name, median added, p99 added, added over the relay's, ironcurtain's CPU per call)."""
    label, bare, selection, tool, arguments = case
    direct = Peer(bare, env, cwd=scratch.ws)
    proxied = Peer(scratch.run_argv(*selection), env)
    relayed = Peer(
        [sys.executable, os.path.join(ROOT, "scripts", "floor_relay.py"), *bare], env, scratch.ws
    )
    a: list[float] = []
    b: list[float] = []
    c: list[float] = []
    cpu = 0.0
    for i in range(warm + calls):
        if i == warm:
            cpu = -cpu_seconds(proxied.proc.pid)
        x, y = direct.call(tool, arguments), proxied.call(tool, arguments)
        z = relayed.call(tool, arguments)
        if i >= warm:
            a.append(x)
            b.append(y)
            c.append(z)
    cpu += cpu_seconds(proxied.proc.pid)
    for peer in (direct, proxied, relayed):
        peer.close()
    med, p99 = compare(label, a, b)
    floor = statistics.median(c) - statistics.median(a)
    print(
        f"    a relay that only copies lines (scripts/floor_relay.py): median +{ms(floor, 0)}; "
        f"ironcurtain's checks over it: +{ms(med - floor, 0)}; "
        f"ironcurtain's added time {med / floor:.2f}x the copying relay's"
    )
    print(f"    the trusted process's CPU per call (its threads): {cpu / calls * 1e6:.0f} µs")
    return label.split(":")[0], med, p99, med / floor, cpu / calls


def _minimal_run(scratch: Scratch, bare: list[str]) -> list[str]:
    """``ironcurtain run`` options for the minimal server: its entry in a config, and its
    tool annotated (side-effect free) in a copy of the bundled policy."""
    config = os.path.join(scratch.root, "minimal.json")
    sandbox = {"filesystem": {"allowRead": [os.path.join(ROOT, "scripts")]}}
    with open(config, "w") as handle:
        entry = {"command": bare[0], "args": bare[1:], "sandbox": sandbox}
        json.dump({"mcpServers": {"minimal": entry}}, handle)
    policy = os.path.join(scratch.root, "minimal-policy")
    shutil.copytree(os.path.join(ROOT, "policy", "defaults"), policy)
    path = os.path.join(policy, "tool-annotations.json")
    with open(path) as handle:
        annotations = json.load(handle)
    echo: dict[str, object] = {"toolName": "echo", "serverName": "minimal", "effect": "read"}
    echo |= {"sideEffects": False, "args": {"text": ["none"]}}
    annotations["servers"]["minimal"] = {"tools": [echo]}
    with open(path, "w") as handle:
        json.dump(annotations, handle)
    return ["--config", config, "--policy-dir", policy, "--server", "minimal"]


def bench_http(quick: bool) -> None:
    calls, warm = (300, 30) if quick else (2000, 200)
    scratch = Scratch.make()
    env = scratch.env()
    print(f"per call over HTTP, {calls} calls each, alternating, after {warm} warm-up calls")
    argv = scratch.run_argv("--server", "time")
    args = {"timezone": "UTC"}
    stdio, http = Peer(argv, env), HttpPeer(argv, env)
    lib: HttpPeer | None = None
    try:
        a, b = alternate(
            lambda: stdio.call("get_current_time", args),
            lambda: http.call("get_current_time", args),
            calls,
            warm,
        )
        label = "time: get_current_time (direct = ironcurtain over stdio; HTTP from a raw socket)"
        med, p99 = compare(label, a, b)
        # What a client library's own work adds: Python's http.client against the raw
        # socket, each on a session of its own, alternating as above.
        lib = HttpPeer(argv, env)
        a, b = alternate(
            partial(http.call, "get_current_time", args),
            partial(lib.call_stdlib, "get_current_time", args),
            calls,
            warm,
        )
    finally:
        for peer in (stdio, http, lib):
            if peer is not None:
                peer.close()
        scratch.remove()
    label = "the same through Python's http.client (direct = from a raw socket)"
    client, _ = compare(label, a, b)
    results["http"] = (
        f"+{med * 1000:.3f} ms median, +{p99 * 1000:.3f} ms p99 over stdio "
        f"(http.client adds +{client * 1000:.3f} ms of its own)"
    )


def bench_output(quick: bool) -> None:
    from policy.secrets import mask_strings

    calls, warm = (200, 20) if quick else (1000, 100)
    scratch = Scratch.make()
    env = scratch.env()
    line = "The quick brown fox jumps over the lazy dog; notes, numbers 12345 and words.\n"
    text = line * (100_000 // len(line))
    big = os.path.join(scratch.ws, "big.txt")
    with open(big, "w") as handle:
        handle.write(text)
    peers = []
    for mask in (False, True):
        server = {"command": os.path.join(BIN, "mcp-server-filesystem"), "args": ["${workspace}"]}
        if not mask:
            server["maskSecrets"] = False  # type: ignore[assignment]
        config = os.path.join(scratch.root, f"fs-{mask}.json")
        with open(config, "w") as handle:
            json.dump({"mcpServers": {"filesystem": server}}, handle)
        peers.append(Peer(scratch.run_argv("--config", config, "--server", "filesystem"), env))
    print(f"a 100 kB answer without secrets, {calls} calls each, alternating, after {warm}")
    a: list[float] = []
    b: list[float] = []
    try:
        for i in range(warm + calls):
            x = peers[0].call("read_text_file", {"path": big})
            y = peers[1].call("read_text_file", {"path": big})
            if i >= warm:
                a.append(x)
                b.append(y)
    finally:
        for peer in peers:
            peer.close()
        scratch.remove()
    med, _ = compare("filesystem: read_text_file (direct = detectors off)", a, b)
    # The scan alone, in process: the answer holds the text twice (content, structured).
    answer = {"content": [{"type": "text", "text": text}], "structuredContent": {"content": text}}
    scans = []
    for _ in range(200):
        start = time.perf_counter()
        mask_strings(answer, [])
        scans.append(time.perf_counter() - start)
    scan = statistics.median(scans)
    print(f"  the scan alone (2 x 100 kB, in process): median {scan * 1000:.3f} ms")
    results["output"] = f"+{med * 1000:.3f} ms per call with 100 kB; scan {scan * 1000:.3f} ms"


# -- sandboxed start ----------------------------------------------------------------------


# -- the two protocol eras ----------------------------------------------------------------


def bench_eras(quick: bool) -> None:
    """Per call through ironcurtain, a client of the handshake era against one of the
    stateless era (every request carrying its version and capabilities), over stdio and
    over --http (where the stateless era has no session: each POST stands alone)."""
    calls, warm = (300, 30) if quick else (2000, 200)
    scratch = Scratch.make()
    env = scratch.env()
    argv = scratch.run_argv("--server", "time")
    args: dict[str, object] = {"timezone": "UTC"}
    print(f"per call by protocol era (time: get_current_time), {calls} calls each, alternating")
    added = []
    for transport in ("stdio", "http"):
        if transport == "stdio":
            old: Peer | HttpPeer = Peer(argv, env)
            new: Peer | HttpPeer = Peer(argv, env, stateless=True)
        else:
            old, new = HttpPeer(argv, env), HttpPeer(argv, env, stateless=True)
        a: list[float] = []
        b: list[float] = []
        for i in range(warm + calls):
            x, y = old.call("get_current_time", args), new.call("get_current_time", args)
            if i >= warm:
                a.append(x)
                b.append(y)
        old.close()
        new.close()
        med, _ = compare(f"{transport}: ironcurtain", a, b, ("handshake", "stateless"))
        added.append((transport, med))
    scratch.remove()
    results["eras"] = "; ".join(f"{t} stateless {m * 1000:+.3f} ms" for t, m in added)


def bench_start(quick: bool) -> None:
    results["start"] = starting.bench_start(quick)


def bench_ready(quick: bool) -> None:
    results["ready"] = starting.bench_ready(quick)


def bench_policy(quick: bool) -> None:
    results["policy"] = policies.bench_policy(quick)


# -- memory ---------------------------------------------------------------------------------


def bench_memory(quick: bool) -> None:
    import psutil

    calls = 100 if quick else 500
    scratch = Scratch.make()
    env = scratch.env()
    subprocess.run(["git", "init", "-q", scratch.ws], check=True)
    with open(os.path.join(scratch.ws, "notes.txt"), "w") as handle:
        handle.write("notes\n")
    peer = Peer(
        scratch.run_argv("--server", "time", "--server", "git", "--server", "filesystem"), env
    )
    proc = psutil.Process(peer.proc.pid)
    at_ready = proc.memory_info().rss
    zones = ["UTC", "Europe/Paris", "Asia/Tokyo", "America/New_York"]
    for i in range(calls):
        peer.call("time__get_current_time", {"timezone": zones[i % len(zones)]})
        peer.call("filesystem__read_text_file", {"path": f"{scratch.ws}/notes.txt"})
        peer.call("git__git_status", {"repo_path": scratch.ws})
    after = proc.memory_info()
    uss = proc.memory_full_info().uss
    peer.close()
    scratch.remove()
    print("memory of the trusted process, 3 servers (time, git, filesystem)")
    print(f"  RSS at ready             {at_ready / 1e6:6.1f} MB")
    print(
        f"  RSS after {3 * calls:4} calls      {after.rss / 1e6:6.1f} MB   "
        f"(unshared: {uss / 1e6:.1f} MB)"
    )
    results["memory"] = f"{after.rss / 1e6:.1f} MB RSS"


def bench_peers(quick: bool) -> None:
    results["peers"] = peers.bench_peers(quick)


def bench_gateway(quick: bool) -> None:
    results["gateway"] = gateways.bench_gateway(quick)


def bench_callers(quick: bool) -> None:
    results["callers"] = crowds.bench_callers(quick)


def bench_telemetry(quick: bool) -> None:
    results["telemetry"] = telemetries.bench_telemetry(quick)


def bench_shared(quick: bool) -> None:
    results["shared"] = shareds.bench_shared(quick)


def bench_broker(quick: bool) -> None:
    results["broker"] = brokers.bench_broker(quick)


def bench_arguments(quick: bool) -> None:
    results["arguments"] = brokers.bench_arguments(quick)


def bench_remote(quick: bool) -> None:
    results["remote"] = remotes.bench_remote(quick)


SECTIONS: dict[str, Callable[[bool], None]] = {
    "calls": bench_calls,
    "http": bench_http,
    "output": bench_output,
    "start": bench_start,
    "ready": bench_ready,
    "policy": bench_policy,
    "memory": bench_memory,
    "peers": bench_peers,
    "eras": bench_eras,
    "gateway": bench_gateway,
    "callers": bench_callers,
    "telemetry": bench_telemetry,
    "shared": bench_shared,
    "broker": bench_broker,
    "arguments": bench_arguments,
    "remote": bench_remote,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    parser.add_argument("sections", nargs="*", help=f"any of {', '.join(SECTIONS)} (default: all)")
    opts = parser.parse_args()
    unknown = [s for s in opts.sections if s not in SECTIONS]
    if unknown:
        parser.error(f"unknown section {unknown[0]!r}: expected one of {', '.join(SECTIONS)}")
    for name in opts.sections or SECTIONS:
        SECTIONS[name](opts.quick)
        print()
    print("summary (this machine, this run)")
    for name, text in results.items():
        print(f"  {name:9} {text:70}  goal: {GOALS[name]}")


if __name__ == "__main__":
    main()
