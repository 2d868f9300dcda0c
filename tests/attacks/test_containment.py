"""The containment layer alone against a hostile server.

The probe server (tests/servers/probe_server.py) runs under a policy that allows every call
and treats every argument as opaque, so nothing but the OS sandbox stands in its way. Every
attack runs twice, in one session each: sandboxed, where it must fail, and with the sandbox
switched off (``sandbox: false``), where it must succeed, which shows that the probe really
tries and that it is the sandbox that stops it.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support.home import Home, make_home
from tests.support.marks import needs_bwrap
from tests.support.probe import probe_server_config, run_probe

pytestmark = needs_bwrap
ROOT = os.geteuid() == 0


@dataclass
class World:
    """What the attacks aim at: the caller's home and secrets, host sockets, the launcher."""

    user: Home
    ws: Path
    outside: Path
    tcp_port: int
    unix_path: Path
    abstract_name: str
    launcher_pid: int = 0
    results: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Attack:
    id: str
    tool: str
    args: Callable[[World], dict[str, Any]]
    # Did the attack work? Judged from the probe's answer and the world afterwards.
    worked: Callable[[World, str], bool]
    # Whether the unsandboxed control run can show the attack working on this machine
    # (some need root even without a sandbox); attacks it cannot show are not run there.
    bare_can_work: bool = True
    # Whether the sandboxed run tests anything here (the uid switch exists only for root).
    sandboxed_applies: bool = True


def _starts_ok(_: World, text: str) -> bool:
    return text.startswith(("OK", "READ OK", "WRITE OK"))


def _exists(rel: str) -> Callable[[World, str], bool]:
    return lambda w, text: text == "WRITE OK" and (w.ws / rel).exists()


def _legacy_tiocsti_off() -> bool:
    try:
        return Path("/proc/sys/dev/tty/legacy_tiocsti").read_text().strip() == "0"
    except OSError:
        return False


