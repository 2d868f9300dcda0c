"""Where a session's servers work: the workspace given, or one of ironcurtain's own, and
the places it must never be. A workspace given as ``/srv/work/${caller}`` is each caller's
own: ``${caller}`` stands for the caller's name made safe for a path
(:func:`launcher.shared.caller_identity.path_name`)."""

from __future__ import annotations

import contextlib
import os
import pwd

from launcher.plan.config import CALLER
from launcher.shared import dirs, rundir
from launcher.shared.user_errors import OptionError
from policy.paths import resolve_real_path
from sandbox_profiles.ways import is_under
from sandbox_profiles.writable_roots import root_problem

NEEDS_CALLER = (
    "names ${caller}, the caller's name, and this session has no caller: give "
    "{caller_file}, or {oidc_issuer} and {oidc_audience} with {http_port}"
)
_CALLER_OPTIONS = ("caller_file", "oidc_issuer", "oidc_audience", "http_port")


def workspace_for(given: str | None, session_id: str, caller: str | None) -> str:
    """The real path of the session's workspace: ``given`` (``${caller}`` in it replaced by
    ``caller``: a caller's name made safe for a path, or :data:`CALLER` itself in a plan
    for every caller), else a new one in ironcurtain's state directory.

    >>> workspace_for("/srv/work/${caller}/files", "s", "billing-agent")
    '/srv/work/billing-agent/files'
    """
    if not given:
        return resolve_real_path(str(dirs.state_dir() / "workspaces" / session_id))
    expanded = given
    if CALLER in given:
        if caller is None:
            raise OptionError("workspace", given, NEEDS_CALLER, mentions=_CALLER_OPTIONS)
        expanded = given.replace(CALLER, caller)
    workspace = resolve_real_path(os.path.expanduser(expanded))
    if caller not in (None, CALLER) and CALLER in given and leads_elsewhere(given, caller):
        raise OptionError(
            "workspace",
            expanded,
            "leads elsewhere through a symbolic link; a caller's workspace must be a "
            "directory where ${caller} puts it",
        )
    if os.path.exists(workspace) and not os.path.isdir(workspace):
        raise OptionError("workspace", expanded, "exists and is not a directory")
    return workspace


def leads_elsewhere(template: str, caller: str) -> bool:
    """Whether ``template`` with ``${caller}`` put in is not where the name puts it: a
    symbolic link on the way (to another caller's directory, or out of the directory that
    holds them all).

    >>> leads_elsewhere("/nonexistent/${caller}/files", "bob")
    False
    """
    real = resolve_real_path(os.path.expanduser(template.replace(CALLER, caller)))
    where = resolve_real_path(os.path.expanduser(template)).replace(CALLER, caller)
    return real != os.path.normpath(where)


def check_workspace(workspace: str, given: str | None) -> None:
    """A workspace in ironcurtain's state directory is one of its workspaces, or nothing:
    a server may write its whole workspace, and the rest of that directory (audit logs,
    tool pins, the validated config and policy read at the next start) must stay out of
    its reach."""
    state = resolve_real_path(str(dirs.state_dir()))
    workspaces = os.path.join(state, "workspaces")
    if is_under(workspace, state) and not (
        is_under(workspace, workspaces) and workspace != workspaces
    ):
        raise OptionError(
            "workspace",
            given,
            f"is in ironcurtain's state directory {state}, whose audit logs, tool pins and "
            "validated files a server working there could rewrite; use a directory outside "
            f"it (or one of {workspaces}/*)",
        )
    for base in rundir.bases():
        if is_under(os.path.realpath(base), workspace):
            raise OptionError(
                "workspace",
                given,
                f"holds {base}, where every ironcurtain session keeps its sockets "
                "(approvals, egress proxies), which a server working there could connect "
                "to; use a directory inside it",
            )
    why = root_problem(workspace, homes(workspace), moved_places())
    if why is not None:
        raise OptionError("workspace", given or workspace, refused_root(workspace, why))


def homes(*near: str) -> dict[str, str]:
    """Every home directory, with whose it is: ``$HOME`` and the user database's own entry
    for this user, every user's of the database (system accounts' too: git run as
    ``www-data`` reads ``/var/www/.gitconfig``), and the home of the owner of each of
    ``near`` (a directory service may not list its users: the owner of a directory that is
    a home is looked up by itself)."""
    found: dict[str, str] = {}
    own = [os.path.expanduser("~")]
    with contextlib.suppress(KeyError):
        own.append(pwd.getpwuid(os.getuid()).pw_dir)
    users = []
    for path in near:
        with contextlib.suppress(OSError, KeyError):
            users.append(pwd.getpwuid(os.stat(path).st_uid))
    for home in own:
        if os.path.isabs(home):
            found.setdefault(home, "your home directory")
    for user in [*users, *pwd.getpwall()]:
        if os.path.isabs(user.pw_dir):
            found.setdefault(user.pw_dir, f"the home directory of {user.pw_name}")
    return found


# The directories of the home the environment may put elsewhere, with where they usually are.
_XDG_PLACES = (("XDG_CONFIG_HOME", ".config"), ("XDG_DATA_HOME", ".local/share"))


def moved_places() -> dict[str, tuple[str, str]]:
    """Each directory of the home the environment names (``$XDG_CONFIG_HOME``...), with
    its variable and its usual place: the catalogue knows what tools load there by the
    usual place (``.config/direnv``), wherever the variable puts it."""
    found: dict[str, tuple[str, str]] = {}
    for variable, usual in _XDG_PLACES:
        value = os.environ.get(variable, "")
        if os.path.isabs(value):
            found.setdefault(value, (variable, usual))
    return found


def refused_root(path: str, why: str) -> str:
    """The one line that says why ``path`` is never a writable root.

    >>> refused_root("/home/al", "is your home directory")[:47]
    '/home/al is your home directory: never writable'
    """
    fix = (
        "name a directory inside it"
        if why.startswith(("is your home", "is the home directory", "holds"))
        else "name a directory outside it"
    )
    real = os.path.realpath(path)
    named = f"{path} is a link to {real}, which" if real != os.path.normpath(path) else path
    return (
        f"{named} {why}: never writable by a server (what it wrote there, your shell, git or "
        f"editor would load or run); {fix}"
    )
