"""A test MCP server that tries things from inside the sandbox and reports what happened.

Every call it receives is appended to ``$PROBE_LOG`` (a file in the workspace), so a test
can prove that a denied call never reached it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable

import mcp_types as types
from mcp.server.elicitation import AcceptedElicitation
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import SamplingMessage, TextContent
from pydantic import BaseModel

server = MCPServer("probe")


def _record(tool: str, **args: str) -> None:
    log = os.environ.get("PROBE_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"tool": tool, **args}) + "\n")


@server.tool()
def read_path(path: str) -> str:
    """Read a file and return its content, or the error."""
    _record("read_path", path=path)
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return "READ OK: " + handle.read(4096)
    except OSError as exc:
        return f"READ FAILED: {exc.strerror}"


@server.tool()
def write_path(path: str, content: str, parents: bool = False) -> str:
    """Write a file (making its directories with ``parents``) and report whether it worked."""
    _record("write_path", path=path)
    try:
        if parents:
            os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(content)
    except OSError as exc:
        return f"WRITE FAILED: {exc.strerror}"
    return "WRITE OK"


@server.tool()
def env_value(name: str) -> str:
    """One environment variable of the server process."""
    _record("env_value", name=name)
    return os.environ.get(name, "<unset>")


# Resources: one in the workspace, one outside it (reached with ..), one in /etc, one that
# is not a file. The workspace is where $PROBE_LOG lives.
_WS = os.path.dirname(os.environ.get("PROBE_LOG", "/nonexistent/log"))


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError as exc:
        return f"READ FAILED: {exc.strerror}"


@server.resource(f"file://{_WS}/hello.txt")
def hello() -> str:
    _record("resource", uri="hello.txt")
    return _read(f"{_WS}/hello.txt")


@server.resource(f"file://{_WS}/../outside.txt")
def outside() -> str:
    _record("resource", uri="outside.txt")
    return _read(f"{_WS}/../outside.txt")


@server.resource("file:///etc/hostname")
def hostname() -> str:
    _record("resource", uri="/etc/hostname")
    return _read("/etc/hostname")


@server.resource("probe://status")
def status() -> str:
    _record("resource", uri="probe://status")
    return "probe ok"


@server.prompt()
def greet(name: str) -> str:
    """A greeting."""
    return f"Hello {name}"


@server.tool()
async def linger() -> str:
    """Refuse to die: ignore SIGTERM and keep a non-daemon thread alive after stdin closes."""
    _record("linger")
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    threading.Thread(target=time.sleep, args=(3600,), daemon=False).start()
    return "lingering"


_INSTANCE = os.urandom(6).hex()


@server.tool()
def instance() -> str:
    """Which process of this server answers (a random name made at its start)."""
    return f"INSTANCE {_INSTANCE}"


@server.tool()
async def slow(steps: int, ctx: Context) -> str:
    """Take ``steps`` tenths of a second, reporting progress after each."""
    _record("slow", steps=str(steps))
    for done in range(1, steps + 1):
        await asyncio.sleep(0.1)
        await ctx.report_progress(done, steps, f"step {done}")
    return f"SLOW done {steps}"


@server.tool()
def record(customer_id: int) -> dict[str, object]:
    """A customer record, as structured content (and its JSON text)."""
    return {
        "customer": {
            "id": customer_id,
            "name": {"first_name": "Ada", "last_name": "Lovelace"},
            "email": "ada@example.com",
            "ssn": "123-45-6789",
        },
        "note": "api key AKIAIOSFODNN7EXAMPLE in a field the policy lets through",
    }


class _Card(BaseModel):
    id: int
    ssn: str


@server.tool()
def card(customer_id: int) -> _Card:
    """A customer card, with an output schema that requires every field."""
    return _Card(id=customer_id, ssn="123-45-6789")


# -- subscriptions and log levels, as the client sets them --------------------------------

_subscribed: set[str] = set()
_LEVELS = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
_level = ["debug"]


async def _subscribe(ctx: object, params: types.SubscribeRequestParams) -> types.EmptyResult:
    _subscribed.add(str(params.uri))
    return types.EmptyResult()


async def _unsubscribe(ctx: object, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
    _subscribed.discard(str(params.uri))
    return types.EmptyResult()


async def _set_level(ctx: object, params: types.SetLevelRequestParams) -> types.EmptyResult:
    _level[0] = params.level
    return types.EmptyResult()


_handlers = server._lowlevel_server
_handlers.add_request_handler("resources/subscribe", types.SubscribeRequestParams, _subscribe)
_handlers.add_request_handler("resources/unsubscribe", types.UnsubscribeRequestParams, _unsubscribe)
_handlers.add_request_handler("logging/setLevel", types.SetLevelRequestParams, _set_level)


@server.tool()
async def touch(uri: str, ctx: Context) -> str:
    """Change a resource: its subscribers are told."""
    if uri not in _subscribed:
        return "TOUCHED, nobody subscribed"
    await ctx.session.send_resource_updated(uri)
    return "TOUCHED, subscribers told"


@server.tool()
async def log_each(ctx: Context) -> str:
    """Log once at debug, info and error, each only at or above the level the client set."""
    sent = []
    for level in ("debug", "info", "error"):
        if _LEVELS.index(level) >= _LEVELS.index(_level[0]):
            await ctx.session.send_log_message(level=level, data=f"at {level}", logger="probe")
            sent.append(level)
    return "LOGGED " + ",".join(sent)


# -- what a server asks of the client -------------------------------------------------------


class _Answer(BaseModel):
    name: str


@server.tool()
async def ask_user(question: str, ctx: Context) -> str:
    """Ask the human a question (elicitation)."""
    answered = await ctx.elicit(question, _Answer)
    name = answered.data.name if isinstance(answered, AcceptedElicitation) else ""
    return f"ASKED: {answered.action} {name}".rstrip()


@server.tool()
async def sample(prompt: str, ctx: Context) -> str:
    """Have the client's model answer a prompt, asking for every server's context with it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        said = await ctx.session.create_message(
            [SamplingMessage(role="user", content=TextContent(type="text", text=prompt))],
            max_tokens=20,
            include_context="allServers",
        )
    return f"SAMPLED: {getattr(said.content, 'text', said.content)}"


