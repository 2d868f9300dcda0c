"""Tool and prompt pinning: a server whose tools or prompts change is not silently trusted.

Each tool a server lists is fingerprinted (name, description, input schema), and each prompt
(name, description, arguments). The first session with a server records the fingerprints in
``<state>/pins/<server>.json`` (trust on first use; a file from before prompts were pinned
has its prompts pinned at the next start); later sessions, and a ``list_changed`` during
one, compare: a tool or prompt that is new or whose description, schema or arguments changed
is escalated to a human (and loses what was approved for the session) until the user
accepts the change (``run --accept-tool-changes``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

from launcher.audit.log import hash_value
from sandbox_profiles.records import mutable


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


def prompt_fingerprint(prompt: Mapping[str, Any]) -> str:
    """What a model reads of a prompt and what it is given: description and arguments.

    >>> a = {"name": "p", "arguments": [{"name": "url"}]}
    >>> prompt_fingerprint(a) == prompt_fingerprint({**a, "arguments": [{"name": "path"}]})
    False
    """
    return hash_value(
        {
            "name": prompt.get("name"),
            "title": prompt.get("title"),
            "description": prompt.get("description"),
            "arguments": prompt.get("arguments"),
        }
    )


def _fingerprints(items: Iterable[Mapping[str, Any]], kind: str) -> dict[str, str]:
    of = fingerprint if kind == "tools" else prompt_fingerprint
    return {str(item.get("name", "")): of(item) for item in items}


@mutable
class Pins:
    """A server's pinned tool (and prompt) fingerprints, as its pins file holds them."""

    path: str
    pinned: dict[str, str]  # tool name -> fingerprint
    existed: bool
    prompts: dict[str, str] | None = None  # prompt name -> fingerprint; None: never pinned

    @classmethod
    def load(cls, directory: str, server: str) -> Pins:
        path = os.path.join(directory, f"{server}.json")
        try:
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
            tools = data.get("tools") if isinstance(data, dict) else None
            prompts = data.get("prompts") if isinstance(data, dict) else None
            if isinstance(tools, dict):
                return cls(
                    path,
                    {str(k): str(v) for k, v in tools.items()},
                    True,
                    {str(k): str(v) for k, v in prompts.items()}
                    if isinstance(prompts, dict)
                    else None,
                )
        except (OSError, ValueError):
            pass
        return cls(path, {}, False)

    def changed(self, items: Iterable[Mapping[str, Any]], kind: str = "tools") -> dict[str, str]:
        """Tools (or prompts) that differ from the pins: name -> "new" or "changed"."""
        pinned = self.pinned if kind == "tools" else (self.prompts or {})
        out: dict[str, str] = {}
        for name, print_ in _fingerprints(items, kind).items():
            if name not in pinned:
                out[name] = "new"
            elif pinned[name] != print_:
                out[name] = "changed"
        return out

    def save(
        self, tools: Iterable[Mapping[str, Any]], prompts: Iterable[Mapping[str, Any]] = ()
    ) -> None:
        """Pin these tools and prompts (and only these), atomically."""
        self.pinned = _fingerprints(tools, "tools")
        self.prompts = _fingerprints(prompts, "prompts")
        os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(
                {"tools": self.pinned, "prompts": self.prompts}, handle, indent=2, sort_keys=True
            )
        os.replace(tmp, self.path)
        self.existed = True
