"""``sandbox_profiles.records``: classes made by ``frozen`` and ``mutable`` compare, hash
and print as the same class made by ``dataclasses.dataclass`` does, and keep everything
else ``dataclass`` gives them."""

from __future__ import annotations

import dataclasses
import itertools
import pickle
import sys
from dataclasses import field
from typing import Any, ClassVar

import pytest

from sandbox_profiles.records import frozen, mutable


def _pair(frozen_: bool, **options: Any) -> tuple[Any, Any]:
    """The same class body made twice: by ``dataclass`` and by this module."""

    def body() -> type:
        class Point:
            x: int
            y: str = "a"
            note: str = field(default="n", compare=False)
            secret: str = field(default="s", repr=False)
            tag: int = field(default=0, hash=False)
            many: tuple[int, ...] = ()
            ratio: float = 0.0
            ignored: ClassVar[int] = 3

        return Point

    ours: Any = (frozen if frozen_ else mutable)(**options)(body())
    theirs: Any = dataclasses.dataclass(frozen=frozen_, **options)(body())
    return ours, theirs


NAN = float("nan")

VALUES: list[dict[str, Any]] = [
    {"x": 1},
    {"x": 1, "y": "b"},
    {"x": 1, "note": "other"},  # not compared
    {"x": 1, "secret": "t"},  # compared, not printed
    {"x": 1, "tag": 5},  # compared, not hashed
    {"x": 2, "many": (1, 2)},
    {"x": 1, "many": (1, 2)},
    {"x": 1, "ratio": NAN},  # one object: equal to itself in a tuple, not as a field
]

OPTIONS = [{}, {"kw_only": True}, {"slots": True}]


@pytest.mark.parametrize("frozen_", [True, False], ids=["frozen", "mutable"])
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(o) or "plain")
def test_equality_hash_and_repr_are_dataclass_s(frozen_: bool, options: dict[str, Any]) -> None:
    ours, theirs = _pair(frozen_, **options)
    for a, b in itertools.product(VALUES, repeat=2):
        assert (ours(**a) == ours(**b)) == (theirs(**a) == theirs(**b)), (a, b)
        assert (ours(**a) != ours(**b)) == (theirs(**a) != theirs(**b)), (a, b)
    for a in VALUES:
        assert repr(ours(**a)) == repr(theirs(**a))
        if frozen_:
            assert hash(ours(**a)) == hash(theirs(**a))
        else:
            with pytest.raises(TypeError, match="unhashable"):
                hash(ours(**a))
    assert ours.__match_args__ == theirs.__match_args__
    assert [f.name for f in dataclasses.fields(ours)] == [
        f.name for f in dataclasses.fields(theirs)
    ]
    assert hasattr(ours, "__slots__") == hasattr(theirs, "__slots__")


def test_equality_only_between_instances_of_the_very_same_class() -> None:
    @frozen
    class A:
        x: int

    @frozen
    class B(A):
        pass

    class Other:
        def __eq__(self, other: object) -> bool:
            return True

    assert A(1) != B(1)
    assert A.__eq__(A(1), B(1)) is NotImplemented
    assert A(1) == Other()  # the other side's answer is asked for, as with dataclass
    assert A(1) != 1  # type: ignore[comparison-overlap]


@frozen(kw_only=True)
class Options:
    name: str
    things: tuple[str, ...] = field(default_factory=tuple)


def test_frozen_refuses_assignment_and_replace_makes_a_new_one() -> None:
    made = Options(name="a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.name = "b"  # type: ignore[misc]
    with pytest.raises(TypeError):
        Options("a")  # type: ignore[call-arg]
    changed = dataclasses.replace(made, name="b")
    assert (changed.name, made.name) == ("b", "a")
    assert dataclasses.asdict(changed) == {"name": "b", "things": ()}
    assert {made: 1}[Options(name="a")] == 1
    assert pickle.loads(pickle.dumps(made)) == made


def test_methods_the_class_body_writes_are_kept() -> None:
    @frozen
    class Secret:
        value: str

        def __repr__(self) -> str:
            return "Secret(***)"

    @frozen
    class ByLength:
        word: str

        def __eq__(self, other: object) -> bool:
            return isinstance(other, ByLength) and len(other.word) == len(self.word)

        def __hash__(self) -> int:
            return len(self.word)

    @frozen
    class OwnEqOnly:
        word: str

        def __eq__(self, other: object) -> bool:
            return True

    assert repr(Secret("x")) == "Secret(***)"
    assert ByLength("ab") == ByLength("cd")
    assert hash(ByLength("abc")) == 3
    # As dataclass does: a frozen class whose body wrote only __eq__ still hashes its fields.
    theirs: Any = dataclasses.dataclass(frozen=True)(
        type("OwnEqOnly", (), {"__annotations__": {"word": "str"}, "__eq__": lambda s, o: True})
    )
    assert hash(OwnEqOnly("a")) == hash(theirs("a"))


def test_a_repr_that_meets_the_same_object_again_stops_there() -> None:
    @mutable
    class Node:
        name: str
        children: list[Any] = field(default_factory=list)

    root = Node("root")
    root.children.append(root)
    ours = repr(root)

    @dataclasses.dataclass
    class Plain:
        name: str
        children: list[Any] = field(default_factory=list)

    plain = Plain("root")
    plain.children.append(plain)
    assert ours == repr(plain).replace("Plain", "Node")
    assert ours.endswith(".<locals>.Node(name='root', children=[...])")


def _attempts(obj: Any) -> list[str]:
    """What each way of changing ``obj`` after it is made does: its outcome, in words."""
    outcomes = []
    for what, name in itertools.product(("set", "del"), ("x", "y", "fresh", "own")):
        try:
            if what == "set":
                setattr(obj, name, 7)
            else:
                delattr(obj, name)
            outcomes.append(f"{what} {name}: done")
        except Exception as exc:
            outcomes.append(f"{what} {name}: {type(exc).__name__}: {exc}")
    return outcomes


@pytest.mark.parametrize(
    "options", [{}, {"slots": True}, {"kw_only": True}], ids=["plain", "slots", "kw_only"]
)
@pytest.mark.parametrize("sub", [False, True], ids=["the-class", "a-plain-subclass"])
def test_a_frozen_class_refuses_every_change_as_dataclass_s_does(
    options: dict[str, Any], sub: bool
) -> None:
    # Fields set, deleted, a new attribute added, on the class and on a plain subclass
    # (where a new attribute may be added): each outcome, error message included, is the
    # one the same class made by dataclass(frozen=True) gives.
    ours, theirs = _pair(True, **options)
    results = []
    for cls in (ours, theirs):
        made = type("Sub", (cls,), {}) if sub and not options.get("slots") else cls
        obj = made(x=1) if options.get("kw_only") else made(1)
        results.append(_attempts(obj))
    assert results[0] == results[1]
    assert any("FrozenInstanceError: cannot assign to field 'x'" in r for r in results[0])


def test_frozen_guards_are_not_compiled_for_each_class() -> None:
    # Two frozen classes share their guards' code (closures), where dataclasses allows it.
    first, _ = _pair(True)
    second, _ = _pair(True, kw_only=True)
    if sys.version_info >= (3, 13):
        pytest.skip("dataclasses makes the guards its own way here")
    assert first.__setattr__.__code__ is second.__setattr__.__code__
    assert first.__delattr__.__code__ is second.__delattr__.__code__
    # and dataclass itself is left as it was: a class it makes has guards of its own
    _, theirs = _pair(True)
    assert theirs.__setattr__.__code__ is not first.__setattr__.__code__
