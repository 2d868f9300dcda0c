"""The settings of a session as the command line gives them: light to import, so the
command line can read them before anything that plans a session is loaded."""

from __future__ import annotations

from sandbox_profiles.records import frozen


# sandbox_profiles.records loads only the standard library: this module stays light.
@frozen
class RunOptions:
    """The options of ``ironcurtain run`` (and of the commands that plan as it does)."""

    config: str | None = None
    policy_dir: str | None = None
    workspace: str | None = None
    servers: tuple[str, ...] = ()
    audit_log: str | None = None
    allow_unsandboxed: bool = False
    allow_no_seccomp: bool = False
    audit_args: str = "hashed"  # or "clear": arguments in clear, PII fields still hashed
    approval: str = "auto"  # auto | elicit | socket | deny
    approval_timeout: float = 120.0
    max_identical_calls: int = 30  # per minute; 0: no circuit breaker
    accept_tool_changes: bool = False  # re-pin every server's tools at start
    http_port: int | None = None  # streamable HTTP on 127.0.0.1 instead of stdio
    http_bind: str = "127.0.0.1"  # the address it listens on (beyond loopback: public_url)
    public_url: str | None = None  # where clients reach it (behind a balancer or an ingress)
    http_token_file: str | None = (
        None  # where its bearer token is (else launcher.transports.http.bearer_token)
    )
    caller_file: str | None = None  # the caller of every request over stdio
    oidc_issuer: str | None = None  # with http_port: callers by their identity provider's JWT
    oidc_audience: str | None = None
    oidc_jwks_url: str | None = None  # else from the issuer's discovery document
    permissions_claim: str = "scope"
    # With oidc_issuer: CLAIM=GLOB each admitted token's claims must match.
    oidc_require: tuple[str, ...] = ()
    max_clients: int = 16  # over HTTP: sessions (and callers) served at once, each own servers
    # Over HTTP: where instances of one gateway share their state (redis://...); None: in
    # this process, this instance's own.
    state: str | None = None
    # Plan to show, not to run (no probes, nothing refused).
    display_only: bool = False
    # No callers, yet ${caller} is kept as it is (as in a plan for every caller): for
    # commands that only list the servers' tools or read the plan.
    every_caller: bool = False
    # Every server started only to list its tools: nothing writable (neither the workspace
    # nor its allowWrite, shown read-only), whatever its config and annotations say.
    read_only: bool = False
