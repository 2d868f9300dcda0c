"""The compiled system-call filter, kept across starts.

Compiling the filter means loading the libseccomp binding, which asks ``ldconfig`` twice
where the C library and libseccomp are, and having libseccomp build the program: some
4 ms before any server can start. The program depends only on what it is made from:

- the rules (``sandbox_profiles/seccomp.py``) and the binding's source;
- the architecture;
- the bytes of the libseccomp the binding loads. A newer libseccomp knows system calls an
  older one skipped (a rule for a call it cannot name is left out), so its program may
  deny more.

Those are the key (``policy.cache``: SHA-256 of content, never a time). The library is
found as the dynamic loader finds its soname (no ``ldconfig``), and named by the file
mapped into this process. An entry is written only when the binding loaded that same
file; when the library cannot be found that way, the filter is compiled as before and
nothing is kept; so it is when the binding is not installed.

Each entry holds the program and its SHA-256: a damaged entry is a miss. The entries are
in ironcurtain's state directory, which no sandbox can see and no workspace may be in
(``tests/attacks/test_cache_forgery.py`` has a sandboxed server try to plant an allow-everything
program there). What runs with the user's own rights could rewrite an entry, as it could
the config that says whether a server is sandboxed at all.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from pathlib import Path

import sandbox_profiles
from policy.cache import ContentCache

# The soname the binding finds on Linux distributions (find_library("seccomp")).
SONAME = "libseccomp.so.2"
_RULES = Path(sandbox_profiles.__file__).resolve().parent / "seccomp.py"
_SOCK_FILTER = 8  # bytes of one classic BPF instruction


def compiled_filter(cache_dir: Path) -> bytes:
    """The filter as ``bwrap --seccomp FD`` reads it, from the cache when it has it; raises
    ``SeccompUnavailable`` as compiling does."""
    slot = cache_slot(cache_dir)
    if slot is not None:
        bpf = _entry(slot[0].get(slot[1]))
        if bpf is not None:
            return bpf
    from sandbox_profiles import seccomp

    bpf = seccomp.compile_filter()
    # Kept only when the binding loaded the very file the key was made from.
    if slot is not None and _mapped_libraries() == {slot[2]}:
        slot[0].put(slot[1], {"bpf": bpf.hex(), "sha256": hashlib.sha256(bpf).hexdigest()})
    return bpf


def cache_slot(cache_dir: Path) -> tuple[ContentCache, str, str] | None:
    """Where this machine's filter is kept: the cache, the key, and the libseccomp file the
    key was made from; None when the binding is not installed or the library cannot be
    found by its soname (the filter is then compiled, or refused, as without a cache)."""
    spec = importlib.util.find_spec("pyseccomp")
    if spec is None or spec.origin is None:
        return None
    found = _library()
    if found is None:
        return None
    path, library = found
    store = ContentCache(
        cache_dir, "seccomp", (_RULES, Path(__file__).resolve(), Path(spec.origin))
    )
    try:
        key = store.key(os.uname().machine.encode(), library)
    except OSError:  # a source that cannot be read
        return None
    return store, key, path


def _entry(data: object) -> bytes | None:
    """A cached program, or None for an entry that is not one (or was damaged)."""
    if not isinstance(data, dict):
        return None
    text, digest = data.get("bpf"), data.get("sha256")
    if not isinstance(text, str) or not isinstance(digest, str):
        return None
    try:
        bpf = bytes.fromhex(text)
    except ValueError:
        return None
    if not bpf or len(bpf) % _SOCK_FILTER or hashlib.sha256(bpf).hexdigest() != digest:
        return None
    return bpf


def _library() -> tuple[str, bytes] | None:
    """The libseccomp file the dynamic loader gives for :data:`SONAME`, and its bytes."""
    import ctypes

    try:
        ctypes.CDLL(SONAME)
    except OSError:
        return None
    paths = _mapped_libraries()
    if len(paths) != 1:
        return None
    (path,) = paths
    try:
        with open(path, "rb") as handle:
            return path, handle.read()
    except OSError:
        return None


def _mapped_libraries() -> set[str]:
    """The libseccomp files mapped into this process (none known when that cannot be read)."""
    found = set()
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                path = line.rstrip("\n").split(None, 5)[-1]
                if path.startswith("/") and os.path.basename(path).startswith("libseccomp.so"):
                    found.add(path)
    except OSError:
        return set()
    return found
