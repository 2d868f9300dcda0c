"""A browser for ``$BROWSER`` that approves: it follows the authorization address it is
given to the authorization server's answer, and takes that answer back to where it points
(the loopback receiver of the login).

``$TAMPER`` set to ``NAME=VALUE``: the answer's parameter NAME is replaced by VALUE on its
way back (a forged ``state``, the ``iss`` of another authorization server: what a mix-up or
cross-site attack would hand the receiver).

Usage: ``approving_browser.py URL``
"""

from __future__ import annotations

import os
import sys
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx2


def _tampered(location: str) -> str:
    change = os.environ.get("TAMPER")
    if not change:
        return location
    name, _, value = change.partition("=")
    parts = urlsplit(location)
    query = dict(parse_qsl(parts.query))
    query[name] = value
    return urlunsplit(parts._replace(query=urlencode(query)))


def main() -> None:
    with httpx2.Client(timeout=30, trust_env=False) as client:
        answer = client.get(sys.argv[1])
        while answer.is_redirect and "code=" not in answer.headers["location"]:
            answer = client.get(answer.headers["location"])
        assert answer.is_redirect, answer.status_code
        client.get(_tampered(answer.headers["location"]))


if __name__ == "__main__":
    main()
