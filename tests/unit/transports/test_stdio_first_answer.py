"""The client's stdio: a request already waiting when the session opens (a client of the
stateless era sends ``tools/list`` at once, without a handshake) gets its whole answer,
however long, while the client is not yet reading."""

from __future__ import annotations

import json
import subprocess
import sys

# The answer is several times a pipe's capacity (64 KiB): it cannot be written at once.
CHILD = """
import asyncio, sys
from launcher.transports.stdio import StdioTransport

async def main():
    done = asyncio.Event()
    def feed(line):
        transport.deliver({"jsonrpc": "2.0", "id": 1, "result": {"blob": "x" * 300_000}})
        print("delivered", file=sys.stderr, flush=True)
        done.set()
    transport = StdioTransport(feed, done.set)
    await transport.open()
    await done.wait()
    await transport.close()

asyncio.run(main())
"""


def test_a_long_answer_to_a_request_waiting_at_start_reaches_a_slow_reader_whole() -> None:
    """The request is on stdin before the transport opens; the parent reads nothing until
    the child says it has handed the answer on. Before the fix, the answer went out on the
    direct path to a stdout the pipe transport had already made non-blocking: the write
    failed past the pipe's capacity (``BlockingIOError``) and the client got a line cut off
    mid-message, then nothing (a client waiting for it waits for ever)."""
    with subprocess.Popen(
        [sys.executable, "-c", CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as child:
        assert child.stdin and child.stdout and child.stderr
        child.stdin.write(b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}\n')
        child.stdin.flush()
        said = child.stderr.readline()  # "delivered", or the first line of the traceback
        out = child.stdout.read()
        rest = child.stderr.read()
        child.stdin.close()
        assert child.wait(timeout=30) == 0, (said + rest).decode()
    assert said == b"delivered\n", (said + rest).decode()
    lines = out.splitlines()
    assert len(lines) == 1
    assert json.loads(lines[0])["result"]["blob"] == "x" * 300_000
