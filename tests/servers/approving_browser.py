"""A browser for ``$BROWSER`` that approves: it follows the authorization address it is
given, and every redirect after it, to the end (the loopback receiver of the login).

Usage: ``approving_browser.py URL``
"""

from __future__ import annotations

import sys

import httpx2


def main() -> None:
    with httpx2.Client(follow_redirects=True, timeout=30, trust_env=False) as client:
        client.get(sys.argv[1]).raise_for_status()


if __name__ == "__main__":
    main()