ATTACKS = [
    Attack(
        "read-ssh-key",
        "read_path",
        lambda w: {"path": f"{w.user.home}/.ssh/id_rsa"},
        lambda w, t: w.user.secret in t,
    ),
    Attack("list-home", "list_dir", lambda w: {"path": str(w.user.home)}, _starts_ok),
    Attack(
        "read-root-home",
        "read_path",
        lambda w: {"path": "/root/.profile"},
        lambda w, t: t.startswith("READ OK"),
        bare_can_work=ROOT and os.path.exists("/root/.profile"),
    ),
    # Both are shown to the server (allowRead): only the uid it runs as keeps them closed.
    Attack(
        "read-root-only-file-shown",
        "read_path",
        lambda w: {"path": str(w.user.root / "root-only" / "token")},
        lambda w, t: "root-only-token" in t,
        bare_can_work=ROOT,
        sandboxed_applies=ROOT,  # as an ordinary user, the caller owns it and may read it
    ),
    Attack(
        "read-etc-shadow-shown",
        "read_path",
        lambda w: {"path": "/etc/shadow"},
        lambda w, t: "root:" in t,
        bare_can_work=ROOT,
    ),
    Attack(
        "read-launcher-environ",
        "read_path",
        lambda w: {"path": f"/proc/{w.launcher_pid}/environ"},
        lambda w, t: w.user.secret in t,
    ),
    Attack(
        "read-proc-1-environ",
        "read_path",
        lambda w: {"path": "/proc/1/environ"},
        lambda w, t: t.startswith("READ OK") and "PROBE_LOG" not in t,
        # The host's pid 1 can be unreadable even to root (in a VM, say): the control for
        # reading another process's environment is read-launcher-environ.
        bare_can_work=False,
    ),
    Attack(
        "launcher-root-fs",
        "list_dir",
        lambda w: {"path": f"/proc/{w.launcher_pid}/root/etc"},
        lambda w, t: "shadow" in t,
    ),
    Attack(
        "see-host-processes",
        "processes",
        lambda w: {},
        lambda w, t: any(
            not p.startswith("/usr/bin/bwrap") and "probe_server.py" not in p
            for p in json.loads(t[3:] if t.startswith("OK ") else "[]")
        ),
    ),
    Attack(
        "write-outside",
        "write_path",
        lambda w: {"path": str(w.outside / "dropped.txt"), "content": "x"},
        lambda w, t: (w.outside / "dropped.txt").exists(),
    ),
    Attack(
        "new-git-hook",
        "write_path",
        lambda w: {"path": f"{w.ws}/.git/hooks/pre-commit", "content": "evil", "parents": True},
        _exists(".git/hooks/pre-commit"),
    ),
    Attack(
        "new-git-hook-deep",
        "write_path",
        lambda w: {
            "path": f"{w.ws}/a/b/c/d/.git/hooks/post-checkout",
            "content": "evil",
            "parents": True,
        },
        _exists("a/b/c/d/.git/hooks/post-checkout"),
    ),
    Attack(
        "existing-git-hook-deep",
        "write_path",
        lambda w: {"path": f"{w.ws}/repo/.git/hooks/pre-push", "content": "evil"},
        lambda w, t: (w.ws / "repo/.git/hooks/pre-push").exists(),
    ),
    Attack(
        "new-git-config",
        "write_path",
        lambda w: {"path": f"{w.ws}/fresh/.git/config", "content": "evil", "parents": True},
        _exists("fresh/.git/config"),
    ),
    Attack(
        "existing-bashrc",
        "write_path",
        lambda w: {"path": f"{w.ws}/.bashrc", "content": "evil"},
        lambda w, t: (w.ws / ".bashrc").read_text() == "evil",
    ),
    Attack(
        "new-bashrc-deep",
        "write_path",
        lambda w: {"path": f"{w.ws}/x/y/.bashrc", "content": "evil", "parents": True},
        _exists("x/y/.bashrc"),
    ),
    Attack(
        "new-mcp-json",
        "write_path",
        lambda w: {"path": f"{w.ws}/proj/.mcp.json", "content": "{}", "parents": True},
        _exists("proj/.mcp.json"),
    ),
    Attack(
        "new-vscode-settings",
        "write_path",
        lambda w: {"path": f"{w.ws}/.vscode/settings.json", "content": "{}", "parents": True},
        _exists(".vscode/settings.json"),
    ),
    Attack(
        "symlink-escape",
        "symlink_write",
        lambda w: {
            "link": f"{w.ws}/out-link",
            "target": str(w.outside / "via-link.txt"),
            "content": "x",
        },
        lambda w, t: (w.outside / "via-link.txt").exists(),
    ),
    Attack(
        "host-loopback-tcp",
        "connect_tcp",
        lambda w: {"host": "127.0.0.1", "port": w.tcp_port},
        lambda w, t: "hello" in t,
    ),
    Attack(
        "host-unix-socket",
        "connect_unix",
        lambda w: {"path": str(w.unix_path)},
        lambda w, t: "hello" in t,
    ),
    Attack(
        "host-abstract-socket",
        "connect_unix",
        lambda w: {"path": "@" + w.abstract_name},
        lambda w, t: "hello" in t,
    ),
    Attack("caller-secret", "find_secret", lambda w: {"needle": w.user.secret}, _starts_ok),
    Attack(
        "inject-terminal-input",
        "inject_tty",
        lambda w: {},
        _starts_ok,
        # Kernels with dev.tty.legacy_tiocsti=0 refuse TIOCSTI to everyone.
        bare_can_work=not _legacy_tiocsti_off(),
    ),
    Attack("ptrace", "ptrace_child", lambda w: {}, _starts_ok),
    Attack("signal-launcher", "send_signal", lambda w: {"pid": w.launcher_pid}, _starts_ok),
    Attack("new-user-namespace", "new_user_namespace", lambda w: {}, _starts_ok),
    Attack("io-uring", "raw_syscall", lambda w: {"name": "io_uring_setup"}, _starts_ok),
    Attack(
        "userfaultfd",
        "raw_syscall",
        lambda w: {"name": "userfaultfd"},
        _starts_ok,
        bare_can_work=ROOT,
    ),
    Attack("keyring", "raw_syscall", lambda w: {"name": "keyctl"}, _starts_ok),
    Attack("x32-abi", "x32_syscall", lambda w: {}, lambda w, t: "SIGSYS" not in t),
    Attack("exceed-memory", "allocate", lambda w: {"megabytes": 400}, _starts_ok),
    Attack("many-processes", "spawn", lambda w: {"count": 120}, _starts_ok),
    # Last: the user's own .git/config changed as git never changes it stops the server.
    Attack(
        "existing-git-config",
        "write_path",
        lambda w: {"path": f"{w.ws}/repo/.git/config", "content": "[core]\nfsmonitor=evil"},
        lambda w, t: "evil" in (w.ws / "repo/.git/config").read_text(),
    ),
]

