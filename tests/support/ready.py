"""Waiting for ``ironcurtain run --http`` to be ready (tests, benchmarks, the conformance
script): its stderr read up to the line that says where it serves."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable

_SERVING = re.compile(r"ready, serving MCP on (http://\S+)")


def serving_url(stderr: Iterable[str], echo: bool = False) -> tuple[str, list[str]]:
    """The URL ironcurtain serves on, and the lines read up to it ("" when its output ended
    first: the lines say why); ``echo`` copies them to this process's stderr."""
    said: list[str] = []
    for line in stderr:
        said.append(line)
        if echo:
            sys.stderr.write(line)
        if m := _SERVING.search(line):
            return m.group(1), said
    return "", said
