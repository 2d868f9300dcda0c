"""The definition ``wrap`` moves into ironcurtain's user config for one client entry: its
command, arguments, environment and working directory, and the mounts its sandbox gets from
its own path arguments (:mod:`launcher.clients.wrap.mounts` says which may be mounts).

Each value is first said in ironcurtain's form (:mod:`launcher.clients.catalogue.var_syntax`:
what its client fills from the environment becomes ``${NAME}``; what it passes as text must
stay text, or the entry is left alone).

A project's entry is the project's to shape. ``ironcurtain run`` fills every ``${NAME}`` of
a definition from its own environment, so a project's entry keeps references only as whole
values of its ``env`` that its client would have filled (each named when wrapped: that
project's server receives those variables); one in its command, arguments or working
directory leaves it unwrapped. A path that lies through the project, in a project's entry or
in one Claude Code keeps for that project ("local"), is mounted only when its real path is
inside the project: the project's contents, links included, are the project's. A user-level
entry's relative paths are not resolved: the directory its client starts it in is not known
(resolving them against where wrap runs would hand the user's server that project for good).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from launcher.clients.catalogue.known import (
    PROJECT_VARIABLES,
    ClientFile,
    Entry,
    home,
    ironcurtain_exe,
    secret_name,
    user_config,
    user_policy,
    workspace_of,
)
from launcher.clients.catalogue.var_syntax import WORKSPACE, LeftAlone, translate, unread
from launcher.clients.files.path_identity import identity, within
from launcher.clients.wrap.mounts import NEVER_WRITABLE, refusal
from launcher.clients.wrap.network import network_for, package_of
from launcher.clients.wrap.runnable import relative, script_index
from launcher.clients.wrap.secret_env import broker, credential_value
from sandbox_profiles.writable_roots import root_problem

__all__ = ["LeftAlone", "moved_definition", "references_environment"]

# As the bundled config has it for its git server.
GIT_SAFE_DIRECTORY = {
    "GIT_CONFIG_COUNT": "1",
    "GIT_CONFIG_KEY_0": "safe.directory",
    "GIT_CONFIG_VALUE_0": "*",
}
DIRECTORY_OPTIONS = ("--repository", "--repo", "--root", "--dir", "--directory", "--path")
# A whole value that is one reference: ${NAME} or ${NAME:-default}.
WHOLE_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-[^}$]*)?\}")


def git_server(e: Entry) -> bool:
    """Whether the entry starts the reference git server."""
    return any(Path(part).name == "mcp-server-git" for part in (e.command or "", *e.args))


def projects(f: ClientFile) -> bool:
    """Whether the entry is a project's (written by whoever wrote the project), not the
    user's own (their user files, and Claude Code's servers they keep for one project)."""
    return f.scope == "project"


def confined(f: ClientFile) -> bool:
    """Whether a path through the entry's project must stay inside it: a project's entry,
    and one Claude Code keeps for a project (it starts in the project directory)."""
    return f.project is not None and f.scope in ("project", "local")


def _no_reference(where: str, value: str) -> None:
    if "${" in value:
        raise LeftAlone(
            f"its {where} {value!r} refers to a variable (${{...}}), which ironcurtain would "
            "fill from your environment: a project's entry may refer to variables only as "
            "whole values of its env"
        )


def _through(path: str, project: Path) -> bool:
    """Whether ``path`` (absolute, as written) passes through ``project``: one of its
    leading parts, each taken as the kernel would reach it, is the project."""
    mark = identity(project)
    parts = Path(path).parts
    return any(identity(os.path.join(*parts[: i + 1])) == mark for i in range(len(parts)))


# Trees the kernel shows each process its own way (/proc/self/cwd is where wrap runs, not
# where the server will).
_PER_PROCESS = ("/proc", "/dev", "/sys")


def _per_process(candidate: str, written: str) -> str | None:
    """Why ``written`` (the path as written, made absolute) names no fixed directory: it
    passes through a tree each process sees its own way. None when it does not."""
    path = os.path.normpath(written)
    for tree in _PER_PROCESS:
        if path == tree or path.startswith(tree + os.sep):
            return (
                f"is what {candidate} is for wrap itself ({tree} shows each process its own "
                "places; the server would see another)"
            )
    return None


class _Mounts:
    """The mounts derived from one entry's arguments, and what to say about them."""

    def __init__(self, f: ClientFile, e: Entry, notes: list[str]) -> None:
        self.f, self.e, self.notes = f, e, notes
        self.base = f.project if f.client.cwd == "project" and f.project is not None else None
        self.writable: list[str] = []
        self.readable: list[str] = []

    def value(self, candidate: str) -> str:
        """``candidate`` (a path argument) as the definition gets it: its real absolute path
        when it becomes a mount, else as written."""
        expanded = os.path.expanduser(candidate)
        if not os.path.isabs(expanded) and self.base is None:
            self.notes.append(
                f"{self.e.name}: {candidate} is relative, and the directory the client starts "
                "this entry in is not known: not given to its sandbox (name it by its full "
                f"path in its entry in {user_config()} if you mean it)"
            )
            return candidate
        resolved = Path(expanded) if os.path.isabs(expanded) else self.base / expanded  # type: ignore[operator]
        if not (resolved.is_dir() or resolved.is_file()):
            return candidate
        full = os.path.realpath(resolved)
        directory = resolved.is_dir()
        # A directory made writable; a script the command runs, with what lies beside it,
        # readable.
        mount = full if directory else os.path.dirname(full)
        why = _per_process(candidate, str(resolved)) or refusal(mount, directory, home())
        project = self.f.project
        if why is None and confined(self.f) and project is not None:
            through = not os.path.isabs(expanded) or _through(expanded, project)
            if (projects(self.f) or through) and not within(mount, project):
                why = f"is outside the project {project}"
                if through and str(resolved) != full:
                    why += f" (reached through a link in it: {candidate})"
        if why is not None:
            by_hand = (
                ""
                if why.endswith(NEVER_WRITABLE)
                else f" (grant it yourself in its entry in {user_config()}, sandbox.filesystem, "
                "if you mean it)"
            )
            self.notes.append(f"{self.e.name}: {mount} {why}: not given to its sandbox{by_hand}")
            return candidate
        (self.writable if directory else self.readable).append(mount)
        if directory and os.path.normpath(resolved) != full:
            self.notes.append(
                f"{self.e.name}: {candidate} is reached through a link: {full} is what is given"
            )
        return full


