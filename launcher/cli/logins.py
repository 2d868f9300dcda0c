"""Logins to remote servers, as ``ironcurtain auth`` shows and changes them: a few lines over
:mod:`launcher.servers.remote_login` and :mod:`launcher.servers.token_store`. No token is
ever printed."""

from __future__ import annotations

import asyncio
import os
import sys
import time

from launcher.plan.remote_plan import RemoteTarget
from launcher.plan.run_options import RunOptions
from launcher.plan.session_plan import plan_session
from launcher.servers.token_store import Login, StoreError, TokenStore, caller_shown
from launcher.shared.shown import visible
from launcher.shared.user_errors import ConfigError, UsageError


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _failed(text: str) -> int:
    _say(f"ironcurtain: error: {visible(text, one_line=True)}")
    return 1


def _target(server: str, config: str | None) -> RemoteTarget:
    try:
        plan = plan_session(RunOptions(config=config, servers=(server,), display_only=True))
    except UsageError as exc:
        if exc.option != "servers":
            raise
        raise UsageError(f"server '{server}': {exc.text}") from None
    remote = plan.servers[server].remote
    if remote is None:
        raise UsageError(
            f"server '{server}' is a local server (a command): "
            "only a remote one (a url) is logged in to"
        )
    return remote


def caller_of(name: str | None, issuer: str | None) -> str | None:
    """The caller a login is for (``--caller`` and ``--issuer``, both or neither), as its
    logins are kept; None: the user's own."""
    from launcher.servers.token_store import caller_key
    from launcher.shared.caller_identity import name_problem

    if name is None and issuer is None:
        return None
    if name is None or issuer is None:
        given, missing = ("--caller", "--issuer") if issuer is None else ("--issuer", "--caller")
        raise UsageError(f"{given} needs {missing} too: a caller is its name and its issuer")
    problem = name_problem(name)
    if problem is not None:
        raise UsageError(f"--caller {visible(repr(name), one_line=True)}: the name {problem}")
    if not issuer.startswith(("https://", "http://")) or any(c.isspace() for c in issuer):
        raise UsageError(
            f"--issuer {visible(repr(issuer), one_line=True)}: expected the identity "
            "provider's issuer URL, as run's --oidc-issuer"
        )
    return caller_key(issuer, name)


def log_in(server: str, config: str | None, wait: float, caller: str | None = None) -> int:
    from launcher.servers.remote_login import LoginFailed
    from launcher.servers.remote_login import log_in as logging_in

    target = _target(server, config)
    try:
        secret = target.auth.secret(os.environ)
    except ValueError as exc:
        raise UsageError(f"server '{server}': auth.clientSecret: {exc}") from None
    try:
        login = asyncio.run(
            logging_in(server, target, _say, caller=caller, wait=wait, secret=secret)
        )
    except (LoginFailed, StoreError) as exc:
        return _failed(str(exc))
    whose = f" for the {caller_shown(caller)}" if caller else ""
    print(f"Logged in to '{server}' ({target.where}){whose}: {_described(login)}")
    return 0


def show_status(server: str | None) -> int:
    try:
        logins = TokenStore().logins()
    except StoreError as exc:
        return _failed(str(exc))
    if server is not None:
        logins = [login for login in logins if login["server"] == server]
        if not logins:
            print(f"{server}: not logged in (run `ironcurtain auth login {server}`)")
            return 1
    if not logins:
        print("No logins are kept.")
    for login in logins:
        key = login.get("caller")
        whose = f" ({caller_shown(key)})" if key else ""
        print(f"{login['server']}{whose}: {login['url']}: {_described(login)}")
    return 0


def log_out(server: str, config: str | None, caller: str | None = None) -> int:
    """Revoke the login at its authorization server where it offers that (RFC 7009), then
    forget it here (whatever the answer: a failed revocation is said, exit status 1)."""
    from launcher.servers.remote_logout import RevokeFailed, revoke

    store = TokenStore()
    try:
        login = store.load(server, caller)
    except StoreError as exc:
        return _failed(str(exc))
    if login is None:
        print(f"{server}: no login was kept")
        return 0
    try:
        revoked: str | None = asyncio.run(revoke(login, _logout_target(server, config, login)))
        failed = None
    except RevokeFailed as exc:
        revoked, failed = None, str(exc)
    store.remove(server, caller)
    if failed is not None:
        return _failed(
            f"server '{server}': its login is forgotten here, but its authorization server "
            f"did not revoke it ({failed}): revoke the grant there"
        )
    there = (
        f"its tokens are revoked at {login.get('issuer') or 'its authorization server'}"
        if revoked
        else "its authorization server offers no revocation (it may keep the grant until it "
        "expires or you revoke it there)"
    )
    print(f"Logged out of '{server}': its login is forgotten here; {there}")
    return 0


def _logout_target(server: str, config: str | None, login: Login) -> RemoteTarget:
    """The server as the config has it (its ``hosts`` pins), else as the login has it."""
    from launcher.plan.config_schema import ServerConfig
    from launcher.plan.remote_plan import target_of

    try:
        return _target(server, config)
    except (UsageError, ConfigError):
        return target_of(ServerConfig(url=login["url"]))


def _described(login: Login, now: float | None = None) -> str:
    """A login in words: expiry, refreshable or not, scopes, who issued it; never a token.

    >>> _described({"server": "s", "url": "u", "expires_at": 130.0, "issuer": "https://as",
    ...             "tokens": {"access_token": "t", "refresh_token": "r", "scope": "read"}},
    ...            now=100.0)
    'logged in; the token expires in 30 s (refreshed as needed); scopes: read; issued by https://as'
    """
    tokens = login.get("tokens", {})
    left = login.get("expires_at")
    now = time.time() if now is None else now
    if left is None:
        when = "the token has no stated expiry"
    elif left > now:
        when = f"the token expires in {_span(left - now)}"
    else:
        when = f"the token expired {_span(now - left)} ago"
    refresh = "refreshed as needed" if tokens.get("refresh_token") else "no refresh token"
    scopes = tokens.get("scope") or "(none stated)"
    issuer = login.get("issuer") or "(unknown)"
    return f"logged in; {when} ({refresh}); scopes: {scopes}; issued by {issuer}"


def _span(seconds: float) -> str:
    """
    >>> _span(30), _span(600), _span(7300)
    ('30 s', '10 min', '2 h 1 min')
    """
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"
