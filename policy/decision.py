"""What the policy engine answers, and the protections no rule can override.

A :class:`Decision` is ``allow``, ``deny`` or ``escalate`` with the rule and the reason.
:class:`StructuralConfig` holds the hard-coded protections of a session: its protected paths
(config, policy, audit log), ironcurtain's state directory, the system roots.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import field
from typing import Literal

from policy.paths import SYSTEM_ROOTS, is_under
from sandbox_profiles.records import frozen

DecisionKind = Literal["allow", "deny", "escalate"]


@frozen(slots=True)
class Decision:
    """What the policy says of one request: allow, deny or escalate, by which rule and why."""

    decision: DecisionKind
    rule: str
    reason: str


UNKNOWN_TOOL = Decision(
    "deny", "structural-unknown-tool", "tool has no annotation, so it is never called"
)


@frozen
class StructuralConfig:
    """Hard-coded protections, derived from the session's configuration, never compiled.

    ``protected`` maps canonical paths to a label used in reasons. ``state_dir`` is
    protected as a whole except for the ``exempt`` directories (this session's workspace).
    """

    protected: Mapping[str, str] = field(default_factory=dict)
    state_dir: str | None = None
    exempt: tuple[str, ...] = ()
    system_roots: tuple[str, ...] = SYSTEM_ROOTS
    # Every guarded directory as an exact path and as a prefix, so that the common answer
    # (the path is under none of them) is two C-level string tests, whatever their number.
    _guarded: _Prefixes = field(init=False, repr=False, compare=False)
    _system: _Prefixes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        guarded = [*self.protected, *([self.state_dir] if self.state_dir else [])]
        object.__setattr__(self, "_guarded", _Prefixes(guarded))
        object.__setattr__(self, "_system", _Prefixes(self.system_roots))

    def protected_label(self, path: str, removing: bool = False) -> str | None:
        if not self._guarded.covers(path) and not (removing and self._guarded.any_below(path)):
            return None
        for target, label in self.protected.items():
            if is_under(path, target) or (removing and is_under(target, path)):
                return label
        state = self.state_dir
        if (
            state is not None
            and (is_under(path, state) or (removing and is_under(state, path)))
            # An exemption only carves a directory out of the state dir, never the other
            # way round: a workspace that *contains* the state dir exempts nothing.
            and not any(
                is_under(path, e) and e != state and is_under(e, state) for e in self.exempt
            )
        ):
            return "ironcurtain's state directory"
        return None

    def system_root(self, path: str) -> str | None:
        """The system root ``path`` is in, if any."""
        if not self._system.covers(path):
            return None
        return next(root for root in self.system_roots if is_under(path, root))


class _Prefixes:
    """``covers(p)``: ``is_under(p, d)`` for some ``d`` of a fixed set, in two C calls."""

    def __init__(self, directories: Iterable[str]) -> None:
        dirs = list(directories)
        self.exact = frozenset(dirs)
        self.prefixes = tuple(os.sep if d == os.sep else d.rstrip(os.sep) + os.sep for d in dirs)

    def covers(self, path: str) -> bool:
        return path in self.exact or path.startswith(self.prefixes)

    def any_below(self, path: str) -> bool:
        """Whether some ``d`` is ``path`` or below it (removing ``path`` removes ``d``)."""
        below = os.sep if path == os.sep else path.rstrip(os.sep) + os.sep
        return path in self.exact or any(d.startswith(below) for d in self.exact)


def deny_protected(arg: str, label: str) -> Decision:
    return Decision(
        "deny",
        "structural-protected-path",
        f"argument '{arg}' points into {label}, which is protected",
    )
