"""The audit log: one JSON line per call, each chained to the one before it.

Every entry carries ``hash``, the SHA-256 of its own canonical JSON (without ``hash``), and
``prev``, the ``hash`` of the entry before it (:data:`GENESIS` for the first line of a
file). ``launcher.audit.read.verify`` names the first line where that fails: an edited line
no longer matches its own hash; a removed, inserted or moved line no longer follows the one
before. A session that closes its log seals its part of it with a ``session-end`` entry
(chained like the others) that counts the entries before it: a log whose last lines were
removed ends without one. One file can hold several sessions (``--audit-log`` reused), one
after another. Arguments are stored hashed, per field, unless the session runs with
``--audit-args clear`` (fields an annotation marks as PII stay hashed even then).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

from sandbox_profiles.records import frozen

# One encoder, made once: json.dumps with options builds a new encoder at every call.
_canonical = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode
# What that encoder writes for a string, called directly (an entry is mostly strings).
_quoted = json.encoder.encode_basestring

GENESIS = "sha256:" + "0" * 64
SESSION_END = "session-end"


def hash_value(value: object) -> str:
    text = _quoted(value) if type(value) is str else _canonical(value)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def argument_hashes(args: Mapping[str, object]) -> dict[str, str]:
    """Each argument's ``sha256:<hex>`` (of its canonical JSON)."""
    return {key: hash_value(value) for key, value in args.items()}


def hashed_arguments(
    args: Mapping[str, object],
    clear: bool = False,
    pii: Collection[str] = (),
    hashes: Mapping[str, str] | None = None,
) -> dict[str, object]:
    """Each argument as ``sha256:<hex>`` of its canonical JSON (from ``hashes`` when they
    were taken already); with ``clear``, as given, except the ``pii`` fields.

    >>> hashed_arguments({"a": 1})["a"][:15]
    'sha256:6b86b273'
    >>> hashed_arguments({"path": "x", "email": "a@b"}, clear=True, pii=["email"])["path"]
    'x'
    """
    if hashes is None:
        hashes = argument_hashes(args) if not clear else {}
    return {
        key: value if clear and key not in pii else hashes.get(key) or hash_value(value)
        for key, value in args.items()
    }


# Each entry key as it is written ("key":), quoted once: entries use a few dozen keys.
_KEYS: dict[str, str] = {}


def _key(key: str) -> str:
    text = _KEYS.get(key)
    if text is None:
        text = _quoted(key) + ":"
        if len(_KEYS) < 256:
            _KEYS[key] = text
    return text


def _member(key: str, value: object) -> str:
    """``"key":value`` as it appears in the canonical JSON of an object.

    >>> _member("tool", "read"), _member("args", {"b": 1, "a": "\u00e9"})
    ('"tool":"read"', '"args":{"a":"\u00e9","b":1}')
    >>> _member("n", -12), _member("e", None), _member("s", True)
    ('"n":-12', '"e":null', '"s":true')
    """
    if type(value) is str:
        return _key(key) + _quoted(value)
    if type(value) is int:
        return _key(key) + int.__repr__(value)  # what the encoder writes for an int
    if value is None:
        return _key(key) + "null"
    if type(value) is bool:
        return _key(key) + ("true" if value else "false")
    return _key(key) + _canonical(value)


# The last second formatted, and its text: entries come many to a second.
_second: list[Any] = [None, ""]


def _timestamp() -> str:
    """Now in UTC, to the millisecond: ``2026-11-25T21:30:15.123Z``."""
    now = time.time()
    second = int(now)
    if second != _second[0]:
        _second[:] = [second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))]
    return f"{_second[1]}.{int(now * 1000) % 1000:03d}Z"


def _late_member(key_text: str, value: object) -> str:
    """A member whose key is already quoted; plain strings and finite floats (what an
    outcome is made of) without a trip through the encoder."""
    if type(value) is str and value.isascii() and value.isprintable():
        if '"' not in value and "\\" not in value:
            return f'{key_text}"{value}"'
    elif type(value) is float and math.isfinite(value):
        return f"{key_text}{value!r}"  # what the encoder writes for a finite float
    return f"{key_text}{_canonical(value)}"


