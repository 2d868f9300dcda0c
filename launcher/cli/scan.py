"""``ironcurtain scan DIR``: the catalogue's sweep on demand, for scripts and for people, and
what a session would protect beside it (what a present ``.envrc`` loads, hard links)."""

from __future__ import annotations

import os
import time

from launcher.shared import dirs
from launcher.shared.shown import visible
from launcher.shared.user_errors import UsageError
from sandbox_profiles import autorun, gitconfig, present


def _detail(path: str, entry: autorun.Entry) -> str:
    """What a git configuration would run, or which hooks a hooks directory holds."""
    name = os.path.basename(path)
    if os.path.isfile(path) and (name in ("config", ".gitconfig", "config.worktree")):
        try:
            keys = gitconfig.program_keys(gitconfig.read_config(path))
        except gitconfig.UnreadableConfig as exc:
            return f" [cannot be read as git reads it: {exc.reason}]"
        return f" [runs or reads: {', '.join(keys)}]" if keys else ""
    if name == "hooks" and os.path.isdir(path):
        try:
            hooks = sorted(h for h in os.listdir(path) if not h.endswith(".sample"))
        except OSError:
            return ""
        return f" [hooks: {', '.join(hooks)}]" if hooks else ""
    return ""


# What a session protects beside the catalogue that scan shows (never moves: they may well
# be the user's own): what a present .envrc or mise configuration loads, what an agent
# instruction file imports, other names of protected files.
_BESIDE = ("loaded by", "another name (hard link)", present.INSTRUCTIONS)


def _loaded_beside(root: str) -> list[str]:
    """What a session would also keep read-only or guarded in ``root``, and why; an
    ``.envrc`` (or git configuration) that cannot be read for sure is said as such."""
    home = os.path.expanduser("~")
    found = present.existing([root], home, os.environ.get("XDG_CONFIG_HOME"))
    lines = [f"also protected in a session: {path}: {why}" for path, why in
             found.read_only.items() if why.startswith(_BESIDE)]  # fmt: skip
    lines += [f"also guarded in a session (not there yet): {path}" for path in found.guarded
              if path not in found.read_only]  # fmt: skip
    lines += [f"every writable root read-only in a session: {why}" for why in found.unreadable]
    return lines


def scan(directories: list[str], fix: bool) -> int:
    """List every file below ``directories`` that host tools load or run (the catalogue);
    with ``fix``, move each into the quarantine directory. Exit status: 0 when nothing is
    found (or, with ``fix``, everything found was moved), 1 otherwise."""
    roots = []
    for directory in directories:
        real = os.path.realpath(os.path.expanduser(directory))
        if not os.path.isdir(real):
            raise UsageError(f"scan {directory}: not a directory")
        roots.append(real)
    problems: list[str] = []
    found: list[tuple[str, str, autorun.Entry]] = []
    for root in roots:

        def unreadable(path: str, exc: OSError) -> None:
            problems.append(f"{path}: cannot be read ({exc.strerror or exc})")

        found += [(root, path, entry) for path, entry in autorun.find(root, unreadable)]
    for _root, path, entry in found:
        # File names are the servers': shown as escapes where they would act or hide.
        shown = visible(
            f"{path}: {entry.match}: {entry.loaded_by}{_detail(path, entry)}", one_line=True
        )
        print(shown)
    # As the tree is before --fix moves anything (what an .envrc loads, with the .envrc).
    beside = [line for root in roots for line in _loaded_beside(root)]
    if fix and found:
        from launcher.guard.watch import Guard, Quarantined

        target = os.path.join(
            str(dirs.state_dir()), "quarantine", time.strftime("scan-%Y%m%d-%H%M%S")
        )
        for root in roots:
            moved: list[Quarantined] = []
            guard = Guard([root], [], target, moved.append)
            try:
                guard.sweep()
            finally:
                guard.close()
            for record in moved:
                print(visible(f"moved {record.path} to {record.moved_to}", one_line=True))
            problems += [f"{f.path}: {f.reason}" for f in guard.failures]
    for line in beside:
        print(visible(line, one_line=True))
    for problem in problems:
        print(visible(f"NOT CHECKED OR NOT MOVED: {problem}", one_line=True))
    count = len(found)
    summary = f"{count} file{'s' if count != 1 else ''} host tools load or run"
    if fix:
        print(f"ironcurtain scan: {summary}; " + ("moved" if not problems else "not all moved"))
        return 1 if problems else 0
    print(f"ironcurtain scan: {summary}" + (f"; {len(problems)} unreadable" if problems else ""))
    return 1 if found or problems else 0
