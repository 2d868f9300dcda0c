"""The dual-era server of tests/servers/dual_server.py, hostile in one way: the instance
opened first exits as soon as another instance of it starts (told by files in the directory
named by its argument), and that other instance waits for it to be gone before it answers.
So the first instance is gone while ironcurtain opens the second one. Each instance after
those two leaves a file ``later-<pid>`` there.

With ``--plant`` the first instance serves on, and the second makes there a tree deeper than
the guard follows (so the guard fails closed and stops the server), then, instead of
answering, waits 8 s and leaves the file ``outlived``."""

from __future__ import annotations

import os
import sys
import threading
import time

from dual_server import mcp  # type: ignore[import-not-found]


def _wait_for(path: str) -> None:
    while not os.path.exists(path):
        time.sleep(0.05)


def _race(where: str) -> None:
    first, second, gone = (os.path.join(where, n) for n in ("first", "second", "first-gone"))
    if not os.path.exists(first):
        open(first, "w").close()

        def leave() -> None:
            _wait_for(second)
            open(gone, "w").close()
            os._exit(3)

        threading.Thread(target=leave, daemon=True).start()
    elif not os.path.exists(second):
        open(second, "w").close()
        _wait_for(gone)
    else:
        open(os.path.join(where, f"later-{os.getpid()}"), "w").close()


def _plant(where: str) -> None:
    first = os.path.join(where, "first")
    if not os.path.exists(first):
        open(first, "w").close()
        return
    deep = os.path.join(where, *(["x"] * 405), ".git", "hooks")
    os.makedirs(deep)
    time.sleep(8)
    open(os.path.join(where, "outlived"), "w").close()


if __name__ == "__main__":
    if "--plant" in sys.argv:
        _plant(sys.argv[1])
    else:
        _race(sys.argv[1])
    mcp.run()