def _filesystem(f: ClientFile, e: Entry, mounts: _Mounts, notes: list[str]) -> dict[str, list[str]]:
    """The definition's ``sandbox.filesystem`` from its mounts, each grant said. The
    directories a user's own entry names are its workspace for the policy too (reads and
    writes allowed there as in the session's workspace); a project's entry has the project
    for its workspace, and its directories lie inside it."""
    fs: dict[str, list[str]] = {}
    if mounts.writable:
        fs["allowWrite"] = sorted(set(mounts.writable))
        listed = ", ".join(fs["allowWrite"])
        if projects(f):
            notes.append(
                f"{e.name}: writable in its sandbox: {listed} (in its workspace, {f.project})"
            )
        else:
            fs["workspace"] = list(fs["allowWrite"])
            notes.append(
                f"{e.name}: its workspace: {listed} (writable in its sandbox; the policy allows "
                "reads and writes there as in the session's workspace)"
            )
    readable = [r for r in sorted(set(mounts.readable)) if r not in mounts.writable]
    if readable:
        fs["allowRead"] = readable
        notes.append(f"{e.name}: readable in its sandbox: {', '.join(readable)}")
    return fs


def _environment(
    f: ClientFile, e: Entry, notes: list[str]
) -> tuple[dict[str, str], dict[str, str]]:
    """The definition's environment and the secrets the client's entry keeps."""
    kept: dict[str, str] = {}
    env: dict[str, str] = {}
    received: list[str] = []
    asked: list[str] = []
    for name, given in e.env.items():
        if secret_name(name) or credential_value(given):
            # The client fills it, as before: the definition only passes it on (or names it
            # as the source of a brokered secret).
            kept[name] = given
            env[name] = "${" + name + "}"
            continue
        value, names = translate(f.client, given, env=True)
        if names and projects(f):
            if WHOLE_REFERENCE.fullmatch(value) is None:
                raise LeftAlone(
                    f"its env {name}={given!r} refers to a variable inside a longer value; a "
                    "project's entry may refer to variables only as whole values of its env"
                )
            received += names
            asked.append(f"{name}={given}")
        env[name] = value
    if received:
        notes.append(
            f"{e.name}: this project's server receives {', '.join(sorted(set(received)))} "
            f"from the environment its client starts ironcurtain with, as {f.client.label} "
            f"filled them before (its entry asks for them: {', '.join(asked)})"
        )
    if git_server(e) and "GIT_CONFIG_COUNT" not in env:
        # As root, servers run as an unprivileged uid, and git refuses a repository that
        # uid does not own unless told it is safe (the sandbox holds only what it may use).
        env.update(GIT_SAFE_DIRECTORY)
    return env, kept