@frozen
class Prepared:
    """An entry's fields, each already a canonical ``"key":value`` member, by key; and the
    whole line in canonical order with a slot for each field still to come (``late``,
    ``prev`` among them): between the slots, ``segments`` of members already joined."""

    pieces: Mapping[str, str]
    late: tuple[str, ...] = ()
    segments: tuple[str, ...] = ()
    late_keys: tuple[str, ...] = ()  # each slot's key, already quoted, with its colon

    @classmethod
    def of(cls, pieces: dict[str, str], late: Collection[str]) -> Prepared:
        shape = (tuple(pieces), tuple(late))
        layout = _LAYOUTS.get(shape)
        if layout is None:
            layout = _layout(pieces, late)
            if len(_LAYOUTS) < 256:
                _LAYOUTS[shape] = layout
        groups, slots, late_keys = layout
        segments = tuple([",".join([pieces[k] for k in group]) for group in groups])
        return cls(pieces, slots, segments, late_keys)

    def line(self, late: Mapping[str, object]) -> str | None:
        """The canonical line with ``late`` filled in; None unless ``late`` fills exactly
        the slots."""
        if len(late) != len(self.late) or any(k not in late for k in self.late):
            return None
        parts = [self.segments[0]]
        for key, key_text, segment in zip(
            self.late, self.late_keys, self.segments[1:], strict=True
        ):
            parts.append(_late_member(key_text, late[key]))
            parts.append(segment)
        return "{" + ",".join([p for p in parts if p]) + "}"


# An entry's layout by its shape (its keys, the late ones): entries of a few shapes are
# written again and again. The keys in canonical order, grouped between the slots; the
# slots; each slot's key as written.
_Layout = tuple[tuple[tuple[str, ...], ...], tuple[str, ...], tuple[str, ...]]
_LAYOUTS: dict[tuple[tuple[str, ...], tuple[str, ...]], _Layout] = {}


def _layout(pieces: Collection[str], late: Collection[str]) -> _Layout:
    keys = sorted({*pieces, *late, "prev"})
    slots = tuple(k for k in keys if k not in pieces)
    groups: list[tuple[str, ...]] = []
    current: list[str] = []
    for key in keys:
        if key in pieces:
            current.append(key)
        else:
            groups.append(tuple(current))
            current = []
    groups.append(tuple(current))
    return tuple(groups), slots, tuple(_key(k) for k in slots)


def entry_hash(entry: Mapping[str, Any]) -> str:
    return hash_value({k: v for k, v in entry.items() if k != "hash"})


def _last_hash(path: str) -> str:
    """The ``hash`` of the last entry of an existing log (to continue its chain)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - (1 << 16)))
            lines = handle.read().splitlines()
    except OSError:
        return GENESIS
    for raw in reversed(lines):
        if raw.strip():
            try:
                return str(json.loads(raw)["hash"])
            except (ValueError, KeyError, TypeError):
                return hash_value(raw.decode("utf-8", "replace"))  # verify will flag it
    return GENESIS


# The fields an audit log adds to each entry it writes for one client (who called, over
# which HTTP session), given the entry.
Stamp = Callable[[Mapping[str, Any]], Mapping[str, object]]


class _Chain:
    """The file and the hash chain every view of one session's log appends to."""

    def __init__(self, path: str) -> None:
        self.error: str | None = None
        self.entries = 0
        os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
        self.prev = _last_hash(path)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self.file = os.fdopen(fd, "a", encoding="utf-8", buffering=1)
        self.inode = os.fstat(fd).st_ino


