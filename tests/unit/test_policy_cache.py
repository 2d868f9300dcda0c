"""The validated policy kept across starts (policy.cache): keyed by content, read back
exactly, never trusted past what it was made from, and out of a hostile server's reach."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.plan import session_plan as plan_module
from launcher.plan.session_plan import RunOptions, plan_session
from policy import load_policy_dir
from policy.cache import KEEP, ContentCache, decode, encode
from policy.errors import PolicyFileError
from policy.loader import ANNOTATIONS_FILE, POLICY_FILE, bundled_policy_dir
from policy.models import PathCondition
from tests.support.cli import ironcurtain
from tests.support.home import make_home
from tests.support.marks import needs_bwrap
from tests.support.probe import probe_server_config, run_probe, write_raw_policy

# Every kind of entry and condition the files can hold, optional parts given and left out.
ANNOTATIONS = {
    "generatedAt": "2026-11-25T00:00:00Z",
    "reviewed": False,
    "servers": {
        "files": {
            "tools": [
                {
                    "toolName": "write",
                    "serverName": "files",
                    "effect": "write",
                    "sideEffects": True,
                    "args": {"path": ["write-path"], "url": ["fetch-url"], "n": ["none"]},
                    "piiFields": ["owner"],
                    "comment": "checked",
                },
                {"toolName": "now", "serverName": "files", "effect": "read", "sideEffects": False},
            ],
            "prompts": [
                {
                    "promptName": "summarise",
                    "serverName": "files",
                    "effect": "read",
                    "sideEffects": False,
                    "args": {"file": ["read-path"]},
                    "draft": True,
                }
            ],
        },
        "empty": {"tools": []},
    },
}
RULES = {
    "constitutionHash": "abc",
    "rules": [
        {
            "name": "fetch-allowed",
            "description": "d",
            "principle": "p",
            "if": {
                "tool": ["write"],
                "sideEffects": True,
                "domains": {"roles": ["fetch-url"], "allowed": ["*.example.com"]},
            },
            "then": "allow",
            "reason": "listed",
        },
        {
            "name": "in-workspace",
            "if": {
                "effect": ["read", "write"],
                "server": ["files"],
                "prompt": ["summarise"],
                "paths": {"roles": ["read-path", "write-path"], "within": "${workspace}"},
            },
            "then": "allow",
            "reason": "inside",
        },
        {"name": "rest", "if": {}, "then": "escalate", "reason": "ask"},
    ],
}


def _policy(directory: Path, annotations: object = ANNOTATIONS, rules: object = RULES) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / ANNOTATIONS_FILE).write_text(json.dumps(annotations))
    (directory / POLICY_FILE).write_text(json.dumps(rules))
    return directory


def _entries(cache: Path) -> list[Path]:
    return sorted(cache.glob("policy-*.json"))


@pytest.mark.parametrize("which", ["every-field", "bundled"])
def test_a_cached_policy_is_the_validated_one(tmp_path: Path, which: str) -> None:
    directory = _policy(tmp_path / "p") if which == "every-field" else bundled_policy_dir()
    cache = tmp_path / "cache"
    validated = load_policy_dir(directory)
    first = load_policy_dir(directory, cache=cache)
    (entry,) = _entries(cache)
    second = load_policy_dir(directory, cache=cache)
    assert first == validated
    assert second == validated  # built from the entry, field for field
    assert second.annotations is not validated.annotations
    assert _entries(cache) == [entry]


def test_a_start_that_hits_imports_no_pydantic(tmp_path: Path) -> None:
    directory, cache = _policy(tmp_path / "p"), tmp_path / "cache"
    script = (
        "import sys; from pathlib import Path; from policy import load_policy_dir; "
        f"load_policy_dir(Path({str(directory)!r}), cache=Path({str(cache)!r})); "
        "print('pydantic' in sys.modules)"
    )

    def run() -> str:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert run() == "True"  # a miss validates
    assert run() == "False"  # a hit does not


def test_changed_bytes_are_a_new_key_whatever_the_time(tmp_path: Path) -> None:
    directory, cache = _policy(tmp_path / "p"), tmp_path / "cache"
    load_policy_dir(directory, cache=cache)
    policy_file = directory / POLICY_FILE
    stamp = policy_file.stat()
    changed = json.loads(policy_file.read_text())
    changed["rules"][0]["then"] = "deny"
    policy_file.write_text(json.dumps(changed))
    os.utime(policy_file, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # the same mtime
    assert load_policy_dir(directory, cache=cache).policy.rules[0].then == "deny"
    # A file that no longer validates is refused, though an entry exists for its old bytes.
    changed["rules"][0]["then"] = "maybe"
    policy_file.write_text(json.dumps(changed))
    with pytest.raises(PolicyFileError, match=r"\$\.rules\[0\]\.then"):
        load_policy_dir(directory, cache=cache)


@pytest.mark.parametrize(
    "entry",
    [
        "not json",
        "[]",
        '{"l": [1, 2]}',
        '{"d": "Path", "f": {}}',  # a class that is not the policy's is never built
        '{"l": [{"d": "ToolAnnotationsFile", "f": {"servers": {"m": {}}}}, {"d": '
        '"ToolAnnotationsFile", "f": {"servers": {"m": {}}}}]}',
        '{"l": [{"d": "ToolAnnotationsFile", "f": {"servers": {"m": {}}, "extra": 1}}, 2]}',
    ],
)
def test_an_entry_that_is_not_what_was_written_is_a_miss(tmp_path: Path, entry: str) -> None:
    directory, cache = _policy(tmp_path / "p"), tmp_path / "cache"
    validated = load_policy_dir(directory)
    load_policy_dir(directory, cache=cache)
    (path,) = _entries(cache)
    path.write_text(entry)
    assert load_policy_dir(directory, cache=cache) == validated
    assert path.read_text() != entry  # written again, whole


def test_a_cache_that_cannot_be_written_costs_only_time(tmp_path: Path) -> None:
    directory = _policy(tmp_path / "p")
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert load_policy_dir(directory, cache=blocked / "cache") == load_policy_dir(directory)
    assert not list(tmp_path.glob("**/.policy-*"))


def test_entries_are_few(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    for n in range(KEEP + 3):
        rules = {**RULES, "constitutionHash": str(n)}
        load_policy_dir(_policy(tmp_path / f"p{n}", rules=rules), cache=cache)
    assert len(_entries(cache)) == KEEP


def test_keys_frame_their_inputs(tmp_path: Path) -> None:
    store = ContentCache(tmp_path, "policy")
    assert store.key(b"ab", b"c") != store.key(b"a", b"bc")


def test_encoding_keeps_data_keys_that_look_like_tags() -> None:
    tricky = {"d": "PathCondition", "f": {}, "m": {"l": []}}
    assert decode(encode([tricky, PathCondition(roles=[], within="/")]), [PathCondition]) == [
        tricky,
        PathCondition(roles=[], within="/"),
    ]


def _forged(scratch: Path) -> str:
    """A cache entry that allows every call (and names its rule ``forged``)."""
    rule = {"name": "forged", "if": {}, "then": "allow", "reason": "forged"}
    _policy(scratch, rules={**RULES, "rules": [rule]})
    cache = scratch / "cache"
    load_policy_dir(scratch, cache=cache)
    (entry,) = _entries(cache)
    return entry.read_text()


def _poisoned(base: Path, sandboxed: bool) -> str:
    """A server that, as it starts, writes a forged entry for the very policy its session
    runs under (the test tells it the key); the first rule the next start would load."""
    user = make_home(base)
    ws = user.ws()
    policy = write_raw_policy(user.root / "policy")
    store = ContentCache(user.state / "ironcurtain" / "cache", "policy")
    key = store.key((policy / ANNOTATIONS_FILE).read_bytes(), (policy / POLICY_FILE).read_bytes())
    server = probe_server_config(sandboxed)
    ops = [["write", f"ironcurtain/cache/policy-{key}.json", _forged(base / "forge")]]
    server["env"]["PROBE_START_OPS"] = json.dumps({"base": str(user.state), "ops": [ops]})
    run_probe(user, ws, server, lambda: [])
    return load_policy_dir(policy, cache=store.directory).policy.rules[0].name


@needs_bwrap
def test_a_sandboxed_server_cannot_forge_the_next_starts_policy(tmp_path: Path) -> None:
    assert _poisoned(tmp_path, sandboxed=True) != "forged"


@needs_bwrap
def test_without_the_sandbox_a_forged_entry_would_be_the_policy(tmp_path: Path) -> None:
    assert _poisoned(tmp_path, sandboxed=False) == "forged"


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
