"""Whether a client entry could ever start in ironcurtain's sandbox, judged before it is
wrapped: one that could not is left alone, with the reason, rather than moved into a
definition that fails at every start.

- A container runner (``docker run ...``, podman, nerdctl) starts the server through a
  daemon or its own user namespaces: the daemon's socket would hand the server every file
  of this host as root, and no sandbox gives it. The container is the server's isolation;
  ironcurtain's policy would not see its calls.
- A relative program (``./bin/server``), or an interpreter's relative script (``node
  ./server.js``, ``python3 server.py``), is found from the directory the client starts the
  entry in. Where that is not known (a user-level entry, or a client that starts servers in
  a directory of its own, with no absolute ``cwd``), the sandbox could not find it. Where it
  is known (a project's entry, for a client that starts it in the project), the definition
  gets its full path (:func:`script_index` says which argument).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from launcher.clients.catalogue.known import ClientFile, Entry

CONTAINER_RUNNERS = frozenset({"docker", "podman", "nerdctl", "finch", "docker-compose"})
# Programs that run the script named by their first argument that is not an option.
INTERPRETERS = re.compile(
    r"(node|nodejs|bun|deno|tsx|ts-node|python[0-9.]*|pypy[0-9.]*|ruby|perl|php|bash|sh|zsh)"
)
_SCRIPT = re.compile(r".+\.(js|mjs|cjs|ts|mts|py|rb|pl|php|sh)")


def relative(value: str) -> bool:
    """Whether ``value`` is a path found from the working directory (not a bare program
    name looked up on PATH, not absolute, not from the home or a variable)."""
    return not value.startswith(("/", "~", "$")) and ("/" in value or value in (".", ".."))


def base_of(f: ClientFile, e: Entry) -> Path | None:
    """The directory the client starts the entry in, where it is known."""
    if e.cwd and os.path.isabs(e.cwd):
        return Path(e.cwd)
    if f.client.cwd == "project" and f.project is not None and f.scope != "user":
        return f.project
    return None


def script_index(e: Entry) -> int | None:
    """Which of the entry's arguments is the script its interpreter runs (None: none)."""
    if not INTERPRETERS.fullmatch(Path(e.command or "").name):
        return None
    for index, arg in enumerate(e.args):
        if arg in ("run", "-m", "-c", "-e", "--eval"):
            if arg == "run":  # deno run X, bun run X
                continue
            return None  # a module or inline code, not a file
        if arg.startswith("-"):
            continue
        return index if _SCRIPT.fullmatch(arg) or arg.startswith(("./", "../")) else None
    return None


def unrunnable(f: ClientFile, e: Entry) -> str | None:
    """Why the entry could never start in a sandbox (None: it could)."""
    program = Path(e.command or "").name
    if program in CONTAINER_RUNNERS:
        return (
            f"`{program}` starts the server in a container, through a daemon or user "
            "namespaces no sandbox gives (the docker socket would hand it this host as root); "
            "the container is its own isolation, and ironcurtain's policy would not see its "
            "calls"
        )
    if base_of(f, e) is not None:
        return None
    where = (
        "the directory the client starts this entry in is not known (name it by its full "
        "path, or give the entry an absolute cwd, and wrap again)"
    )
    if relative(e.command or ""):
        return f"its command {e.command} is relative, and {where}"
    index = script_index(e)
    if index is not None and not e.args[index].startswith(("/", "~", "$")):
        return f"its script {e.args[index]} is relative, and {where}"
    return None
