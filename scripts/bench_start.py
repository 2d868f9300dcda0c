"""The start benchmarks of scripts/bench.py: a server's spawn to its ``initialize`` answered,
bare against sandboxed (``start``), and ``ironcurtain run`` until it is ready against the same
servers started bare (``ready``). Each returns its summary line."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial

from benchlib import BIN, ROOT, Peer, Scratch, print_medians

from launcher.host.oscalls import memfd, wide_table_fd
from launcher.plan.session_plan import RunOptions, plan_session
from sandbox_profiles.model import Limits
from sandbox_profiles.profile import write_runtime_files
from tests.support.client import Client


def _spawn(
    argv: list[str],
    env: dict[str, str],
    cwd: str,
    fds: list[int] | None = None,
    stderr: int | None = subprocess.DEVNULL,
) -> Client:
    """Start a server and send it `initialize` (its id: 0), not waiting for the answer."""
    client = Client.spawn(argv, env, cwd, pass_fds=fds or [], new_session=True, stderr=stderr)
    client.start_initialize(client="bench")
    return client


def _time_to_ready(
    argv: list[str], env: dict[str, str], cwd: str, bpf: bytes | None, keep: list[int]
) -> float:
    """Spawn to `initialize` answered; ``keep``: descriptors the argv names, passed as they
    are (the descriptor-table one), besides the seccomp memfd made for this start."""
    fds = [memfd("bench-seccomp", bpf)] if bpf is not None else []
    started = time.perf_counter()
    argv = [a.replace("{fd}", str(fds[0])) if fds else a for a in argv]
    client = _spawn(argv, env, cwd, [*fds, *keep])
    for fd in fds:
        os.close(fd)
    client.answer(0)
    ready = time.perf_counter() - started
    client.close(timeout=5)
    return ready


def bench_start(quick: bool) -> str:
    starts = 5 if quick else 20
    scratch = Scratch.make()
    os.environ.update(scratch.env())
    config = os.path.join(scratch.root, "servers.json")
    with open(os.path.join(ROOT, "launcher", "defaults", "mcp-servers.json")) as handle:
        servers = json.load(handle)["mcpServers"]
    # A shell that answers initialize: the sandbox's own cost without a server's noise.
    servers["minimal"] = {
        "command": "/bin/sh",
        "args": ["-c", 'read l; echo \'{"jsonrpc":"2.0","id":0,"result":{}}\'; cat'],
    }
    with open(config, "w") as handle:
        json.dump({"mcpServers": servers}, handle)
    plan = plan_session(
        RunOptions(config=config, workspace=scratch.ws, servers=("minimal", "time", "filesystem"))
    )
    uid, gid = plan.run_as or (os.getuid(), os.getgid())
    write_runtime_files(plan.runtime_dir, uid, gid)
    if plan.run_as:
        os.chown(scratch.ws, uid, gid)
    who = f"as uid {uid} (the launcher is root)" if plan.run_as else "as the caller (userns)"
    # As `run` does: every server (a bare one too, through this process's own table)
    # starts with a wide descriptor table.
    table = wide_table_fd()
    keep = [] if table is None else [table]
    print(f"spawn to `initialize` answered, median of {starts} alternating starts")
    print(f"  sandbox: bwrap, seccomp {'on' if plan.seccomp_bpf else 'OFF'}, {who}")
    added = {}
    for name, sp in plan.servers.items():
        assert sp.profile is not None
        spec = sp.launch
        limited = replace(
            spec,
            timeout=None,
            profile=replace(sp.profile, limits=Limits(memory=2 << 30, open_files=1024)),
        )
        variants = {
            "bare": (list(sp.profile.argv), sp.cwd, None, []),
            # The seccomp descriptor's number is only known at each start.
            "sandboxed": (_fd_slot(spec.command(-1, table)), "/", spec.seccomp, keep),
            "+limits": (_fd_slot(limited.command(-1, table)), "/", spec.seccomp, keep),
        }
        env = dict(spec.env)
        for argv, cwd, bpf, fds in variants.values():  # warm the page cache
            _time_to_ready(argv, env, cwd, bpf, fds)
        ready: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(starts):
            for key, (argv, cwd, bpf, fds) in variants.items():
                ready[key].append(_time_to_ready(argv, env, cwd, bpf, fds))
        print(f"\n  {name} ({os.path.basename(sp.profile.argv[0])})")
        base = print_medians(ready, "bare", indent="    ", width=10, with_min=True)
        added[name] = statistics.median(ready["+limits"]) - base  # the goal: limits on
    subprocess.run(["rm", "-rf", plan.runtime_dir], check=False)
    scratch.remove()
    return "; ".join(f"{k} {v * 1000:+.1f} ms" for k, v in added.items())


def _fd_slot(argv: list[str]) -> list[str]:
    return [a if a != "-1" else "{fd}" for a in argv]


# -- ready ----------------------------------------------------------------------------------


def _bare_all_ready(commands: list[list[str]], env: dict[str, str], cwd: str) -> float:
    """Start every server at once (as `run` does); the time until the slowest answered."""
    started = time.perf_counter()
    clients = [_spawn(argv, env, cwd) for argv in commands]
    for client in clients:
        client.answer(0)
    slowest = time.perf_counter() - started
    for client in clients:
        client.close()
    return slowest


def bench_ready(quick: bool) -> str:
    starts = 3 if quick else 10
    scratch = Scratch.make()
    env = scratch.env()
    with open(os.path.join(ROOT, "launcher", "defaults", "mcp-servers.json")) as handle:
        servers = json.load(handle)["mcpServers"]
    bare = {
        name: [
            os.path.join(BIN, s["command"]),
            *(a.replace("${workspace}", scratch.ws) for a in s.get("args", [])),
        ]
        for name, s in servers.items()
    }
    # One fast server: the standard library only, so ironcurtain's own start shows. It
    # writes when its own code began to run (so when it was spawned, bare or sandboxed).
    stdlib = os.path.join(ROOT, "scripts", "stdlib_server.py")
    stamps = os.path.join(scratch.root, "stamps")
    os.makedirs(stamps)
    stamp = os.path.join(stamps, "stdlib-started")
    fast = [sys.executable, "-I", stdlib, "--stamp", stamp]
    config = os.path.join(scratch.root, "fast.json")
    with open(config, "w") as handle:
        entry = {
            "command": fast[0],
            "args": fast[1:],
            "sandbox": {
                "filesystem": {"allowRead": [os.path.dirname(stdlib)], "allowWrite": [stamps]}
            },
        }
        json.dump({"mcpServers": {"fast": entry}}, handle)
    added = []
    fast_ready: dict[str, list[float]] = {"bare": [], "ironcurtain": []}
    fast_begun: dict[str, list[float]] = {"bare": [], "ironcurtain": []}
    fast_variants: dict[str, Callable[[], float]] = {
        "bare": lambda: _bare_all_ready([fast], env, scratch.ws),
        "ironcurtain": lambda: _run_ready(scratch, env, ["--config", config]),
    }
    for measure in fast_variants.values():  # warm the page cache
        measure()
    for _ in range(starts):
        for key, measure in fast_variants.items():
            launched = time.time()
            fast_ready[key].append(measure())
            with open(stamp) as handle:
                fast_begun[key].append(float(handle.read()) - launched)
    print(f"ready to `initialize` answered, one fast server (stdlib), median of {starts}")
    base = print_medians(fast_ready, "bare")
    fast_median = statistics.median(fast_ready["ironcurtain"])
    added.append(("fast", fast_median - base, fast_median / base))
    print("  the same starts: the server's own code began to run, after the launch")
    begun = print_medians(fast_begun, "bare", indent="    ")
    spawn_added = statistics.median(fast_begun["ironcurtain"]) - begun
    for label, names in (
        ("one server (time)", ["time"]),
        (f"the bundled config: {len(bare)} servers ({', '.join(bare)}) started together", []),
        (
            f"{len(bare)} wrapped entries, as a client starts them: one `ironcurtain run "
            "--server X` each, all at once",
            ["*"],
        ),
    ):
        commands = [bare[n] for n in names if n != "*"] or list(bare.values())
        selection = [a for n in names if n != "*" for a in ("--server", n)]
        wrapped = names == ["*"]
        variants: dict[str, Callable[[], float]] = {
            "bare, slowest": partial(_bare_all_ready, commands, env, scratch.ws),
            "ironcurtain": (
                (lambda: _wrapped_all_ready(scratch, env, list(bare)))
                if wrapped
                else partial(_run_ready, scratch, env, selection)
            ),
        }
        for measure in variants.values():  # warm the page cache
            measure()
        ready: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(starts):
            for key, measure in variants.items():
                ready[key].append(measure())
        print(f"ready to `initialize` answered, {label}, median of {starts}")
        base = print_medians(ready, "bare, slowest")
        name = {"*": "wrapped, each its own run"}.get(names[0], names[0]) if names else "all"
        median = statistics.median(ready["ironcurtain"])
        added.append((name, median - base, median / base))
    scratch.remove()
    return "; ".join(f"{name} {v * 1000:+.0f} ms ({r:.2f}x)" for name, v, r in added) + (
        f" (fast: its code began {spawn_added * 1000:+.0f} ms later)"
    )


def _wrapped_all_ready(scratch: Scratch, env: dict[str, str], names: list[str]) -> float:
    """One `ironcurtain run --server X` per server, all started at once (a client starting
    the entries `ironcurtain wrap` made); the time until the slowest answered. As root each
    run opens its workspace to the sandbox's user and two sessions may not open overlapping
    roots at once (the second is refused), so there each run gets a workspace of its own."""
    own = os.geteuid() == 0
    started = time.perf_counter()
    clients = []
    for name in names:
        ws = os.path.join(scratch.root, f"ws-{name}") if own else scratch.ws
        os.makedirs(ws, exist_ok=True)
        argv = scratch.run_argv("--server", name, workspace=ws)
        with open(os.path.join(scratch.root, f"wrapped-{name}.err"), "wb") as said:
            clients.append(_spawn(argv, env, ws, stderr=said.fileno()))
    for name, client in zip(names, clients, strict=True):
        try:
            client.answer(0)
        except EOFError:
            with open(os.path.join(scratch.root, f"wrapped-{name}.err")) as said:
                raise RuntimeError(
                    f"`ironcurtain run --server {name}` did not start:\n{said.read()}"
                ) from None
    slowest = time.perf_counter() - started
    for client in clients:
        client.close(timeout=5)
    return slowest


def _run_ready(scratch: Scratch, env: dict[str, str], selection: list[str]) -> float:
    peer = Peer(scratch.run_argv(*selection), env)
    peer.close()
    return peer.ready


# -- policy decisions -------------------------------------------------------------------------
