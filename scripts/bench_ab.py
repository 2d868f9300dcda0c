#!/usr/bin/env python3
"""Two revisions of ironcurtain against each other, alternating in one run: whether a change
made the session slower or faster, measured as `scripts/bench.py` measures the goals, but
between the code of A and B instead of against bare servers.

  ready [fast|time|all]        `ironcurtain run` until `initialize` is answered, start by
                               start: the stdlib server (fast), the time server, or the
                               bundled config (all)
  calls [time|filesystem]      per-call latency, call by call, and the trusted process's CPU
                               per call (its threads' schedstat: far steadier than latency)

A revision is anything `git archive` takes (a commit, a tag, HEAD~2), or `.` for the work
tree as it is, uncommitted changes too. Its launcher/, policy/ and sandbox_profiles/ are put
in a scratch directory and run by this checkout's Python with PYTHONPATH pointing there (the
dependencies are this checkout's). Each one's quartiles are printed with its median: when
the medians differ by less than the middle half's width, the run shows no difference. A
and B may be the same revision: two sessions of the same code, the noise to compare with
(on the 2-core development machine, 3% in latency and 5% in CPU per call either way).

Usage: bench_ab.py [--starts N] [--calls N] A B ready|calls [fast|time|all|filesystem]
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

from benchlib import ROOT, Peer, Scratch, ms

PACKAGES = ("launcher", "policy", "sandbox_profiles")


def export(revision: str, target: str) -> str:
    """``revision``'s packages put in ``target`` (made here); ``target``."""
    os.makedirs(target)
    if revision == ".":
        ignore = shutil.ignore_patterns("__pycache__")
        for package in PACKAGES:
            shutil.copytree(
                os.path.join(ROOT, package), os.path.join(target, package), ignore=ignore
            )
        return target
    archive = subprocess.run(
        ["git", "-C", ROOT, "archive", revision, *PACKAGES],
        capture_output=True,
        check=False,
    )
    if archive.returncode != 0:
        sys.exit(f"bench_ab.py: git archive {revision}: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", target], input=archive.stdout, check=True)
    return target


def launcher_argv(tree: str, run_argv: list[str]) -> list[str]:
    """``ironcurtain run ...`` from ``tree`` (its entry point, or the typer app before there
    was one)."""
    entry = next(
        module
        for module, path in (
            ("launcher.cli.entry", ("cli", "entry.py")),
            ("launcher.entry", ("entry.py",)),
            ("launcher.cli", ()),
        )
        if os.path.exists(os.path.join(tree, "launcher", *path))
    )
    code = f"import sys; sys.argv[0] = 'ironcurtain'; from {entry} import main; main()"
    return [sys.executable, "-c", code, *run_argv[1:]]


def quartiles(values: list[float]) -> tuple[float, float, float]:
    q1, q2, q3 = statistics.quantiles(values, n=4)
    return q1, q2, q3


def report(title: str, times: dict[str, list[float]], digits: int) -> None:
    print(title)
    (name_a, a), (name_b, b) = times.items()
    width = max(len(name_a), len(name_b)) + 2
    for name, values in times.items():
        q1, q2, q3 = quartiles(values)
        half = f"{ms(q1, 0, digits)} to {ms(q3, 0, digits)}"
        print(f"  {name:{width}} {ms(q2, 9, digits)}   (middle half {half})")
    med_a, med_b = statistics.median(a), statistics.median(b)
    print(f"  B - A: {ms(med_b - med_a, 0, digits)}, ratio {med_b / med_a:.3f}x")