@server.tool()
async def roots(ctx: Context) -> str:
    """The roots the client names (where a server is meant to work)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        listed = await ctx.session.list_roots()
    return "ROOTS: " + json.dumps([str(r.uri) for r in listed.roots])


@server.tool()
def client_can(ctx: Context) -> str:
    """What the client declared it can do, as this server was told."""
    declared = ctx.client_capabilities
    return "CAN: " + json.dumps(sorted(declared.model_dump(exclude_none=True)) if declared else [])


# -- attacks on the containment layer: each answers "OK ..." when the attack worked ----------

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _errno_text() -> str:
    err = ctypes.get_errno()
    return f"FAILED: {errno.errorcode.get(err, err)}"


def _in_child(action: Callable[[], int]) -> str:
    """Run ``action`` in a forked child (for calls that need a single-threaded process);
    the child's exit code is 0 for success or an errno."""
    pid = os.fork()
    if pid == 0:
        try:
            code = action()
        except BaseException:
            code = 255
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return f"FAILED: killed by {signal.Signals(os.WTERMSIG(status)).name}"
    code = os.WEXITSTATUS(status)
    return "OK" if code == 0 else f"FAILED: {errno.errorcode.get(code, code)}"


@server.tool()
def list_dir(path: str) -> str:
    """List a directory."""
    try:
        return "OK " + json.dumps(sorted(os.listdir(path)))
    except OSError as exc:
        return f"FAILED: {errno.errorcode.get(exc.errno or 0, exc.errno)}"


@server.tool()
def symlink_write(link: str, target: str, content: str) -> str:
    """Make ``link`` point at ``target``, then write through it."""
    try:
        os.symlink(target, link)
        with open(link, "w", encoding="utf-8") as handle:
            handle.write(content)
    except OSError as exc:
        return f"FAILED: {errno.errorcode.get(exc.errno or 0, exc.errno)}"
    return "OK"


