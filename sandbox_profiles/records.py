"""Dataclasses whose ``__eq__``, ``__hash__`` and ``__repr__`` are shared functions.

``dataclasses.dataclass`` writes each method it adds as source text and compiles it when
the class is defined: six for a frozen class (``__init__``, ``__repr__``, ``__eq__``,
``__hash__``, ``__setattr__``, ``__delattr__``), three for a mutable one. A start of
``ironcurtain run`` defines some fifty such classes before its servers can start, and
compiling their methods was about a fifth of that time.

``frozen`` and ``mutable`` leave ``dataclass`` to make what must be made per class (the
``__init__``, and a frozen class's guards against assignment) and give every class the
same three functions for the rest. Each reads the class's fields through an
``operator.attrgetter`` made once, when the class is defined. They behave as
``dataclass``'s own do:

- only the fields with ``compare`` take part in ``==`` (and ``hash``, unless a field says
  otherwise), only those with ``repr`` are printed;
- ``==`` holds only between instances of the very same class (``NotImplemented`` for any
  other), comparing those fields as the running Python's ``dataclass`` does (their tuples
  up to 3.12, one by one from 3.13);
- a frozen class hashes that tuple; a mutable one is unhashable;
- a method the class body defines itself is kept;
- a ``repr`` that meets the same object again (a mutable one holding itself) prints
  ``...`` there.

A frozen class's guards against assignment (``__setattr__``, ``__delattr__``) are, on the
Pythons whose ``dataclasses`` builds them in ``_frozen_get_del_attr(cls, fields, globals)``
(3.11, 3.12), closures made here that do what those guards do, line for line: without the
source text compiled twice per class (about a seventh of the imports before a server starts).
Elsewhere ``dataclass`` makes them as usual.

Everything else is ``dataclass``'s: ``fields``, ``replace``, ``asdict``, ``kw_only``,
``slots``, ``__match_args__``, ``FrozenInstanceError``.
"""

from __future__ import annotations

import dataclasses
import sys
from _thread import RLock, get_ident
from collections.abc import Callable
from operator import attrgetter
from typing import Any, TypeVar, dataclass_transform, overload

_T = TypeVar("_T")

_Key = Callable[[Any], tuple[Any, ...]]

_IN_REPR: set[tuple[int, int]] = set()


def _key(names: list[str]) -> _Key:
    """The tuple of ``names``' values of an instance (a tuple even for one name or none)."""
    if len(names) > 1:
        return attrgetter(*names)
    if names:
        one = attrgetter(names[0])
        return lambda obj: (one(obj),)
    return lambda obj: ()


def _eq_tuples(self: Any, other: Any) -> Any:
    if other.__class__ is self.__class__:
        key = self.__class__._record_compare
        return key(self) == key(other)
    return NotImplemented


def _eq_fields(self: Any, other: Any) -> Any:
    if other.__class__ is self.__class__:
        key = self.__class__._record_compare
        return all(mine == theirs for mine, theirs in zip(key(self), key(other), strict=True))
    return NotImplemented


# dataclass compares the tuples of the fields up to Python 3.12 (where one object is equal
# to itself, a NaN too) and field by field from 3.13 (where a NaN field is never equal).
_eq = _eq_fields if sys.version_info >= (3, 13) else _eq_tuples


def _hash(self: Any) -> int:
    return hash(self.__class__._record_hash(self))


def _repr(self: Any) -> str:
    mark = (id(self), get_ident())
    if mark in _IN_REPR:
        return "..."
    _IN_REPR.add(mark)
    try:
        cls = self.__class__
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in cls._record_repr)
        return f"{cls.__qualname__}({shown})"
    finally:
        _IN_REPR.discard(mark)


def _frozen_guards(cls: Any, fields: list[dataclasses.Field[Any]], _: object) -> tuple[Any, Any]:
    """A frozen class's ``__setattr__`` and ``__delattr__``: ``dataclasses``' own
    (3.11, 3.12), as closures rather than source text compiled for each class."""
    names = tuple(f.name for f in fields)

    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    return __setattr__, __delattr__