SANDBOX_LIMITS = {"memory": "256M", "processes": 64}


def _serve(server: socket.socket) -> None:
    while True:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        with conn:
            conn.sendall(b"hello from the host")


@pytest.fixture(scope="module")
def host_listeners(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path, str]]:
    tcp = socket.create_server(("127.0.0.1", 0))
    path = tmp_path_factory.mktemp("sock") / "host.sock"
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(path))
    unix.listen()
    os.chmod(path, 0o777)
    abstract_name = f"ironcurtain-test-{os.getpid()}"
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind("\0" + abstract_name)
    abstract.listen()
    for s in (tcp, unix, abstract):
        threading.Thread(target=_serve, args=(s,), daemon=True).start()
    yield tcp.getsockname()[1], path, abstract_name
    for s in (tcp, unix, abstract):
        s.close()


def _launcher_pid() -> int:
    for child in psutil.Process().children(recursive=True):
        try:
            if any("ironcurtain" in part for part in child.cmdline()[:2]):
                return int(child.pid)
        except psutil.Error:
            continue
    raise AssertionError("ironcurtain process not found")


def _world(base: Path, listeners: tuple[int, Path, str]) -> World:
    user = make_home(base)
    ws = user.ws("ws")
    (ws / "repo" / ".git" / "hooks").mkdir(parents=True)
    (ws / "repo" / ".git" / "config").write_text("[core]\n")
    (ws / ".bashrc").write_text("# the user's own\n")
    root_only = base / "root-only"
    root_only.mkdir(mode=0o700)
    (root_only / "token").write_text("root-only-token")
    (root_only / "token").chmod(0o600)
    outside = base / "outside"
    outside.mkdir()
    return World(user, ws, outside, *listeners)


def _run_attacks(world: World, sandboxed: bool) -> dict[str, str]:
    limits = SANDBOX_LIMITS if sandboxed else None
    shown = (str(world.user.root / "root-only"), "/etc/shadow")

    def find_launcher() -> None:
        world.launcher_pid = _launcher_pid()

    answers = run_probe(
        world.user,
        world.ws,
        probe_server_config(sandboxed, limits, shown),
        lambda: [(attack.tool, attack.args(world)) for attack in ATTACKS],
        find_launcher,
    )
    return {
        attack.id: ("ERROR " if error else "") + text
        for attack, (error, text) in zip(ATTACKS, answers, strict=True)
    }


def _attacked(base: Path, listeners: tuple[int, Path, str], sandboxed: bool) -> World:
    """A world, and every attack run against it in one session."""
    world = _world(base, listeners)
    world.results = _run_attacks(world, sandboxed)
    return world


@pytest.fixture(scope="module")
def sandboxed_world(
    tmp_path_factory: pytest.TempPathFactory, host_listeners: tuple[int, Path, str]
) -> World:
    return _attacked(tmp_path_factory.mktemp("boxed"), host_listeners, sandboxed=True)


@pytest.fixture(scope="module")
def bare_world(
    tmp_path_factory: pytest.TempPathFactory, host_listeners: tuple[int, Path, str]
) -> World:
    return _attacked(tmp_path_factory.mktemp("bare"), host_listeners, sandboxed=False)