def bench_ready(trees: dict[str, str], which: str, starts: int) -> None:
    scratch = Scratch.make()
    env = scratch.env()
    if which == "fast":
        stdlib = os.path.join(ROOT, "scripts", "stdlib_server.py")
        config = os.path.join(scratch.root, "fast.json")
        entry = {
            "command": sys.executable,
            "args": ["-I", stdlib],
            "sandbox": {"filesystem": {"allowRead": [os.path.dirname(stdlib)]}},
        }
        with open(config, "w") as handle:
            json.dump({"mcpServers": {"fast": entry}}, handle)
        selection = ["--config", config]
        title = "one fast server (stdlib)"
    elif which == "all":
        selection, title = [], "the bundled config"
    else:
        selection, title = ["--server", which], f"one server ({which})"
    argv = {name: launcher_argv(tree, scratch.run_argv(*selection)) for name, tree in trees.items()}
    envs = {name: {**env, "PYTHONPATH": tree} for name, tree in trees.items()}

    def start(name: str) -> float:
        peer = Peer(argv[name], envs[name], cwd=scratch.ws)
        peer.close()
        return peer.ready

    try:
        for name in trees:  # compile each tree's modules, warm the page cache
            start(name)
            start(name)
        ready: dict[str, list[float]] = {name: [] for name in trees}
        for _ in range(starts):
            for name in trees:
                ready[name].append(start(name))
    finally:
        scratch.remove()
    report(f"ready to `initialize` answered, {title}, {starts} starts each, alternating", ready, 1)


def bench_calls(trees: dict[str, str], which: str, calls: int) -> None:
    scratch = Scratch.make()
    env = scratch.env()
    notes = os.path.join(scratch.ws, "notes.txt")
    with open(notes, "w") as handle:
        handle.write("some notes\n" * 20)
    tool, arguments = {
        "time": ("get_current_time", {"timezone": "UTC"}),
        "filesystem": ("read_text_file", {"path": notes}),
    }[which]
    peers: dict[str, Peer] = {}
    try:
        for name, tree in trees.items():
            argv = launcher_argv(tree, scratch.run_argv("--server", which))
            peers[name] = Peer(argv, {**env, "PYTHONPATH": tree}, cwd=scratch.ws)
        for peer in peers.values():
            for _ in range(max(100, calls // 10)):
                peer.call(tool, arguments)
        took: dict[str, list[float]] = {name: [] for name in peers}
        cpu = {name: -_cpu(peer.proc.pid) for name, peer in peers.items()}
        for _ in range(calls):
            for name, peer in peers.items():
                took[name].append(peer.call(tool, arguments))
        for name, peer in peers.items():
            cpu[name] += _cpu(peer.proc.pid)
    finally:
        for peer in peers.values():
            peer.close()
        scratch.remove()
    report(f"per call ({which}: {tool}), {calls} calls each, alternating", took, 3)
    print("  the trusted process's CPU per call (all its threads):")
    for name, used in cpu.items():
        print(f"    {name:{max(map(len, cpu)) + 2}} {used / calls * 1e6:7.1f} µs")


def _cpu(pid: int) -> float:
    """Seconds of CPU the threads of ``pid`` have used so far (their schedstat)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/schedstat") as handle:
            total += int(handle.read().split()[0])
    return total / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", metavar="A", help="a revision, or . for the work tree")
    parser.add_argument("b", metavar="B", help="a revision, or . for the work tree")
    parser.add_argument("what", choices=["ready", "calls"])
    parser.add_argument("server", nargs="?", choices=["fast", "time", "all", "filesystem"])
    parser.add_argument("--starts", type=int, default=20, help="starts each (ready)")
    parser.add_argument("--calls", type=int, default=2000, help="calls each (calls)")
    args = parser.parse_args()
    server = args.server or ("fast" if args.what == "ready" else "time")
    if args.what == "ready" and server == "filesystem":
        parser.error("ready takes fast, time or all")
    if args.what == "calls" and server not in ("time", "filesystem"):
        parser.error("calls takes time or filesystem")
    scratch = tempfile.mkdtemp(prefix="ironcurtain-ab-")
    try:
        trees = {
            f"A {args.a}": export(args.a, os.path.join(scratch, "a")),
            f"B {args.b}": export(args.b, os.path.join(scratch, "b")),
        }
        if args.what == "ready":
            bench_ready(trees, server, args.starts)
        else:
            bench_calls(trees, server, args.calls)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
