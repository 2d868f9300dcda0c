"""Who the session's callers are: the one caller a file names (a session on stdio), or, over
HTTP, callers authenticated by their identity provider's JWTs (gateway mode), whose keys
are fetched now, before any server starts, so that a wrong issuer or an unreachable JWKS
stops the session at once."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Protocol

from launcher.plan.config import CALLER
from launcher.shared.user_errors import OptionError

if TYPE_CHECKING:
    from launcher.shared.caller_identity import Caller
    from launcher.transports.http.gateway.keys import Gateway


class RunOptions(Protocol):
    """The options of ``run`` this reads."""

    @property
    def http_port(self) -> int | None: ...
    @property
    def http_token_file(self) -> str | None: ...
    @property
    def caller_file(self) -> str | None: ...
    @property
    def oidc_issuer(self) -> str | None: ...
    @property
    def oidc_audience(self) -> str | None: ...
    @property
    def oidc_jwks_url(self) -> str | None: ...
    @property
    def permissions_claim(self) -> str: ...
    @property
    def oidc_require(self) -> tuple[str, ...]: ...
    @property
    def workspace(self) -> str | None: ...
    @property
    def public_url(self) -> str | None: ...


_OIDC = ("oidc_issuer", "oidc_audience", "oidc_jwks_url")


def _workspace_names_caller_plainly(workspace: str | None) -> None:
    """A workspace names the caller only as ``${caller}`` itself: another form (a default,
    ``$caller``) is not replaced, and every caller would share the one directory so named.

    >>> _workspace_names_caller_plainly("/srv/work/${caller}/files")
    >>> _workspace_names_caller_plainly("/srv/work/${caller:-anon}")
    Traceback (most recent call last):
    launcher.shared.user_errors.OptionError: ...
    """
    rest = (workspace or "").replace(CALLER, "")
    if re.search(r"\$\{?\s*caller\b", rest):
        raise OptionError(
            "workspace",
            workspace or "",
            "names the caller in a form a workspace does not take: only ${caller} itself "
            "is replaced by each caller's name (as it is, every caller would share this one "
            "directory)",
        )


def check_caller_options(opts: RunOptions) -> None:
    """The caller settings go together as they must (each refusal names the setting)."""
    if opts.caller_file is not None and opts.http_port is not None:
        raise OptionError(
            "caller_file",
            opts.caller_file,
            "names the caller of a session on stdio; over HTTP use the OIDC options "
            "({oidc_issuer} and {oidc_audience})",
            mentions=("oidc_issuer", "oidc_audience"),
        )
    given = {name: getattr(opts, name) for name in _OIDC if getattr(opts, name) is not None}
    if opts.permissions_claim != "scope":
        given["permissions_claim"] = opts.permissions_claim
    if opts.oidc_require:
        given["oidc_require"] = opts.oidc_require[0]
    if given and opts.http_port is None:
        name = next(iter(given))
        raise OptionError(
            name, given[name], "is only used with {http_port}", mentions=("http_port",)
        )
    if "oidc_issuer" in given and "oidc_audience" not in given and opts.public_url is None:
        raise OptionError(
            "oidc_issuer",
            opts.oidc_issuer,
            "needs {oidc_audience} (or {public_url}, then the audience): the audience its "
            "tokens must be issued for",
            mentions=("oidc_audience", "public_url"),
        )
    if given and "oidc_issuer" not in given:
        name = next(iter(given))
        raise OptionError(
            name, given[name], "is only used with {oidc_issuer}", mentions=("oidc_issuer",)
        )
    _workspace_names_caller_plainly(opts.workspace)
    if opts.oidc_require:
        from launcher.transports.http.gateway.admission import requirement

        for text in opts.oidc_require:
            requirement(text)
    if opts.http_token_file is not None and "oidc_issuer" in given:
        raise OptionError(
            "http_token_file",
            opts.http_token_file,
            "is not used with {oidc_issuer}: every request then carries its caller's JWT",
            mentions=("oidc_issuer",),
        )


def _resource(public_url: str | None) -> str | None:
    """The endpoint's URL as its protected resource metadata names it."""
    if public_url is None:
        return None
    from launcher.transports.http.public_address import Reached

    return Reached(0, public_url).url


def plan_callers(opts: RunOptions) -> tuple[Caller | None, Gateway | None]:
    """The static caller (a caller file), or the gateway's verifier with its keys fetched
    (raises :class:`OptionError` naming the setting when they cannot be)."""
    if opts.caller_file is not None:
        from launcher.shared.caller_identity import load_caller_file

        return load_caller_file(opts.caller_file, "caller_file"), None
    # A token is for the endpoint clients reach (the resource they ask a token for, as
    # MCP's authorization asks), unless the operator names another audience.
    audience = opts.oidc_audience or _resource(opts.public_url)
    if opts.oidc_issuer is None or audience is None:
        return None, None
    from launcher.transports.http.gateway.admission import requirement
    from launcher.transports.http.gateway.keys import gateway

    required = tuple(requirement(text) for text in opts.oidc_require)
    return None, gateway(
        opts.oidc_issuer, audience, opts.oidc_jwks_url, opts.permissions_claim, required
    )