SANDBOXED_CASES = [a for a in ATTACKS if a.sandboxed_applies]
BARE_CASES = [a for a in ATTACKS if a.bare_can_work]


def test_most_attacks_are_shown_working_without_the_sandbox() -> None:
    # The control run may leave out only what this machine cannot show; never most of it.
    assert len(BARE_CASES) >= len(ATTACKS) - (6 if ROOT else 8)
    assert len(SANDBOXED_CASES) >= len(ATTACKS) - 1


@pytest.mark.parametrize("attack", SANDBOXED_CASES, ids=lambda a: a.id)
def test_the_sandbox_stops_it(attack: Attack, sandboxed_world: World) -> None:
    text = sandboxed_world.results[attack.id]
    assert not attack.worked(sandboxed_world, text), text
    assert sandboxed_world.user.secret not in text


@pytest.mark.parametrize("attack", BARE_CASES, ids=lambda a: a.id)
def test_unsandboxed_the_attack_works(attack: Attack, bare_world: World) -> None:
    text = bare_world.results[attack.id]
    assert attack.worked(bare_world, text), text


def test_protected_names_created_in_the_sandbox_are_quarantined_and_audited(
    sandboxed_world: World,
) -> None:
    audit_dir = sandboxed_world.user.state / "ironcurtain" / "audit"
    entries = [
        json.loads(line)
        for log in audit_dir.glob("*.jsonl")
        for line in log.read_text().splitlines()
    ]
    moved = {e["path"] for e in entries if e.get("event") == "quarantine"}
    ws = sandboxed_world.ws
    assert {
        f"{ws}/.git/hooks",
        f"{ws}/a/b/c/d/.git/hooks",
        f"{ws}/fresh/.git/config",
        f"{ws}/x/y/.bashrc",
        f"{ws}/proj/.mcp.json",
        f"{ws}/.vscode",
    } <= moved
    for entry in entries:
        if entry.get("event") == "quarantine":
            assert Path(entry["movedTo"]).exists()
            assert not Path(entry["movedTo"]).is_relative_to(ws)
    # What the user had is untouched.
    assert (ws / ".bashrc").read_text() == "# the user's own\n"
    assert (ws / "repo/.git/config").read_text() == "[core]\n"


def test_the_sandboxed_server_has_no_privilege(sandboxed_world: World) -> None:
    # The identity check runs in its own short session (the attacks' session is over).
    results = _run_single(sandboxed_world, "identity", {})
    assert results.startswith("Uid:"), results
    status = dict(line.split(":", 1) for line in results.splitlines())
    uids = status["Uid"].split()
    if ROOT:
        assert uids[0] != "0"  # never root's uid, not even mapped
    assert status["CapEff"].strip() == "0000000000000000"
    assert status["CapBnd"].strip() == "0000000000000000" or not ROOT
    assert status["Seccomp"].strip() == "2" and status["NoNewPrivs"].strip() == "1"


def _run_single(world: World, tool: str, args: dict[str, Any]) -> str:
    server = probe_server_config(True, SANDBOX_LIMITS)
    return run_probe(world.user, world.ws, server, lambda: [(tool, args)])[0][1]


def _limited_session(
    base: Path, limits: dict[str, Any], calls: list[tuple[str, dict[str, Any]]]
) -> list[tuple[bool, str]]:
    user = make_home(base)
    return run_probe(user, user.ws("ws"), probe_server_config(True, limits), lambda: calls)


def test_a_server_over_its_memory_limit_is_stopped_with_a_clear_error(tmp_path: Path) -> None:
    # Each process stays under the per-process limit; together they go over it.
    results = _limited_session(
        tmp_path,
        {"memory": "160M"},
        [("allocate", {"megabytes": 60, "processes": 4}), ("identity", {})],
    )
    (error, text), (error2, text2) = results
    assert (
        error
        and "server 'probe' was stopped: it used more memory than its limit of 160 MiB" in text
    )
    assert error2 and "not running" in text2


