"""A caller's own places, and every other caller's, in a session whose workspace or server
directories are each caller's (a path naming the caller's name made safe for a path).

Two questions are asked of a path a call names: whether it lies in another caller's place,
or holds the directory their places are made in (such a call is denied, whatever a human
would say: no approval reaches another caller's files); and whether it lies in the caller's
own places (what a caller's own client may be asked to approve never goes beyond them).

Pure logic over the paths the plan gives; nothing is read from the disk but the real path
of the directories that hold the callers' places.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence

from sandbox_profiles.records import frozen
from sandbox_profiles.ways import is_under


@frozen
class CallerPlaces:
    """``own``: the real paths of this caller's places; ``shapes``: for each kind of place
    the callers have, the directory that holds every caller's, a pattern the directory
    naming a caller there matches, and the one naming this caller."""

    own: tuple[str, ...]
    shapes: tuple[tuple[str, re.Pattern[str], str], ...]

    @classmethod
    def of(
        cls, own: Iterable[str], templates: Iterable[str], variable: str, name: str
    ) -> CallerPlaces:
        """The places of the caller ``name`` (made safe for a path): ``own`` (real paths),
        and ``templates``, the same places as every caller's (``variable`` standing for a
        caller's name).

        >>> places = CallerPlaces.of(["/w/alice/files"], ["/w/${c}/files"], "${c}", "alice")
        >>> [places.others(p) for p in ("/w/bob/files/x", "/w/bob", "/w", "/w/alice/x")]
        [True, True, True, False]
        >>> places.beyond_own(["/w/alice/files/a", "/w/alice/notes"])
        '/w/alice/notes'
        """
        shapes = []
        for template in dict.fromkeys(templates):
            if variable not in template or not os.path.isabs(template):
                continue
            head, _, rest = template.partition(variable)
            parent = os.path.dirname(head)
            holder = os.path.realpath(parent or "/").rstrip("/")
            # The component that names the caller: from the holder to the next separator.
            component = head[len(parent) :] + variable + rest.split("/", 1)[0]
            pieces = [re.escape(p) for p in component.split(variable)]
            pattern = re.compile(re.escape(holder) + "[^/]+".join(pieces) + "(?:/|$)")
            mine = holder + component.replace(variable, name)
            shapes.append((holder or "/", pattern, mine))
        return cls(tuple(os.path.realpath(p) for p in own), tuple(shapes))

    def is_own(self, path: str) -> bool:
        """``path`` lies in (or is) one of the caller's own places."""
        return any(is_under(path, place) for place in self.own)

    def others(self, path: str) -> bool:
        """``path`` lies in another caller's directory, or holds the directory where every
        caller's are made (a move, removal or listing of it reaches them all)."""
        for holder, pattern, mine in self.shapes:
            if is_under(holder, path):
                return True
            if pattern.match(path) and not is_under(path, mine):
                return True
        return False

    def beyond_own(self, paths: Sequence[str]) -> str:
        """The first of ``paths`` not in the caller's own places ('' when each is)."""
        return next((path for path in paths if not self.is_own(path)), "")