class AuditLog:
    """Append-only JSONL writer. Once a write fails it stays failed: the session must deny.

    :meth:`for_client` gives a view of the same log that adds a client's fields (its
    caller, its HTTP session) to every entry written through it; every view appends to one
    chain."""

    def __init__(self, path: str, session_id: str, *, _chain: _Chain | None = None) -> None:
        self.path = path
        self.session_id = session_id
        self._chain = _chain if _chain is not None else _Chain(path)
        self._stamp: Stamp | None = None

    def for_client(self, stamp: Stamp) -> AuditLog:
        """This log, each entry written through the view given ``stamp(entry)``'s fields.

        >>> import tempfile, os.path
        >>> log = AuditLog(os.path.join(tempfile.mkdtemp(), "a.jsonl"), "s1")
        >>> view = log.for_client(lambda entry: {"caller": {"name": "a", "issuer": "static"}})
        >>> view.write({"tool": "t"}) and log.entries
        1
        """
        view = AuditLog(self.path, self.session_id, _chain=self._chain)
        view._stamp = stamp
        return view

    def fields_for(self, entry: Mapping[str, Any]) -> Mapping[str, object]:
        """What this view adds to ``entry`` when writing it (its caller, its HTTP session);
        nothing for the log itself."""
        return self._stamp(entry) if self._stamp is not None else {}

    @property
    def error(self) -> str | None:
        return self._chain.error

    @property
    def entries(self) -> int:
        """Written by this session (what its session-end entry counts), through any view."""
        return self._chain.entries

    @property
    def healthy(self) -> bool:
        return self._chain.error is None

    def check(self) -> bool:
        """Before a call is made: is the log still the file this session opened? (A removed
        or replaced log would swallow the entry.) A full disk shows only when writing."""
        chain = self._chain
        if chain.error is None:
            try:
                if os.stat(self.path).st_ino != chain.inode:
                    chain.error = f"{self.path} was replaced"
            except OSError:
                chain.error = f"{self.path} was removed"
        return chain.error is None

    def prepare(self, entry: Mapping[str, Any], late: Collection[str] = ()) -> Prepared:
        """Serialise an entry's fields now, while the call is out at the server, so that
        :meth:`write` only adds the ``late`` fields (its outcome). ``entry`` must not change
        afterwards."""
        record = {"time": _timestamp(), "sessionId": self.session_id, **entry}
        if self._stamp is not None:
            record.update(self._stamp(entry))
        return Prepared.of({k: _member(k, v) for k, v in record.items()}, late)

    def write(self, entry: Mapping[str, Any], prepared: Prepared | None = None) -> bool:
        """Append one entry (the fields of ``prepared`` plus ``entry``), chained to the one
        before it. False once the log cannot be written."""
        chain = self._chain
        if chain.error is not None:
            return False
        if prepared is None and self._stamp is not None:
            entry = {**entry, **self._stamp(entry)}
        try:
            fast = prepared.line({**entry, "prev": chain.prev}) if prepared is not None else None
            canonical = fast if fast is not None else self._canonical_line(entry, prepared)
            # A lone surrogate (which JSON can carry) has no UTF-8: that entry cannot be
            # written, so the log fails as a full disk would (the session denies).
            digest = "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()
        except (TypeError, ValueError) as exc:
            chain.error = f"an entry could not be written: {exc}"
            return False
        try:
            chain.file.write(f'{canonical[:-1]},"hash":"{digest}"}}\n')
            chain.file.flush()
        except (OSError, ValueError) as exc:
            chain.error = str(exc)
            return False
        chain.prev = digest
        chain.entries += 1
        return True

    def _canonical_line(self, entry: Mapping[str, Any], prepared: Prepared | None) -> str:
        pieces = dict(prepared.pieces) if prepared is not None else {}
        if prepared is None:
            pieces["time"] = f'"time":"{_timestamp()}"'
            pieces["sessionId"] = _member("sessionId", self.session_id)
        for key, value in entry.items():
            pieces[key] = _member(key, value)
        pieces["prev"] = f'"prev":"{self._chain.prev}"'
        # The line is the canonical JSON the hash is taken over (keys sorted, no spaces),
        # with the hash appended as the last key (verify takes it out again to check it).
        return "{" + ",".join([pieces[k] for k in sorted(pieces)]) + "}"

    def close(self) -> None:
        """Seal this session's entries with a ``session-end`` entry counting them (none when
        it wrote none, or the log failed: ``verify`` then reports it unsealed)."""
        if self.entries and self.check():
            AuditLog(self.path, self.session_id, _chain=self._chain).write(
                {"event": SESSION_END, "entries": self.entries}
            )
        with contextlib.suppress(OSError):
            self._chain.file.close()
