#!/usr/bin/env python3
"""Egress proxy cost: latency and throughput of HTTP downloads, direct vs through the proxy.

A local web server stands in for the internet. Three ways to reach it, alternating request
by request so machine noise hits all alike:

  direct   a TCP connection to the server
  proxy    the egress proxy's unix socket (as `ironcurtain run` runs it, checks included)
  bridged  127.0.0.1 -> the in-sandbox bridge (netbridge.py) -> the proxy: the whole path a
           sandboxed server's HTTP client takes

Each request opens a new connection (the proxy serves one request per connection). Read
the ratios, not the absolute times. Usage: bench_egress.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchlib import print_medians  # noqa: E402

from launcher.servers.egress_proxy import EgressProxy  # noqa: E402
from policy.egress import EgressRules  # noqa: E402

BIG = os.urandom(1 << 20) * 32  # 32 MiB


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def do_GET(self) -> None:
        body = BIG if self.path == "/big" else b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def fetch(connect: socket.socket, request: bytes) -> int:
    with connect as sock:
        sock.sendall(request)
        total = 0
        while chunk := sock.recv(1 << 18):
            total += len(chunk)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    opts = parser.parse_args()
    small_n, big_n = (100, 2) if opts.quick else (1000, 8)

    web = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    port = web.server_address[1]
    scratch = tempfile.mkdtemp(prefix="ironcurtain-bench-")
    sock_path = os.path.join(scratch, "egress.sock")
    rules = EgressRules.from_config(["bench.test"], [], {"bench.test": "127.0.0.1"})

    loop = asyncio.new_event_loop()
    proxy = EgressProxy("bench", rules, sock_path, lambda r: None)
    threading.Thread(target=loop.run_forever, daemon=True).start()
    asyncio.run_coroutine_threadsafe(proxy.start(), loop).result()

    bridge_port = 39128
    bridge = subprocess.Popen(
        [
            sys.executable,
            "-I",
            "-S",
            os.path.join(ROOT, "sandbox_profiles", "netbridge.py"),
            str(bridge_port),
            sock_path,
            "--",
            "sleep",
            "3600",
        ],
        start_new_session=True,
    )
    time.sleep(0.3)

    def direct(path: str) -> int:
        sock = socket.create_connection(("127.0.0.1", port))
        return fetch(sock, f"GET {path} HTTP/1.0\r\nHost: bench.test\r\n\r\n".encode())

    def through_proxy(path: str) -> bytes:
        target = f"http://bench.test:{port}{path}"
        return f"GET {target} HTTP/1.0\r\nHost: bench.test:{port}\r\n\r\n".encode()

    def proxied(path: str) -> int:
        sock = socket.socket(socket.AF_UNIX)
        sock.connect(sock_path)
        return fetch(sock, through_proxy(path))

    def bridged(path: str) -> int:
        return fetch(socket.create_connection(("127.0.0.1", bridge_port)), through_proxy(path))

    variants = {"direct": direct, "proxy": proxied, "bridged": bridged}
    latency: dict[str, list[float]] = {k: [] for k in variants}
    for i in range(small_n + 20):
        for name, get in variants.items():
            start = time.perf_counter()
            assert get("/small") > 0
            if i >= 20:  # warm-up
                latency[name].append(time.perf_counter() - start)
    rate: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(big_n):
        for name, get in variants.items():
            start = time.perf_counter()
            size = get("/big")
            rate[name].append(size / (time.perf_counter() - start) / 2**20)

    os.killpg(bridge.pid, signal.SIGKILL)  # the server stand-in and the relay
    asyncio.run_coroutine_threadsafe(proxy.stop(), loop).result()
    web.shutdown()

    base_rate = statistics.median(rate["direct"])
    print(f"small GET (new connection each), median of {small_n}, alternating")
    print_medians(latency, "direct", width=8, digits=3)
    print(f"\n32 MiB download, median of {big_n}, alternating")
    for name, values in rate.items():
        med = statistics.median(values)
        print(f"  {name:8} {med:8.1f} MiB/s  ratio {med / base_rate:.2f}x")


if __name__ == "__main__":
    main()