def _cwd(f: ClientFile, e: Entry) -> str | None:
    """The definition's working directory: absolute (the config takes no other), and a
    project's inside the project."""
    if not e.cwd:
        return None
    cwd, _ = translate(f.client, e.cwd)
    if projects(f):
        _no_reference("cwd", cwd)
        where = Path(os.path.expanduser(cwd))
        if not where.is_absolute() and f.project is not None:
            where = f.project / where
        if f.project is None or not within(where, f.project):
            raise LeftAlone(f"its cwd {e.cwd!r} is not a directory inside the project")
        return os.path.realpath(where)
    if not cwd.startswith(("/", "~", "${")):
        raise LeftAlone(
            f"its cwd {e.cwd!r} is relative, and the directory the client starts it in is "
            "not known (name it by its full path)"
        )
    return cwd


def _refused_workspace(name: str, workspace: str | None) -> list[str]:
    """What to say of the entry's ``workspace`` (the project directory) when it is never a
    writable root: ``run`` refuses it at every start, as said here."""
    from launcher.plan.workspace import homes, moved_places, refused_root

    if workspace is None or not os.path.isabs(workspace):
        return []
    why = root_problem(workspace, homes(workspace), moved_places())
    if why is None:
        return []
    return [f"{name}: its workspace {refused_root(workspace, why)}; `ironcurtain run` refuses it"]


def _check_written(f: ClientFile, workspace: str | None, variable: str | None) -> None:
    """What wrap writes into the client's entry must reach ironcurtain as written: a path
    the client would fill variables in (a project named ``..{env:U}``) could become the
    home. :class:`LeftAlone` when one would not."""
    written = [str(ironcurtain_exe()), str(user_config()), str(user_policy())]
    if workspace is not None and workspace != variable:
        written.append(workspace)
    for value in written:
        problem = unread(f.client, value)
        if problem is not None:
            raise LeftAlone(f"wrap would write {problem}, and the server would not get it as is")


