"""Validating and writing the policy's plain data classes, with pydantic loaded only then.

The classes read on every start (the annotations, the compiled rules) are frozen standard
dataclasses: defining and reading them needs no pydantic. Their JSON names, bounds and
validators are written into their annotations as ``Annotated[..., pyd.Field(...)]``. Those
annotations are strings (``from __future__ import annotations``) that pydantic evaluates
when it first builds a validator for the class, and ``pyd`` stands for the pydantic
module, imported at that moment. So a file is checked with pydantic's own rules and error
locations, and a process that never validates one never imports pydantic.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import pydantic as pyd
    from pydantic import TypeAdapter
else:

    class _Pydantic:
        """The pydantic module, imported at the first attribute read."""

        def __getattr__(self, name: str) -> Any:
            return getattr(importlib.import_module("pydantic"), name)

    pyd = _Pydantic()

T = TypeVar("T")

__all__ = ["dump", "pyd", "validate"]


_ADAPTERS: dict[type[Any], TypeAdapter[Any]] = {}


def _adapter(cls: type[Any]) -> TypeAdapter[Any]:
    adapter = _ADAPTERS.get(cls)
    if adapter is None:
        adapter = _ADAPTERS[cls] = pyd.TypeAdapter(cls)
    return adapter


def validate(cls: type[T], data: object) -> T:
    """``data`` (parsed JSON) as a ``cls``; a ``pydantic.ValidationError`` names each
    problem with its location, JSON names included."""
    result: T = _adapter(cls).validate_python(data)
    return result


def dump(value: object, *, exclude_none: bool = True) -> dict[str, Any]:
    """A dataclass as its JSON object, under its JSON names.

    >>> from policy.models import PathCondition
    >>> dump(PathCondition(roles=["read-path"], within="/w"))
    {'roles': ['read-path'], 'within': '/w'}
    """
    data: dict[str, Any] = _adapter(type(value)).dump_python(
        value, mode="json", by_alias=True, exclude_none=exclude_none
    )
    return data
