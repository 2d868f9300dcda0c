#!/usr/bin/env python3
"""Print the catalogue of what host tools load or run as the Markdown table that
docs/containment.md holds (tests check the two agree): scripts/catalogue_table.py"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sandbox_profiles import autorun


def table() -> str:
    rows = ["| what | who loads or runs it | source | test |", "|---|---|---|---|"]
    for entry in autorun.CATALOGUE:
        what = entry.match if " " in entry.match else f"`{entry.match}`"
        rows.append(f"| {what} | {entry.loaded_by} | {entry.source} | {entry.test} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    sys.stdout.write(table())
