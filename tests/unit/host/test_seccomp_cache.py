"""The compiled system-call filter kept across starts (launcher.host.seccomp_cache): the very
program libseccomp builds, keyed by everything it is made from. (A hostile server forging
an entry: ``tests/attacks/test_cache_forgery.py``.)"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.host import seccomp_cache
from launcher.host.seccomp_cache import cache_slot, compiled_filter
from sandbox_profiles.seccomp import compile_filter
from tests.support.marks import needs_installed

# A program that allows every system call: BPF_RET | BPF_K, SECCOMP_RET_ALLOW.
ALLOW_ALL = struct.pack("=HBBI", 0x06, 0, 0, 0x7FFF0000)

pytestmark = needs_installed(cache_slot(Path("/nonexistent")) is None, "no libseccomp")


def _entries(cache: Path) -> list[Path]:
    return sorted(cache.glob("seccomp-*.json"))


def _entry(bpf: bytes) -> dict[str, str]:
    return {"bpf": bpf.hex(), "sha256": hashlib.sha256(bpf).hexdigest()}


def _forge(cache: Path, bpf: bytes = ALLOW_ALL) -> Path:
    slot = cache_slot(cache)
    assert slot is not None
    slot[0].put(slot[1], _entry(bpf))
    (entry,) = _entries(cache)
    return entry


def test_a_cached_filter_is_the_compiled_one(tmp_path: Path) -> None:
    compiled = compile_filter()
    assert compiled_filter(tmp_path) == compiled  # compiled, and kept
    assert len(_entries(tmp_path)) == 1
    assert compiled_filter(tmp_path) == compiled  # read back


def test_a_start_that_hits_loads_no_binding(tmp_path: Path) -> None:
    program = (
        "import sys; from pathlib import Path; from launcher.host.seccomp_cache import "
        "compiled_filter; bpf = compiled_filter(Path(sys.argv[1])); "
        "print(len(bpf), 'pyseccomp' in sys.modules)"
    )
    said = [
        subprocess.run(
            [sys.executable, "-c", program, str(tmp_path)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        for _ in range(2)
    ]
    size = str(len(compile_filter()))
    assert said == [[size, "True"], [size, "False"]]


@pytest.mark.parametrize(
    "what",
    ["the library's bytes", "the rules", "the architecture"],
)
def test_an_entry_is_keyed_by_what_the_program_is_made_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, what: str
) -> None:
    _forge(tmp_path)
    assert compiled_filter(tmp_path) == ALLOW_ALL  # the key it was written under
    if what == "the library's bytes":
        real = seccomp_cache._library()
        assert real is not None
        monkeypatch.setattr(seccomp_cache, "_library", lambda: (real[0], real[1] + b"\0"))
    elif what == "the rules":
        rules = tmp_path / "seccomp.py"
        rules.write_bytes(seccomp_cache._RULES.read_bytes() + b"\n# one more rule\n")
        monkeypatch.setattr(seccomp_cache, "_RULES", rules)
    else:
        machine = os.uname().machine
        uname = os.uname()
        other = type(uname)((*uname[:4], machine + "-other"))
        monkeypatch.setattr(os, "uname", lambda: other)
    assert compiled_filter(tmp_path) == compile_filter()


def _damaged() -> str:
    """The real program with one digit changed (the system call one rule compares)."""
    entry = _entry(compile_filter())
    text = entry["bpf"]
    at = text.index("fa00")  # keyctl, 250
    return json.dumps({**entry, "bpf": text[:at] + "fb" + text[at + 2 :]})


@pytest.mark.parametrize(
    "entry",
    [
        '{"bpf": 5}',
        '{"bpf": "zz"}',
        '{"bpf": ""}',
        '{"bpf": "00000000000000"}',
        json.dumps({"bpf": ALLOW_ALL.hex()}),  # no checksum
        json.dumps({**_entry(ALLOW_ALL), "sha256": "0" * 64}),
        _damaged(),
        "[",
        "{}",
    ],
)
def test_an_entry_that_is_not_a_whole_program_is_a_miss(tmp_path: Path, entry: str) -> None:
    path = _forge(tmp_path)
    path.write_text(entry)
    assert compiled_filter(tmp_path) == compile_filter()
    assert json.loads(path.read_text()) == _entry(compile_filter())  # written anew


@pytest.mark.parametrize("missing", ["the library by its soname", "the binding"])
def test_without_what_the_key_is_made_from_it_is_compiled_and_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, missing: str
) -> None:
    _forge(tmp_path)
    if missing == "the binding":
        real = importlib.util.find_spec
        monkeypatch.setattr(
            importlib.util,
            "find_spec",
            lambda name, *a: None if name == "pyseccomp" else real(name, *a),
        )
    else:
        monkeypatch.setattr(seccomp_cache, "SONAME", "libseccomp.so.999")
    assert cache_slot(tmp_path) is None
    assert compiled_filter(tmp_path) == compile_filter()  # not the entry forged before
    assert len(_entries(tmp_path)) == 1


def test_nothing_is_kept_when_the_binding_loaded_another_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slot = cache_slot(tmp_path)
    assert slot is not None
    monkeypatch.setattr(seccomp_cache, "_mapped_libraries", lambda: {slot[2], "/elsewhere.so"})
    monkeypatch.setattr(seccomp_cache, "cache_slot", lambda cache_dir: slot)
    assert compiled_filter(tmp_path) == compile_filter()
    assert _entries(tmp_path) == []
