"""The peers benchmark of scripts/bench.py: the same time server bare, through
ironcurtain, under srt (a sandbox wrapper with no proxy) and through a minimal proxy on the
mcp SDK's classes, start and per call. Returns its summary line."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys

from benchlib import BIN, ROOT, Peer, Scratch, print_medians

SRT_VERSION = "0.0.83"


def srt_argv(scratch: Scratch) -> tuple[list[str] | None, str]:
    """``srt -s SETTINGS`` (no network, the workspace writable), installed from npm into a
    cache on first use; None and why when it cannot run here."""
    missing = [tool for tool in ("npm", "node", "rg", "socat", "bwrap") if not shutil.which(tool)]
    if missing:
        return None, f"needs {', '.join(missing)} (srt's own dependencies, and npm to fetch it)"
    home = os.path.join(os.path.expanduser("~/.cache/ironcurtain-bench"), f"srt-{SRT_VERSION}")
    cli = os.path.join(home, "node_modules", "@anthropic-ai", "sandbox-runtime", "dist", "cli.js")
    if not os.path.exists(cli):
        os.makedirs(home, exist_ok=True)
        done = subprocess.run(
            ["npm", "install", "--prefix", home, "--no-audit", "--no-fund",
             f"@anthropic-ai/sandbox-runtime@{SRT_VERSION}"],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            return None, f"npm install failed: {done.stderr.strip()[-200:]}"
    settings = os.path.join(scratch.root, "srt-settings.json")
    with open(settings, "w") as handle:
        json.dump(
            {
                "network": {"allowedDomains": [], "deniedDomains": []},
                "filesystem": {"denyRead": [], "allowWrite": [scratch.ws], "denyWrite": []},
            },
            handle,
        )
    return [shutil.which("node") or "node", cli, "-s", settings], ""


def bench_peers(quick: bool) -> str:
    starts, calls, warm = (3, 300, 30) if quick else (10, 2000, 200)
    scratch = Scratch.make()
    env = scratch.env()
    server = [os.path.join(BIN, "mcp-server-time")]
    srt, why = srt_argv(scratch)
    proxy = [sys.executable, os.path.join(ROOT, "scripts", "sdk_proxy.py"), *server]
    variants = {
        "bare": server,
        "ironcurtain": scratch.run_argv("--server", "time"),
        **({"srt": [*srt, *server]} if srt else {}),
        "sdk proxy": proxy,
    }
    if srt is None:
        print(f"srt: not measured: {why}")
    tool, arguments = "get_current_time", {"timezone": "UTC"}
    ready: dict[str, list[float]] = {name: [] for name in variants}
    for n in range(starts + 1):  # the first round warms the page cache
        for name, argv in variants.items():
            peer = Peer(argv, env, cwd=scratch.ws)
            peer.close()
            if n:
                ready[name].append(peer.ready)
    print(f"the time server, spawn to `initialize` answered, median of {starts}, alternating")
    print_medians(ready, "bare")
    peers = {name: Peer(argv, env, cwd=scratch.ws) for name, argv in variants.items()}
    took: dict[str, list[float]] = {name: [] for name in variants}
    for i in range(warm + calls):
        for name, peer in peers.items():
            t = peer.call(tool, arguments)
            if i >= warm:
                took[name].append(t)
    for peer in peers.values():
        peer.close()
    print(f"per call, {calls} calls each, alternating call by call, after {warm} warm-up calls")
    print_medians(took, "bare", digits=3)
    scratch.remove()
    base_ready, base_call = statistics.median(ready["bare"]), statistics.median(took["bare"])
    return "; ".join(
        f"{name} {(statistics.median(ready[name]) - base_ready) * 1000:+.0f} ms start, "
        f"{(statistics.median(took[name]) - base_call) * 1000:+.2f} ms/call"
        for name in variants
        if name != "bare"
    )
