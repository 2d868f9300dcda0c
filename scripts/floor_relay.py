#!/usr/bin/env python3
"""A stdio relay that does nothing but copy bytes between its client and one server (the
command line after it), on an asyncio event loop as ironcurtain's is: what any proxy on
stdio costs on this machine (two more pipe hops, each waking a process), for `bench.py
calls` to set ironcurtain's added time against.

Usage: floor_relay.py COMMAND [ARG ...]
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys


async def relay(argv: list[str]) -> int:
    loop = asyncio.get_running_loop()
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    to_server, from_server = proc.stdin.fileno(), proc.stdout.fileno()
    client_in, client_out = sys.stdin.fileno(), sys.stdout.fileno()
    os.set_blocking(client_in, False)
    os.set_blocking(from_server, False)
    finished: asyncio.Future[None] = loop.create_future()

    def copy(source: int, target: int) -> None:
        try:
            data = os.read(source, 1 << 16)
        except BlockingIOError:
            return
        if not data:
            loop.remove_reader(source)
            if source == client_in:
                proc.stdin.close()  # type: ignore[union-attr]
            elif not finished.done():
                finished.set_result(None)
            return
        view = memoryview(data)
        while view:  # the targets are blocking: a full pipe waits, as a proxy's would
            view = view[os.write(target, view) :]

    loop.add_reader(client_in, copy, client_in, to_server)
    loop.add_reader(from_server, copy, from_server, client_out)
    await finished
    return proc.wait()


if __name__ == "__main__":
    sys.exit(asyncio.run(relay(sys.argv[1:])))
