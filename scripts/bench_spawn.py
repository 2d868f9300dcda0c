#!/usr/bin/env python3
"""Sandbox start-up cost: spawn to `initialize` answered, bare vs under the real profile.

For each reference server (Python: mcp-server-time; Node: the npm filesystem server), and a
shell that answers `initialize` (the sandbox's own cost without a server's start-up noise),
three kinds of start alternate, so machine noise hits all alike:

  bare       the server's command, started directly with the sandbox's environment
  sandboxed  exactly what `ironcurtain run` starts: bwrap with the full profile, the
             seccomp filter, and (as root) the switch to an unprivileged uid
  +limits    the same with sandbox.limits set (a `prlimit` exec in front)

Read the ratios and the added milliseconds, not the absolute times (this machine is noisy).
Usage: bench_spawn.py [--quick] [--starts N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

from bench_relay import INIT  # noqa: E402

from launcher.plan import RunOptions, plan_session  # noqa: E402
from launcher.servers import LaunchSpec, _memfd  # noqa: E402
from sandbox_profiles.model import Limits  # noqa: E402
from sandbox_profiles.profile import write_runtime_files  # noqa: E402


def time_to_ready(argv: list[str], env: dict[str, str], cwd: str, seccomp: bytes | None) -> float:
    fds = [_memfd("bench-seccomp", seccomp)] if seccomp is not None else []
    started = time.perf_counter()
    proc = subprocess.Popen(
        [a.replace("{fd}", str(fds[0])) if fds else a for a in argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=cwd,
        pass_fds=fds,
        start_new_session=True,
    )
    for fd in fds:
        os.close(fd)
    assert proc.stdin and proc.stdout
    proc.stdin.write(json.dumps(INIT).encode() + b"\n")
    proc.stdin.flush()
    while True:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{argv[0]} exited before answering initialize")
        if json.loads(line).get("id") == 0:
            ready = time.perf_counter() - started
            break
    proc.stdin.close()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait()
    return ready


def ms(x: float) -> str:
    return f"{x * 1000:8.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 starts each instead of 20")
    parser.add_argument("--starts", type=int, default=0)
    opts = parser.parse_args()
    starts = opts.starts or (5 if opts.quick else 20)

    scratch = tempfile.mkdtemp(prefix="ironcurtain-bench-")
    os.environ["XDG_STATE_HOME"] = os.path.join(scratch, "state")
    os.environ["XDG_CONFIG_HOME"] = os.path.join(scratch, "config")
    ws = os.path.join(scratch, "ws")
    os.makedirs(ws)
    config = os.path.join(scratch, "servers.json")
    with open(os.path.join(ROOT, "launcher", "defaults", "mcp-servers.json")) as handle:
        servers = json.load(handle)["mcpServers"]
    # A shell that answers initialize: shows the sandbox's own cost without a server's noise.
    servers["minimal"] = {
        "command": "/bin/sh",
        "args": ["-c", 'read l; echo \'{"jsonrpc":"2.0","id":0,"result":{}}\'; cat'],
    }
    with open(config, "w") as handle:
        json.dump({"mcpServers": servers}, handle)
    plan = plan_session(
        RunOptions(config=config, workspace=ws, servers=("minimal", "time", "filesystem"))
    )
    uid, gid = plan.run_as or (os.getuid(), os.getgid())
    write_runtime_files(plan.runtime_dir, uid, gid)
    if plan.run_as:
        os.chown(ws, uid, gid)

    print(f"spawn to `initialize` answered, median of {starts} alternating starts")
    print(f"  sandbox: bwrap, seccomp {'on' if plan.seccomp_bpf else 'OFF'}, ", end="")
    who = f"as uid {uid} (the launcher is root)" if plan.run_as else "as the caller (userns)"
    print(who)
    for name, sp in plan.servers.items():
        assert sp.profile is not None
        spec = sp.launch
        bare = [sp.profile.argv[0], *sp.profile.argv[1:]]
        limited = LaunchSpec(
            spec.name,
            [],
            spec.env,
            spec.cwd,
            None,
            profile=_with_limits(sp.profile),
            bwrap=spec.bwrap,
            seccomp=spec.seccomp,
        )
        variants = {
            "bare": (bare, dict(spec.env), sp.cwd, None),
            "sandboxed": (spec.command(-1), dict(spec.env), "/", spec.seccomp),
            "+limits": (limited.command(-1), dict(spec.env), "/", spec.seccomp),
        }
        # The descriptor number is only known at each start.
        variants = {
            k: ([a if a != "-1" else "{fd}" for a in argv], env, cwd, bpf)
            for k, (argv, env, cwd, bpf) in variants.items()
        }
        for argv, env, cwd, bpf in variants.values():  # warm the page cache
            time_to_ready(argv, env, cwd, bpf)
        ready: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(starts):
            for key, (argv, env, cwd, bpf) in variants.items():
                ready[key].append(time_to_ready(argv, env, cwd, bpf))
        base = statistics.median(ready["bare"])
        print(f"\n  {name} ({os.path.basename(sp.profile.argv[0])})")
        for key, values in ready.items():
            med = statistics.median(values)
            print(
                f"    {key:10} {ms(med)}  added {ms(med - base)}  ratio {med / base:.3f}x"
                f"  (min {ms(min(values))})"
            )
    subprocess.run(["rm", "-rf", scratch, plan.runtime_dir], check=False)


def _with_limits(profile):  # type: ignore[no-untyped-def]
    from dataclasses import replace

    return replace(profile, limits=Limits(memory=2 << 30, open_files=1024))


if __name__ == "__main__":
    main()
