"""A browser for ``$BROWSER`` that approves: it follows the authorization address it is
given to the authorization server's answer, and takes that answer back to where it points
(the loopback receiver of the login).

``$TAMPER`` set to ``NAME=VALUE``: the answer's parameter NAME is replaced by VALUE on its
way back (a forged ``state``, the ``iss`` of another authorization server: what a mix-up or
cross-site attack would hand the receiver).

``$RECORD`` set to a path: the address it is given is appended there (a line) first.
``$RACE`` set to ``wrong-state`` or ``error``: before the answer, another process's forged
answer (a code of its own with a state it guessed, or an ``error``) reaches the receiver first.

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


def _race(client: httpx2.Client, address: str) -> None:
    """Another local process's answer, sent to the receiver named in ``address`` first."""
    race = os.environ.get("RACE")
    if not race:
        return
    receiver = dict(parse_qsl(urlsplit(address).query))["redirect_uri"]
    forged = {"code": "forged-code", "state": "guessed"} if race == "wrong-state" else {}
    if race == "error":
        forged = {"error": "access_denied", "error_description": "forged"}
    client.get(f"{receiver}?{urlencode(forged)}")


def main() -> None:
    record = os.environ.get("RECORD")
    if record:
        with open(record, "a") as out:
            out.write(sys.argv[1] + "\n")
    with httpx2.Client(timeout=30, trust_env=False) as client:
        _race(client, sys.argv[1])
        answer = client.get(sys.argv[1])
        while answer.is_redirect and "code=" not in answer.headers["location"]:
            answer = client.get(answer.headers["location"])
        assert answer.is_redirect, answer.status_code
        client.get(_tampered(answer.headers["location"]))


if __name__ == "__main__":
    main()
