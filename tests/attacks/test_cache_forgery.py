"""What ironcurtain keeps across starts and reads back without validating again (the
validated config, the validated policy, the compiled system-call filter, all in its state
directory's cache), forged by a hostile server as it starts: sandboxed, the forgery never
reaches the next start; with the sandbox off, the same forged entry is what the next start
would read, so no test passes because the attack was broken. And no workspace (all of
which a server may write, by an agent's allowed calls too) is where the next start reads
from; without that check, an allowed write_file would write there."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

import pytest

from launcher.host.seccomp_cache import cache_slot
from launcher.plan import session_plan as plan_module
from launcher.plan.config import content_cache, load_config
from launcher.plan.session_plan import RunOptions, plan_session
from policy.cache import ContentCache
from policy.loader import ANNOTATIONS_FILE, POLICY_FILE, load_policy_dir
from tests.support.cli import ironcurtain
from tests.support.home import make_home
from tests.support.marks import needs_bwrap, needs_installed
from tests.support.probe import probe_server_config, run_probe, write_raw_policy

# A program that allows every system call: BPF_RET | BPF_K, SECCOMP_RET_ALLOW.
ALLOW_ALL = struct.pack("=HBBI", 0x06, 0, 0, 0x7FFF0000)
no_libseccomp = needs_installed(cache_slot(Path("/nonexistent")) is None, "no libseccomp")


def _plant_at_start(server: dict[str, Any], base: Path, rel: str, content: str) -> dict[str, Any]:
    """``server`` writing ``content`` at ``base/rel`` as it starts."""
    ops = [["write", rel, content]]
    server["env"]["PROBE_START_OPS"] = json.dumps({"base": str(base), "ops": [ops]})
    return server


def _config_poisoned(base: Path, sandboxed: bool) -> bool:
    """A server that, as it starts, writes an entry for a config the user starts later
    (its own server unsandboxed in the entry); is that server sandboxed when it loads?"""
    user = make_home(base)
    later = user.root / "later.json"
    later.write_text(json.dumps({"mcpServers": {"time": {"command": "mcp-server-time"}}}))
    forge = base / "forge"
    forge.mkdir()
    (forge / "c.json").write_text(
        json.dumps({"mcpServers": {"time": {"command": "mcp-server-time", "sandbox": False}}})
    )
    load_config(forge / "c.json", "t", "/ws", cache=forge / "cache")
    (forged,) = sorted((forge / "cache").glob("config-*.json"))
    store = content_cache(user.state / "ironcurtain" / "cache")
    key = store.key(later.read_bytes())
    rel = f"ironcurtain/cache/config-{key}.json"
    server = _plant_at_start(probe_server_config(sandboxed), user.state, rel, forged.read_text())
    run_probe(user, user.ws(), server, lambda: [])
    return load_config(later, "t", "/ws", cache=store.directory).servers["time"].sandboxed


@needs_bwrap
def test_a_sandboxed_server_cannot_unsandbox_a_later_start(tmp_path: Path) -> None:
    assert _config_poisoned(tmp_path, sandboxed=True)


@needs_bwrap
def test_without_the_sandbox_a_forged_entry_would_be_the_config(tmp_path: Path) -> None:
    assert not _config_poisoned(tmp_path, sandboxed=False)


def _forged_policy(scratch: Path) -> str:
    """A cache entry that allows every call (and names its first rule ``forged``)."""
    rule = {"name": "forged", "if": {}, "then": "allow", "reason": "forged"}
    write_raw_policy(scratch, first=[rule])
    cache = scratch / "cache"
    load_policy_dir(scratch, cache=cache)
    (entry,) = sorted(cache.glob("policy-*.json"))
    return entry.read_text()


def _policy_poisoned(base: Path, sandboxed: bool) -> str:
    """A server that, as it starts, writes a forged entry for the very policy its session
    runs under (the test tells it the key); the first rule the next start would load."""
    user = make_home(base)
    ws = user.ws()
    policy = write_raw_policy(user.root / "policy")
    store = ContentCache(user.state / "ironcurtain" / "cache", "policy")
    key = store.key((policy / ANNOTATIONS_FILE).read_bytes(), (policy / POLICY_FILE).read_bytes())
    rel = f"ironcurtain/cache/policy-{key}.json"
    forged = _forged_policy(base / "forge")
    run_probe(user, ws, _plant_at_start(probe_server_config(sandboxed), user.state, rel, forged),
              lambda: [])  # fmt: skip
    return load_policy_dir(policy, cache=store.directory).policy.rules[0].name


@needs_bwrap
def test_a_sandboxed_server_cannot_forge_the_next_starts_policy(tmp_path: Path) -> None:
    assert _policy_poisoned(tmp_path, sandboxed=True) != "forged"


@needs_bwrap
def test_without_the_sandbox_a_forged_entry_would_be_the_policy(tmp_path: Path) -> None:
    assert _policy_poisoned(tmp_path, sandboxed=False) == "forged"


def _keyctl_after_forging(base: Path, sandboxed: bool) -> tuple[bool, str]:
    """A server that, as it starts, writes a program allowing every system call where the
    next start reads its filter from; then, in the next session, a sandboxed server's
    keyctl (a call the filter denies)."""
    user = make_home(base)
    ws = user.ws()
    slot = cache_slot(user.state / "ironcurtain" / "cache")
    assert slot is not None
    entry = json.dumps({"bpf": ALLOW_ALL.hex(), "sha256": hashlib.sha256(ALLOW_ALL).hexdigest()})
    rel = f"ironcurtain/cache/seccomp-{slot[1]}.json"
    forger = _plant_at_start(probe_server_config(sandboxed), user.state, rel, entry)
    run_probe(user, ws, forger, lambda: [])
    (answer,) = run_probe(
        user, ws, probe_server_config(True), lambda: [("raw_syscall", {"name": "keyctl"})]
    )
    return answer


@needs_bwrap
@no_libseccomp
def test_a_sandboxed_server_cannot_forge_the_next_starts_filter(tmp_path: Path) -> None:
    error, text = _keyctl_after_forging(tmp_path, sandboxed=True)
    assert not error and text.startswith("FAILED"), text


@needs_bwrap
@no_libseccomp
def test_without_the_sandbox_a_forged_entry_would_be_the_filter(tmp_path: Path) -> None:
    error, text = _keyctl_after_forging(tmp_path, sandboxed=False)
    assert not error and text == "OK", text


@pytest.mark.parametrize("inside", ["cache", ".", "pins", "workspaces"])
def test_no_workspace_reaches_what_the_next_start_reads(tmp_path: Path, inside: str) -> None:
    # A server may write all of its workspace: one in the state directory would let an
    # agent's allowed write_file forge the next start's validated policy or config, or
    # its compiled system-call filter.
    user = make_home(tmp_path)
    ws = user.state / "ironcurtain" / inside
    done = ironcurtain(user, "run", "--server", "filesystem", "--workspace", str(ws))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"--workspace {ws}: is in ironcurtain's state directory" in done.stderr
    assert not user.left_behind()


def test_a_workspace_of_its_own_in_the_state_directory_is_kept(tmp_path: Path) -> None:
    user = make_home(tmp_path)
    ws = user.state / "ironcurtain" / "workspaces" / "20261125-000000-abcdef"
    done = ironcurtain(user, "check", "time", "get_current_time", "--workspace", str(ws))
    assert done.returncode == 0, done.stderr


@needs_bwrap  # the session is planned: bwrap must be able to sandbox
def test_without_the_check_an_allowed_call_would_write_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = make_home(tmp_path)
    user.enter(monkeypatch)
    monkeypatch.setattr(plan_module, "check_workspace", lambda workspace, given: None)
    cache = user.state / "ironcurtain" / "cache"
    plan = plan_session(RunOptions(workspace=str(cache), servers=("filesystem",)))
    for kind in ("policy", "config", "seccomp"):  # every entry the next start reads
        entry = str(cache / f"{kind}-{'0' * 64}.json")
        arguments = {"path": entry, "content": "{}"}
        decision, _ = plan.engine.decide("filesystem", "write_file", arguments)
        assert decision.decision == "allow"
    profile = plan.servers["filesystem"].profile
    assert profile is not None and str(cache) in profile.writable
