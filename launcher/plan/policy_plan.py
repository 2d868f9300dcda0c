"""The policy side of a session's plan: the policy directory loaded (the bundled one unless
given), every ``output-policy.json`` entry naming a server the config defines, and the
engine that decides each call (the paths no call may touch, each server's domains, the
workspace, what each tool requires of a caller)."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable
from pathlib import Path

from launcher.plan.config import LoadedConfig
from launcher.plan.config_schema import ServerConfig
from launcher.shared import dirs
from launcher.shared.user_errors import ConfigError
from policy.decision import StructuralConfig
from policy.egress import Entry
from policy.engine import PolicyEngine
from policy.errors import PolicyFileError
from policy.loader import PolicyFiles, bundled_policy_dir, check_placeholders, load_policy_dir
from policy.output import OUTPUT_POLICY_FILE
from policy.paths import resolve_real_path


def protected_paths(config: LoadedConfig, policy_dir: Path, audit_path: str) -> dict[str, str]:
    entries = {
        str(config.path): "the server configuration",
        str(dirs.config_dir()): "ironcurtain's configuration directory",
        str(policy_dir): "the policy directory",
        audit_path: "the audit log",
    }
    return {resolve_real_path(p): label for p, label in entries.items()}


def build_engine(
    config: LoadedConfig,
    files: PolicyFiles,
    workspace: str,
    audit_path: str,
    servers: dict[str, ServerConfig],
) -> PolicyEngine:
    structural = StructuralConfig(
        protected=protected_paths(config, files.directory, audit_path),
        state_dir=resolve_real_path(str(dirs.state_dir())),
        exempt=(workspace,),
    )
    # The policy's domain gate looks at names; port scoping is the egress proxy's business.
    allowlists = {
        name: [Entry.parse(d).pattern for d in server.allowed_domains]
        for name, server in servers.items()
    }
    return PolicyEngine(
        files.policy,
        files.annotations,
        structural,
        allowlists,
        {"workspace": workspace},
        files.permissions,
        server_workspaces(config, servers),
    )


def server_workspaces(
    config: LoadedConfig, servers: dict[str, ServerConfig]
) -> dict[str, tuple[str, ...]]:
    """Each server's own workspace directories (``sandbox.filesystem.workspace``), as real
    paths. Each must be one of its ``allowWrite`` directories: the policy lets calls read and
    write there, which only a writable root judged whole may be."""
    found: dict[str, tuple[str, ...]] = {}
    for name, server in servers.items():
        if server.sandbox is False or not server.sandbox.filesystem.workspace:
            continue
        fs = server.sandbox.filesystem
        writable = {resolve_real_path(os.path.expanduser(p)) for p in fs.allow_write}
        real = []
        for i, path in enumerate(fs.workspace):
            where = resolve_real_path(os.path.expanduser(path))
            problem = _workspace_problem(path, where, writable)
            if problem is not None:
                raise ConfigError(
                    str(config.path),
                    f"$.{config.key}.{name}.sandbox.filesystem.workspace[{i}]",
                    problem,
                )
            real.append(where)
        found[name] = tuple(dict.fromkeys(real))
    return found


def _workspace_problem(path: str, real: str, writable: set[str]) -> str | None:
    """Why ``path`` (real path ``real``) cannot be a server's own workspace: not one of its
    ``allowWrite`` directories, or named through a link. A link put where a granted directory
    was (a project's checkout, after the grant was written) would carry the grant -- reads
    and writes allowed with no one asked -- to wherever it leads."""
    if real not in writable:
        return (
            f"{path!r} is not one of its allowWrite directories: a server's workspace is a "
            "directory it may write (give it in allowWrite too)"
        )
    if os.path.abspath(os.path.expanduser(path)) != real:
        return (
            f"{path!r} is a link to {real}: a server's workspace is named as the directory "
            "itself (a link put in a directory's place after it was granted could lead "
            f"anywhere); name {real} if it is meant"
        )
    return None


def check_output_servers(files: PolicyFiles, servers: Iterable[str]) -> None:
    """Each entry of ``output-policy.json`` names a server the config defines (a glob:
    matches one): a policy for a server that does not exist is a mistake, not a no-op."""
    names = list(servers)
    for i, entry in enumerate(files.output.tools):
        if not any(fnmatch.fnmatchcase(name, entry.server) for name in names):
            raise PolicyFileError(
                str(files.directory / OUTPUT_POLICY_FILE),
                f"$.tools[{i}].server",
                f"{entry.server!r} matches no server of the config "
                f"(it defines: {', '.join(sorted(names)) or 'none'})",
            )


def load_policy(policy_dir: str | None) -> PolicyFiles:
    directory = Path(policy_dir).resolve() if policy_dir else bundled_policy_dir()
    files = load_policy_dir(directory, cache=dirs.cache_dir())
    check_placeholders(files, ["workspace"])
    return files