_STOCK_GUARDS: Any = getattr(dataclasses, "_frozen_get_del_attr", None)
# Only where dataclasses' own is the one these closures copy; anywhere else, its own.
_SHARE_GUARDS = (
    sys.version_info < (3, 13)
    and _STOCK_GUARDS is not None
    and _STOCK_GUARDS.__code__.co_varnames[:3] == ("cls", "fields", "globals")
)
# Reentrant: a record made while another is cannot deadlock (the stock guards may then be
# back for the outer one: the same behaviour, compiled).
_GUARDS_SWAP = RLock()


def _dataclass(cls: type[_T], frozen: bool, kw_only: bool, slots: bool) -> Any:
    """``dataclass`` without its own ``__eq__`` and ``__repr__``; a frozen class's guards
    are :func:`_frozen_guards`' where they can be."""
    if not (frozen and _SHARE_GUARDS):
        return dataclasses.dataclass(
            cls, frozen=frozen, kw_only=kw_only, slots=slots, eq=False, repr=False
        )
    with _GUARDS_SWAP:  # dataclasses looks the function up when it makes the class
        setattr(dataclasses, "_frozen_get_del_attr", _frozen_guards)  # noqa: B010
        try:
            return dataclasses.dataclass(
                cls, frozen=True, kw_only=kw_only, slots=slots, eq=False, repr=False
            )
        finally:
            setattr(dataclasses, "_frozen_get_del_attr", _STOCK_GUARDS)  # noqa: B010


def _make(cls: type[_T], frozen: bool, kw_only: bool, slots: bool) -> type[_T]:
    body = dict(cls.__dict__)
    made: Any = _dataclass(cls, frozen, kw_only, slots)
    fields = dataclasses.fields(made)
    compared = [f.name for f in fields if f.compare]
    hashed = [f.name for f in fields if (f.compare if f.hash is None else f.hash)]
    made._record_compare = staticmethod(_key(compared))
    made._record_hash = staticmethod(_key(hashed))
    made._record_repr = tuple(f.name for f in fields if f.repr)
    if "__repr__" not in body:
        made.__repr__ = _repr
    if "__eq__" not in body:
        made.__eq__ = _eq
    # What dataclass does with the hash (eq on, unsafe_hash off): a hash the body wrote
    # is kept (a __hash__ of None next to the body's own __eq__ is Python's, not written);
    # otherwise a frozen class hashes its fields and a mutable one has none.
    explicit = "__hash__" in body and not (body["__hash__"] is None and "__eq__" in body)
    if not explicit:
        made.__hash__ = _hash if frozen else None
    result: type[_T] = made
    return result


def _decorate(
    cls: type[_T] | None, frozen: bool, kw_only: bool, slots: bool
) -> type[_T] | Callable[[type[_T]], type[_T]]:
    """The class made, or (used with options) the decorator that makes it."""
    if cls is None:
        return lambda cls: _make(cls, frozen, kw_only, slots)
    return _make(cls, frozen, kw_only, slots)


@overload
def frozen(cls: type[_T], /) -> type[_T]: ...


@overload
def frozen(*, kw_only: bool = False, slots: bool = False) -> Callable[[type[_T]], type[_T]]: ...


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, dataclasses.Field))
def frozen(
    cls: type[_T] | None = None, /, *, kw_only: bool = False, slots: bool = False
) -> type[_T] | Callable[[type[_T]], type[_T]]:
    """``@dataclass(frozen=True, ...)`` with the shared ``__eq__``, ``__hash__``, ``__repr__``."""
    return _decorate(cls, True, kw_only, slots)


@overload
def mutable(cls: type[_T], /) -> type[_T]: ...


@overload
def mutable(*, kw_only: bool = False, slots: bool = False) -> Callable[[type[_T]], type[_T]]: ...


@dataclass_transform(field_specifiers=(dataclasses.field, dataclasses.Field))
def mutable(
    cls: type[_T] | None = None, /, *, kw_only: bool = False, slots: bool = False
) -> type[_T] | Callable[[type[_T]], type[_T]]:
    """``@dataclass(...)`` with the shared ``__eq__`` and ``__repr__`` (and no hash)."""
    return _decorate(cls, False, kw_only, slots)
