"""Tool-list pinning: a server whose tools change is not silently trusted.

Each tool a server lists is fingerprinted (name, description, input schema). The first
session with a server records the fingerprints in ``<state>/pins/<server>.json`` (trust on
first use); later sessions, and a ``tools/list_changed`` during one, compare: a tool that is
new or whose description or schema changed has its calls escalated to a human instead of
allowed, until the user accepts the change (``run --accept-tool-changes``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from launcher.audit import hash_value


def fingerprint(tool: Mapping[str, Any]) -> str:
    """What a model reads of a tool and what it sends it: description and input schema.

    >>> a, b = {"name": "a", "description": "x"}, {"name": "a", "description": "y"}
    >>> fingerprint(a) == fingerprint(b)
    False
    """
    return hash_value(
        {
            "name": tool.get("name"),
            "title": tool.get("title"),
            "description": tool.get("description"),
            "inputSchema": tool.get("inputSchema"),
        }
    )


@dataclass
class Pins:
    path: str
    pinned: dict[str, str]  # tool name -> fingerprint
    existed: bool

    @classmethod
    def load(cls, directory: str, server: str) -> Pins:
        path = os.path.join(directory, f"{server}.json")
        try:
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
            tools = data.get("tools") if isinstance(data, dict) else None
            if isinstance(tools, dict):
                return cls(path, {str(k): str(v) for k, v in tools.items()}, True)
        except (OSError, ValueError):
            pass
        return cls(path, {}, False)

    def changed(self, tools: Iterable[Mapping[str, Any]]) -> dict[str, str]:
        """Tools that differ from the pins: name -> "new" or "changed"."""
        out: dict[str, str] = {}
        for tool in tools:
            name = str(tool.get("name", ""))
            if name not in self.pinned:
                out[name] = "new"
            elif self.pinned[name] != fingerprint(tool):
                out[name] = "changed"
        return out

    def save(self, tools: Iterable[Mapping[str, Any]]) -> None:
        """Pin these tools (and only these), atomically."""
        self.pinned = {str(t.get("name", "")): fingerprint(t) for t in tools}
        os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump({"tools": self.pinned}, handle, indent=2, sort_keys=True)
        os.replace(tmp, self.path)
        self.existed = True