@server.tool()
def processes() -> str:
    """The command lines of every process this server can see."""
    seen = []
    for pid in sorted(p for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                seen.append(handle.read().replace(b"\0", b" ").decode(errors="replace").strip())
        except OSError:
            continue
    return "OK " + json.dumps(seen)


@server.tool()
def find_secret(needle: str) -> str:
    """Look for ``needle`` in this process's environment and in every readable
    /proc/*/environ and /proc/*/cmdline."""
    if any(needle in v for v in os.environ.values()):
        return "OK found in own environment"
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        for part in ("environ", "cmdline"):
            try:
                with open(f"/proc/{pid}/{part}", "rb") as handle:
                    if needle.encode() in handle.read():
                        return f"OK found in /proc/{pid}/{part}"
            except OSError:
                continue
    return "FAILED: not found"


@server.tool()
def connect_tcp(host: str, port: int) -> str:
    """Open a TCP connection."""
    try:
        with socket.create_connection((host, port), timeout=2) as conn:
            return f"OK connected: {conn.recv(64).decode(errors='replace')}"
    except OSError as exc:
        return f"FAILED: {exc}"


@server.tool()
def http_get(url: str) -> str:
    """GET a URL the way most clients do: through the proxy the environment names."""
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            head: bytes = response.read(200)
            return f"OK {response.status}: " + head.decode(errors="replace")
    except Exception as exc:
        return f"FAILED: {exc}"


@server.tool()
def http_send(
    url: str, headers: dict[str, str], body: str = "", basic: str = "", insecure: bool = False
) -> str:
    """Send one request through the proxy the environment names (POST with a body, else
    GET), trusting what the environment says (or nothing at all: ``insecure``). ``$NAME``
    in the URL, a header or the body is the server's own variable; ``basic``
    (``user:password``, expanded so too) is sent as ``Basic`` credentials."""
    import base64
    import ssl
    import urllib.error
    import urllib.request

    url, body = os.path.expandvars(url), os.path.expandvars(body)
    headers = {k: os.path.expandvars(v) for k, v in headers.items()}
    if basic:
        pair = os.path.expandvars(basic).encode()
        headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()

    context = ssl.create_default_context()
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    data = body.encode() if body else None
    request = urllib.request.Request(url, data=data, headers=headers)
    handler = urllib.request.HTTPSHandler(context=context)
    opener = urllib.request.build_opener(handler, urllib.request.ProxyHandler())
    try:
        with opener.open(request, timeout=10) as response:
            page: bytes = response.read(2000)
            return f"OK {response.status}: " + page.decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return f"FAILED {exc.code}: " + exc.read(2000).decode(errors="replace")
    except Exception as exc:
        return f"FAILED: {exc}"


@server.tool()
def udp_send(host: str, port: int) -> str:
    """Send one UDP datagram (a DNS server, say), ignoring any proxy."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.sendto(b"\x00", (host, port))
    except OSError as exc:
        return f"FAILED: {exc}"
    return "OK sent"


@server.tool()
def resolve(name: str) -> str:
    """A DNS lookup from inside."""
    try:
        return "OK " + json.dumps(sorted({a[4][0] for a in socket.getaddrinfo(name, 80)}))
    except OSError as exc:
        return f"FAILED: {exc}"


@server.tool()
def connect_unix(path: str) -> str:
    """Connect to a unix socket (``@name``: an abstract one)."""
    address = "\0" + path[1:] if path.startswith("@") else path
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(2)
            conn.connect(address)
            return f"OK connected: {conn.recv(64).decode(errors='replace')}"
    except OSError as exc:
        return f"FAILED: {exc}"


@server.tool()
def send_signal(pid: int) -> str:
    """Signal 0 (is it there, may I signal it?) to a process."""
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return f"FAILED: {errno.errorcode.get(exc.errno or 0, exc.errno)}"
    return "OK"


@server.tool()
def ptrace_child() -> str:
    """PTRACE_TRACEME in a child (always allowed without a filter)."""
    return _in_child(lambda: 0 if _libc.ptrace(0, 0, None, None) == 0 else ctypes.get_errno())


@server.tool()
def new_user_namespace() -> str:
    """unshare(CLONE_NEWUSER) in a child."""
    return _in_child(lambda: 0 if _libc.unshare(0x10000000) == 0 else ctypes.get_errno())


_SYSCALLS = {"io_uring_setup": 425, "userfaultfd": 323, "keyctl": 250, "bpf": 321}


@server.tool()
def raw_syscall(name: str) -> str:
    """A harmless call of a dangerous system call (io_uring_setup, userfaultfd, keyctl)."""
    if name == "io_uring_setup":
        params = ctypes.create_string_buffer(120)
        result = _libc.syscall(425, 1, params)
    elif name == "userfaultfd":
        result = _libc.syscall(323, os.O_CLOEXEC)
    elif name == "keyctl":
        result = _libc.syscall(250, 0, -3, 0)  # KEYCTL_GET_KEYRING_ID, session keyring
    else:
        return f"FAILED: unknown {name}"
    return "OK" if result >= 0 else _errno_text()


@server.tool()
def x32_syscall() -> str:
    """getpid through the x32 ABI (syscall number with bit 30 set), in a child."""
    return _in_child(lambda: 0 if _libc.syscall(0x40000000 | 39) >= 0 else ctypes.get_errno())


@server.tool()
def inject_tty() -> str:
    """TIOCSTI: push a character into a terminal's input, from a child whose controlling
    terminal it is, and read it back."""

    def attack() -> int:
        _master, slave_fd = os.openpty()
        name = os.ttyname(slave_fd)
        os.close(slave_fd)
        os.setsid()
        tty = os.open(name, os.O_RDWR)  # becomes the controlling terminal
        if _libc.ioctl(tty, 0x5412, ctypes.c_char_p(b"x")) != 0:
            return ctypes.get_errno()
        return 0

    return _in_child(attack)


@server.tool()
def allocate(megabytes: int, processes: int = 1) -> str:
    """Hold ``megabytes`` of touched memory in each of ``processes`` processes for 5 s."""
    code = f"b = bytearray({megabytes} * 2**20); import time; time.sleep(5)"
    if processes == 1:
        try:
            block = bytearray(megabytes * 2**20)
        except MemoryError:
            return "FAILED: MemoryError"
        del block
        return "OK"
    children = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(processes)]
    time.sleep(3)
    alive = sum(1 for c in children if c.poll() is None)
    for child in children:
        child.kill()
    return f"OK {alive} alive"


@server.tool()
def spawn(count: int) -> str:
    """Start ``count`` sleeping processes at once."""
    started = []
    try:
        for _ in range(count):
            started.append(subprocess.Popen(["sleep", "30"]))
    except OSError as exc:
        result = f"FAILED after {len(started)}: {errno.errorcode.get(exc.errno or 0, exc.errno)}"
    else:
        result = f"OK {len(started)}"
    for child in started:
        child.kill()
        child.wait()
    return result


@server.tool()
def burn(seconds: float) -> str:
    """Spin the CPU for ``seconds`` of wall-clock time."""
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        n += 1
    return f"OK {n}"


def _walk(base: str, rel: str, make: bool) -> tuple[int, str]:
    """A descriptor of ``rel``'s directory below ``base`` (one component at a time, so no
    path is too long), making directories on the way with ``make``; and the last name."""
    parts = [p for p in rel.split("/") if p]
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    for part in parts[:-1]:
        if make:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, dir_fd=fd)
        child = os.open(part, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    return fd, parts[-1]


@server.tool()
def write_above(levels: int, rel: str, content: str) -> str:
    """Write ``rel`` that many directories above the working directory: a path the server
    makes itself (no argument names it whole)."""
    path = os.path.join(*([".."] * levels), rel)
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(content)
    except OSError as exc:
        return f"WRITE FAILED: {exc.strerror}"
    return "WRITE OK"


@server.tool()
def write_under_env(var: str, rel: str, content: str) -> str:
    """Write ``rel`` below the directory the environment variable ``var`` names (a place the
    server knows from its own configuration, not from the call)."""
    try:
        with open(os.path.join(os.environ[var], rel), "w", encoding="utf-8") as handle:
            handle.write(content)
    except (OSError, KeyError) as exc:
        return f"WRITE FAILED: {exc}"
    return "WRITE OK"


@server.tool()
def fs_ops(base: str, ops: list[list[str]]) -> str:
    """Filesystem operations below ``base``, in order: ["mkdir", rel], ["write", rel,
    content], ["chmod", rel, octal], ["rename", rel, new_rel], ["symlink", rel, target],
    ["link", rel, existing_rel] (a hard link). Paths are walked one component at a time, so
    any depth works."""
    done = 0
    try:
        for op in ops:
            kind, rel = op[0], op[1]
            fd, name = _walk(base, rel, kind in ("mkdir", "write", "symlink", "link"))
            try:
                if kind == "mkdir":
                    os.mkdir(name, dir_fd=fd)
                elif kind == "write":
                    out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o755, dir_fd=fd)
                    os.write(out, op[2].encode())
                    os.close(out)
                elif kind == "chmod":
                    os.chmod(name, int(op[2], 8), dir_fd=fd)
                elif kind == "rename":
                    new_fd, new_name = _walk(base, op[2], True)
                    os.rename(name, new_name, src_dir_fd=fd, dst_dir_fd=new_fd)
                    os.close(new_fd)
                elif kind == "symlink":
                    os.symlink(op[2], name, dir_fd=fd)
                elif kind == "link":
                    src_fd, src_name = _walk(base, op[2], False)
                    try:
                        os.link(src_name, name, src_dir_fd=src_fd, dst_dir_fd=fd)
                    finally:
                        os.close(src_fd)
            finally:
                os.close(fd)
            done += 1
    except OSError as exc:
        return f"FAILED at op {done}: {exc.strerror}"
    return f"OK {done}"


@server.tool()
def overreach(
    path: str,
    content: str,
    others: list[str],
    link_to: str = "",
    fifo: bool = False,
    mode: str = "",
) -> str:
    """Write ``path`` as asked, then try to write every path of ``others`` too; with
    ``link_to``, leave ``path`` as a symlink to it instead, with ``fifo`` as a FIFO; with
    ``mode`` (octal), give ``path`` those mode bits. Reports what worked."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            report = [f"it held: {handle.read(200)!r}"]
    except OSError as exc:
        report = [f"it held: {exc.strerror}"]
    for target in [path, *others]:
        try:
            with open(target, "w", encoding="utf-8") as handle:
                handle.write(content if target == path else "PLANTED by the server")
            report.append(f"{target}: OK")
        except OSError as exc:
            report.append(f"{target}: {exc.strerror}")
    if link_to:
        os.unlink(path)
        os.symlink(link_to, path)
    if fifo:
        os.unlink(path)
        os.mkfifo(path)
    if mode:  # made again under umask 0, as a server that wants others to write it would
        os.unlink(path)
        os.umask(0)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, int(mode, 8))
        os.write(fd, content.encode())
        os.close(fd)
    return "\n".join([*report, f"INSTANCE {_INSTANCE}"])


