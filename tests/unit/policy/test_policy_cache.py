"""The validated policy kept across starts (policy.cache): keyed by content, read back
exactly, never trusted past what it was made from. (A hostile server forging an entry, and
no workspace where the next start reads: ``tests/attacks/test_cache_forgery.py``.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from policy.cache import KEEP, ContentCache, decode, encode
from policy.errors import PolicyFileError
from policy.loader import ANNOTATIONS_FILE, POLICY_FILE, bundled_policy_dir, load_policy_dir
from policy.models import PathCondition

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
        "import sys; from pathlib import Path; from policy.loader import load_policy_dir; "
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
