"""A grant written as a project's directory, which the project later replaces with a link:
`run` does not show a server what the link leads to when that is a place no server is shown
through a link: a `.ssh` directory, a dot-directory of the home (programs' settings and
secrets: `~/.config`, `~/.local`, `~/.claude`, `~/.aws`), the home itself, ironcurtain's
directories, the system's own trees (`/run`, `/dev`, `/sys`, `/etc`, `/proc`). A link to an
ordinary directory, and a path the user names directly, are shown as before."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import ironcurtain
from tests.support.home import Home
from tests.support.marks import needs_bwrap

pytestmark = needs_bwrap


def _config(user: Home, grant: Path) -> Path:
    server = {"command": sys.executable, "args": ["-c", "pass"],
              "sandbox": {"filesystem": {"allowWrite": [str(grant)]}}}  # fmt: skip
    config = user.root / "mine.json"
    config.write_text(json.dumps({"mcpServers": {"tool": server}}))
    return config


def _run(user: Home, config: Path) -> subprocess.CompletedProcess[str]:
    return ironcurtain(user, "run", "--config", str(config), "--workspace", str(user.ws()))


def _profile(user: Home, config: Path) -> str:
    done = ironcurtain(
        user, "profile", "tool", "--config", str(config), "--workspace", str(user.ws())
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


SECRET_PLACES = [".ssh", ".ssh/keys", ".config", ".local/share", ".claude", ".aws", ""]
SYSTEM_PLACES = ["/run", "/dev", "/sys", "/etc", "/proc/self"]


@pytest.mark.parametrize("secret", SECRET_PLACES + SYSTEM_PLACES)
def test_a_project_directory_swapped_for_a_link_to_a_secret_place_is_refused(
    user: Home, secret: str
) -> None:
    data = user.root / "proj" / "data"
    data.mkdir(parents=True)
    config = _config(user, data)
    assert f"--bind {data} {data}" in _profile(user, config)  # as wrap left it
    target = Path(secret) if secret.startswith("/") else user.home / secret
    if not secret.startswith("/"):
        target.mkdir(parents=True, exist_ok=True)
    data.rmdir()
    data.symlink_to(target)  # the project, afterwards
    done = _run(user, config)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "allowWrite[0]" in done.stderr and "is a link to" in done.stderr
    assert not user.left_behind()


def test_a_link_to_an_ordinary_directory_and_a_secret_place_named_directly_are_shown(
    user: Home,
) -> None:
    work = user.home / "work"
    work.mkdir()
    link = user.root / "proj-data"
    link.symlink_to(work)
    assert f"--bind {work} {work}" in _profile(user, _config(user, link))
    direct = user.home / ".local" / "share" / "notes"  # the user's own explicit choice
    direct.mkdir(parents=True)
    assert f"--bind {direct} {direct}" in _profile(user, _config(user, direct))


def test_a_server_told_the_grants_name_finds_it(user: Home) -> None:
    """Shown where it really is, a grant named through a link is there by its name too: a
    server that knows only the name (from its arguments or environment) writes where the
    link leads."""
    from tests.support.probe import probe_server_config, run_probe

    real = user.home / "work" / "notes"
    real.mkdir(parents=True)
    named = user.root / "notes-link"
    named.symlink_to(real)
    server = probe_server_config(True)
    server["sandbox"]["filesystem"]["allowWrite"] += [str(named)]
    server["env"] = {**server.get("env", {}), "GRANTED": str(named)}
    out = run_probe(
        user,
        user.ws(),
        server,
        lambda: [("write_under_env", {"var": "GRANTED", "rel": "todo.txt", "content": "x"})],
    )
    assert out[0][1] == "WRITE OK", out
    assert (real / "todo.txt").read_text() == "x"
