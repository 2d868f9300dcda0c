"""Results kept across starts, keyed by the SHA-256 of every input they depend on.

A start that reads the same policy files as the last one (byte for byte, with the same
ironcurtain, the same validating code and the same pydantic) reads the validated result
from here as plain JSON instead of validating again, which needs no pydantic at all. The
key is a hash of content, never a modification time: a file changed within the same
second, or put back to an older time, is a different key.

The directory is the user's own (ironcurtain's state directory, never mounted into a
sandbox). An entry that cannot be read or parsed is a miss; one that cannot be written is
skipped: the cache only ever saves time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import json
import os
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

# Entries kept per kind; older ones (by last use) are removed when a new one is written.
KEEP = 8
FORMAT = b"ironcurtain-cache-1"


@cache
def code_fingerprint() -> bytes:
    """What the meaning of a cached result depends on besides its inputs: this package's
    version, the source of the models and of the validation code, and pydantic's version
    (read from its source, so that it is not imported)."""
    here = Path(__file__).resolve().parent
    digest = hashlib.sha256(FORMAT)
    for name in ("__init__.py", "models.py", "schema.py", "loader.py", "roles.py", "cache.py"):
        digest.update((here / name).read_bytes())
    spec = importlib.util.find_spec("pydantic")
    if spec is not None and spec.origin is not None:
        with contextlib.suppress(OSError):
            digest.update((Path(spec.origin).parent / "version.py").read_bytes())
    return digest.digest()


@cache
def _source(path: Path) -> bytes:
    return hashlib.sha256(path.read_bytes()).digest()


class ContentCache:
    """Entries of one kind (``policy``...) in ``directory``, as ``<kind>-<key>.json``.
    ``sources`` are the files of any further code the entries' meaning depends on (the
    module defining the cached classes, when it is not part of :func:`code_fingerprint`)."""

    def __init__(self, directory: Path, kind: str, sources: tuple[Path, ...] = ()) -> None:
        self.directory = directory
        self.kind = kind
        self.sources = sources

    def key(self, *inputs: bytes) -> str:
        """The key of a result computed from ``inputs`` (each one framed by its length, so
        that no two different lists of inputs share a key)."""
        digest = hashlib.sha256(code_fingerprint())
        digest.update(self.kind.encode())
        for source in self.sources:
            digest.update(_source(source))
        for part in inputs:
            digest.update(len(part).to_bytes(8, "big"))
            digest.update(part)
        return digest.hexdigest()

    def _path(self, key: str) -> Path:
        return self.directory / f"{self.kind}-{key}.json"

    def get(self, key: str) -> Any | None:
        """The entry, or None when there is none or it cannot be read."""
        path = self._path(key)
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # for eviction: the last use, not a key
        return data

    def put(self, key: str, data: Any) -> None:
        """Write an entry (atomically: a reader sees the old state or the whole entry)."""
        path = self._path(key)
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with open(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, separators=(",", ":"))
            os.replace(temporary, path)
        except OSError:
            with contextlib.suppress(OSError):
                temporary.unlink()
            return
        self._evict()

    def _evict(self) -> None:
        entries: list[tuple[float, Path]] = []
        for path in self.directory.glob(f"{self.kind}-*.json"):
            with contextlib.suppress(OSError):
                entries.append((path.stat().st_mtime, path))
        entries.sort(reverse=True)
        for _, path in entries[KEEP:]:
            with contextlib.suppress(OSError):
                path.unlink()


def encode(value: object) -> Any:
    """Frozen dataclasses, lists, dicts and JSON scalars as JSON that :func:`decode` builds
    back exactly. Every object is tagged: ``{"d": class name, "f": fields}`` for a
    dataclass, ``{"m": ...}`` for a dict, ``{"l": ...}`` for a list, so no key of the
    data itself can be taken for a tag.

    >>> from policy.models import PathCondition
    >>> encode(PathCondition(roles=["read-path"], within="/w"))
    {'d': 'PathCondition', 'f': {'roles': {'l': ['read-path']}, 'within': '/w'}}
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {"d": type(value).__name__, "f": fields}
    if isinstance(value, dict):
        if not all(isinstance(key, str) for key in value):
            raise TypeError(f"not a JSON object's keys: {list(value)!r}")
        return {"m": {key: encode(item) for key, item in value.items()}}
    if isinstance(value, list):
        return {"l": [encode(item) for item in value]}
    if value is None or isinstance(value, (str, int, float)):  # bool is an int
        return value
    raise TypeError(f"cannot keep a {type(value).__name__} in the cache")


def decode(data: Any, classes: Iterable[type[Any]]) -> Any:
    """What :func:`encode` wrote, built again; only ``classes`` are ever constructed. A
    malformed entry raises ``ValueError`` (or ``TypeError`` from a class's constructor).

    >>> from policy.models import PathCondition
    >>> condition = PathCondition(roles=["read-path"], within="/w")
    >>> decode(encode(condition), [PathCondition]) == condition
    True
    """
    known = {cls.__name__: cls for cls in classes}

    def build(item: Any) -> Any:
        if isinstance(item, dict):
            if item.keys() == {"d", "f"} and isinstance(item["f"], dict):
                cls = known.get(item["d"])
                if cls is None:
                    raise ValueError(f"no class {item['d']!r} here")
                return cls(**{name: build(value) for name, value in item["f"].items()})
            if item.keys() == {"m"} and isinstance(item["m"], dict):
                return {key: build(value) for key, value in item["m"].items()}
            if item.keys() == {"l"} and isinstance(item["l"], list):
                return [build(value) for value in item["l"]]
            raise ValueError("an untagged object")
        if isinstance(item, list):
            raise ValueError("an untagged list")
        return item

    return build(data)


def rebuild(data: Any, classes: Iterable[type[Any]], *shape: type[Any]) -> list[Any] | None:
    """An entry :func:`encode` wrote of a list of values of the types ``shape``, built
    again (only ``classes`` are constructed); None for no entry, or for anything else.

    >>> from policy.models import PathCondition
    >>> condition = PathCondition(roles=[], within="/w")
    >>> rebuild(encode([condition, 1]), [PathCondition], PathCondition, int) == [condition, 1]
    True
    >>> rebuild(encode([condition]), [PathCondition], PathCondition, int) is None
    True
    """
    if data is None:
        return None
    try:
        values = decode(data, classes)
    except (TypeError, ValueError):
        return None
    if not isinstance(values, list) or len(values) != len(shape):
        return None
    if not all(isinstance(value, kind) for value, kind in zip(values, shape, strict=True)):
        return None
    return values
