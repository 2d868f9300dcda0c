"""Which program a server's ``command`` runs: found on the search path, through a version
manager's shim, or (for ``npx``) the installed package's own script under ``node``."""

from __future__ import annotations

import os
import subprocess
import sys

from launcher.plan.config import LoadedConfig
from launcher.shared.user_errors import ConfigError
from sandbox_profiles.discover import PackageNotInstalled, npx_roots, resolve_npx, which


def search_path() -> list[str]:
    """PATH, then the directory of this Python (where ``pip`` put the reference servers)."""
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    return [*path, os.path.dirname(sys.executable)]


def resolve_command(command: str, search: list[str]) -> str | None:
    """``command`` as an absolute path. A version-manager shim (pyenv: ``<root>/shims/x``, a
    shell script that needs the manager's whole tree) is replaced by the real program it
    would run, found with ``pyenv which``, so the sandbox only has to show that program."""
    path = which(command, search)
    if path is None or os.path.basename(os.path.dirname(path)) != "shims":
        return path
    root = os.path.dirname(os.path.dirname(path))
    pyenv = next(
        (p for p in (f"{root}/libexec/pyenv", f"{root}/bin/pyenv") if os.access(p, os.X_OK)),
        None,
    )
    if pyenv is None:
        return path
    try:
        done = subprocess.run(
            [pyenv, "which", os.path.basename(path)],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
            env={**os.environ, "PYENV_ROOT": root},
        )
    except (OSError, subprocess.SubprocessError):
        return path
    real = done.stdout.strip()
    return real if done.returncode == 0 and os.path.isabs(real) else path


def npx_program(npx: str, args: list[str]) -> tuple[str, list[str]] | None:
    """The installed script ``npx ARGS`` would run and its arguments, where npx finds a
    package without downloading it: its cache, npm's global prefix (``npm_config_prefix``),
    the prefix ``npx`` (an absolute path) is installed in, this Python's. None when ARGS are
    not the plain form ``[-y] PACKAGE [ARGS]``; :class:`PackageNotInstalled` when the
    package is not there. ``run`` and ``wrap`` both look here."""
    prefixes = [os.path.dirname(os.path.dirname(npx)), sys.prefix]
    # npm's own lower-case variables.
    prefix, cache = os.environ.get("npm_config_prefix"), os.environ.get("npm_config_cache")  # noqa: SIM112
    if prefix:
        prefixes.insert(0, prefix)
    return resolve_npx(args, npx_roots(os.path.expanduser("~"), cache, prefixes))


def npx_to_node(
    npx: str, args: list[str], search: list[str], config: LoadedConfig, name: str
) -> tuple[str, list[str]]:
    """``npx PKG ARGS`` as ``node <PKG's script> ARGS``: npx would look the package up in the
    registry, and a sandbox has no network. The package must already be installed or in
    npx's cache."""
    where = f"$.{config.key}.{name}.args"
    try:
        found = npx_program(npx, args)
    except PackageNotInstalled as exc:
        raise ConfigError(str(config.path), where, str(exc)) from None
    if found is None:
        raise ConfigError(
            str(config.path),
            where,
            "only the plain form npx [-y] PACKAGE [ARGS] can be sandboxed; "
            "give the installed program as the command instead",
        )
    node = which("node", search)
    if node is None:
        raise ConfigError(str(config.path), where, "node is not on PATH (npx needs it)")
    script, rest = found
    return node, [os.path.realpath(script), *rest]