def test_a_server_over_its_cpu_limit_is_stopped_with_a_clear_error(tmp_path: Path) -> None:
    results = _limited_session(tmp_path, {"cpuSeconds": 4}, [("burn", {"seconds": 20})])
    error, text = results[0]
    assert error and "CPU time" in text, text


def _session_with(
    base: Path,
    filesystem: dict[str, Any],
    calls: Callable[[Path], list[tuple[str, dict[str, Any]]]],
    before_calls: Callable[[Path], None] = lambda ws: None,
) -> tuple[Home, Path, list[str]]:
    user = make_home(base)
    ws = user.ws("ws")
    server = probe_server_config(True)
    server["sandbox"]["filesystem"].update(filesystem)
    answers = run_probe(user, ws, server, lambda: calls(ws), lambda: before_calls(ws))
    return user, ws, [text for _, text in answers]


def test_deny_read_covers_paths_that_appear_during_the_session(tmp_path: Path) -> None:
    def appear(ws: Path) -> None:  # the user creates them while the session runs
        (ws / ".env").write_text("TOKEN=top-secret")
        (ws / "secrets" / "key.txt").write_text("top-secret")

    _, ws, out = _session_with(
        tmp_path,
        {"denyRead": ["${workspace}/.env", "${workspace}/secrets/key.txt"]},
        lambda ws: [
            ("read_path", {"path": str(ws / ".env")}),
            ("read_path", {"path": str(ws / "secrets" / "key.txt")}),
            ("list_dir", {"path": str(ws / "secrets")}),
        ],
        appear,
    )
    assert all("top-secret" not in text for text in out), out
    assert out[0].startswith("READ FAILED") and out[1].startswith("READ FAILED")
    assert out[2] == "OK []"
    # The user's files are theirs afterwards; nothing of the placeholders is left empty.
    assert (ws / ".env").read_text() == "TOKEN=top-secret"


def test_placeholders_for_deny_read_are_removed_when_unused(tmp_path: Path) -> None:
    _, ws, _ = _session_with(
        tmp_path,
        {"denyRead": ["${workspace}/.env", "${workspace}/a/b/key"]},
        lambda ws: [("list_dir", {"path": str(ws)})],
    )
    assert list(ws.iterdir()) == []


def test_deny_write_covers_paths_created_during_the_session(tmp_path: Path) -> None:
    user, ws, out = _session_with(
        tmp_path,
        {"denyWrite": ["${workspace}/release/CHANGELOG.md"]},
        lambda ws: [
            (
                "write_path",
                {"path": str(ws / "release/CHANGELOG.md"), "content": "x", "parents": True},
            ),
            ("write_path", {"path": str(ws / "release/notes.md"), "content": "fine"}),
        ],
    )
    assert out == ["WRITE OK", "WRITE OK"]  # inside, the write works...
    assert not (ws / "release" / "CHANGELOG.md").exists()  # ...and is gone when it returns
    assert (ws / "release" / "notes.md").read_text() == "fine"
    (log,) = (user.state / "ironcurtain" / "audit").glob("*.jsonl")
    events = [json.loads(line) for line in log.read_text().splitlines()]
    quarantined = [e for e in events if e.get("event") == "quarantine"]
    assert [e["path"] for e in quarantined] == [str(ws / "release" / "CHANGELOG.md")]
    assert Path(quarantined[0]["movedTo"]).read_text() == "x"


def test_declared_secrets_never_appear_on_any_argv(tmp_path: Path) -> None:
    token = "declared-secret-" + os.urandom(6).hex()
    seen: list[str] = []

    def scan() -> None:
        for proc in psutil.process_iter(["cmdline"]):
            if any(token in part for part in proc.info.get("cmdline") or []):
                seen.append(" ".join(proc.info["cmdline"]))

    user = make_home(tmp_path)
    server = probe_server_config(True)
    server["env"]["API_TOKEN"] = token
    answers = run_probe(
        user, user.ws("ws"), server, lambda: [("env_value", {"name": "API_TOKEN"})], scan
    )
    assert answers == [(False, token)]  # it arrives where it was declared...
    assert seen == []  # ...and never through an argv