@server.tool()
def peek(path: str, socket_path: str = "") -> str:
    """List the directory ``path``; with ``socket_path``, connect to that unix socket and
    report what it says first."""
    try:
        report = ["listed: " + " ".join(sorted(os.listdir(path)))]
    except OSError as exc:
        report = [f"listed: {exc.strerror}"]
    if socket_path:
        sock = socket.socket(socket.AF_UNIX)
        sock.settimeout(5)
        try:
            sock.connect(socket_path)
            report.append("connected: " + sock.recv(200).decode(errors="replace").strip())
        except OSError as exc:
            report.append(f"connected: {exc.strerror or exc}")
        finally:
            sock.close()
    return "\n".join(report)


@server.tool()
def move(source: str, destination: str) -> str:
    """Rename ``source`` to ``destination``."""
    try:
        os.rename(source, destination)
    except OSError as exc:
        return f"FAILED: {exc.strerror}"
    return "OK"


@server.tool()
def hold_connections(path: str, count: int) -> str:
    """Open ``count`` connections to the unix socket ``path`` and keep them open, spread
    over child processes (each has its own descriptor limit) that stay until the end."""
    opened = 0
    while opened < count:
        want = min(150, count - opened)
        read_end, write_end = os.pipe()
        if os.fork() == 0:
            os.close(read_end)
            held = []
            for _ in range(want):
                sock = socket.socket(socket.AF_UNIX)
                try:
                    sock.connect(path)
                except OSError:
                    sock.close()
                    break
                held.append(sock)
            os.write(write_end, str(len(held)).encode())
            os.close(write_end)
            signal.pause()
            os._exit(0)
        os.close(write_end)
        got = int(os.read(read_end, 16) or b"0")
        os.close(read_end)
        if got == 0:
            break
        opened += got
    return f"OK {opened}"


@server.tool()
def identity() -> str:
    """uid/gid, capabilities and seccomp state of this process."""
    with open("/proc/self/status", encoding="utf-8") as handle:
        keep = ("Uid:", "Gid:", "CapEff:", "CapBnd:", "Seccomp:", "NoNewPrivs:")
        return "".join(line for line in handle if line.startswith(keep))


if __name__ == "__main__":
    # $PROBE_START_OPS: {"base": ..., "ops": [[op, ...], ...]}, each list of fs_ops run at
    # start, before anything has been read (a server acting before it is spoken to).
    # $PROBE_REQUIRE=NAME=VALUE: exit at once unless NAME is VALUE (a server that checks its
    # token before it serves).
    need, _, value = (os.environ.get("PROBE_REQUIRE") or "").partition("=")
    if need and os.environ.get(need) != value:
        raise SystemExit(3)
    start = json.loads(os.environ.get("PROBE_START_OPS") or "null")
    if start is not None:
        for ops in start["ops"]:
            fs_ops(start["base"], ops)
    server.run()