def _arguments(f: ClientFile, e: Entry, mounts: _Mounts) -> list[str]:
    """The definition's arguments, each in ironcurtain's form; a path argument given to
    ``mounts`` (its real path when it becomes a mount)."""
    script = script_index(e)
    args: list[str] = []
    after_option = False
    for index, given in enumerate(e.args):
        arg, names = translate(f.client, given)
        if projects(f):
            _no_reference("argument", arg.replace(WORKSPACE, ""))
        if WORKSPACE in arg or names:
            args.append(arg)
            after_option = False
            continue
        option, _, attached = arg.partition("=")
        inline = bool(attached) and option in DIRECTORY_OPTIONS  # --repository=DIR
        candidate = attached if inline else arg
        looks_like_path = (
            candidate.startswith(("/", "~", "./", "../")) or after_option or index == script
        )
        value = arg
        if looks_like_path or candidate in (".", ".."):
            got = mounts.value(candidate)
            value = f"{option}={got}" if inline else got
        args.append(value)
        after_option = arg in DIRECTORY_OPTIONS
    return args


def moved_definition(f: ClientFile, e: Entry) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """The server's definition for ironcurtain's config, the environment the client's entry
    keeps (secrets, referred to as ``${NAME}`` in the definition), and what to tell the
    user. :class:`LeftAlone` when the entry must not be wrapped."""
    notes: list[str] = []
    variable = PROJECT_VARIABLES.get(f.client.name)
    workspace = workspace_of(f, e)
    _check_written(f, workspace, variable)
    notes += _refused_workspace(e.name, workspace)
    command, _ = translate(f.client, e.command or "")
    if projects(f):
        _no_reference("command", command)
    if variable and workspace_of(f, e) is None and any(variable in a for a in e.args):
        notes.append(
            f"{e.name}: {variable} in a user-level entry becomes the session's own workspace "
            "(a user-level entry gets none: the folder the client has open could be your home)"
        )
    mounts = _Mounts(f, e, notes)
    if relative(command) and mounts.base is not None:  # ./bin/server, found from the project
        command = mounts.value(command)
    args = _arguments(f, e, mounts)
    definition: dict[str, Any] = {"command": command, "args": args}
    env, kept = _environment(f, e, notes)
    if env:
        definition["env"] = env
    cwd = _cwd(f, e)
    if cwd:
        definition["cwd"] = cwd
    definition["description"] = f"wrapped from {f.client.label} ({f.path})"
    sandbox: dict[str, Any] = {"filesystem": _filesystem(f, e, mounts, notes)}
    where = (e.env, [cwd or workspace or "", *mounts.writable])
    network, said = network_for(e.name, command, args, where, projects(f), str(user_config()))
    if network is not None:
        sandbox["network"] = network
    notes += [said] if said else []
    if any(sandbox.values()):
        definition["sandbox"] = {k: v for k, v in sandbox.items() if v}
    _broker(f, e, definition, kept, notes)
    return definition, kept, notes


def _broker(
    f: ClientFile, e: Entry, definition: dict[str, Any], kept: dict[str, str], notes: list[str]
) -> None:
    """Make the secrets of ``kept`` wrap may broker ``secrets`` of ``definition`` (no longer
    in its env), and say what becomes of each."""
    if not kept:
        return
    network = (definition.get("sandbox") or {}).get("network")
    refused = "wrap brokers no secret of a project's entry" if projects(f) else None
    package = package_of(definition["command"], definition["args"])
    secrets, said = broker(e.name, package, network, e.env, kept, refused, definition["args"])
    for variable in secrets:
        del definition["env"][variable]
    if secrets:
        definition["secrets"] = secrets
        if not definition["env"]:
            del definition["env"]
    notes += said
    notes.append(
        f"{e.name}: {', '.join(sorted(kept))} stay in {f.path} (the client passes them to "
        "ironcurtain); the moved definition names them only (${NAME}, or a brokered "
        "secret's from env:NAME), never holding a value"
    )


def references_environment(f: ClientFile, definition: dict[str, Any]) -> list[str]:
    """The variables a project's moved definition takes from the environment ironcurtain
    runs in (none for the user's own entries)."""
    if not projects(f):
        return []
    env = definition.get("env") or {}
    return sorted({m.group(1) for v in env.values() if (m := WHOLE_REFERENCE.fullmatch(v))})
