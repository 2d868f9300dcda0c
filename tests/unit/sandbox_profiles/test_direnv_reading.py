"""An ``.envrc`` read as direnv's stdlib reads it: what it loads, relative to where it runs,
and what cannot be known from the text (fail closed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox_profiles.direnv import envrc_paths
from sandbox_profiles.gitconfig import UnreadableConfig
from sandbox_profiles.present import existing

# .envrc text -> what it loads, relative to its directory
LOADS = {
    "dotenv\n": [".env"],
    "dotenv config/app.env\n": ["config/app.env"],
    "dotenv config\n": ["config/.env"],  # a directory's .env
    "dotenv_if_exists .env.local\n": [".env.local"],
    "source_env ../shared/env.sh\n": ["../shared/env.sh"],
    "source_env_if_exists .envrc.local\n": [".envrc.local"],
    "source_env sub\n": ["sub/.envrc"],
    ". ./vars.sh\n": ["vars.sh"],
    "source vars.sh\n": ["vars.sh"],
    "watch_file flake.nix devenv.lock\n": ["flake.nix", "devenv.lock"],
    "PATH_add bin tools/bin\n": ["bin", "tools/bin"],
    "path_add PYTHONPATH lib\n": ["lib"],
    "load_prefix .local\n": [".local"],
    "layout node\n": ["node_modules/.bin"],
    "layout python3\n": [],  # .direnv/, in the catalogue by name
    'export PATH="$PWD/scripts:$PATH"\n': ["scripts"],
    "export LD_PRELOAD=$PWD/libhook.so\n": ["libhook.so"],
    "GIT_CONFIG_GLOBAL=$PWD/team.gitconfig\n": ["team.gitconfig"],
    "./setup-env.sh\n": ["setup-env.sh"],
    "bash hooks/env.sh --quiet\n": ["hooks/env.sh"],
    "if has nix; then use flake; else dotenv .env.ci; fi\n": [".env.ci"],
    "[[ -f .env.local ]] && dotenv .env.local # the team's\n": [".env.local"],
    "dotenv \\\n  .env.split\n": [".env.split"],
    'export A="$(source_env inner.sh)"\n': ["inner.sh"],
    "dotenv 'with space.env'\n": ["with space.env"],
    "dotenv a#b\n": ["a#b"],  # a # inside a word is no comment
    "# dotenv commented\nexport FOO=bar\nstrict_env\n": [],
    'eval "dotenv evald.env"\n': ["evald.env"],
    # a CRLF file (a Windows checkout): bash keeps the CR in the word, so does direnv
    "dotenv_if_exists .env.dev\r\n": [".env.dev\r"],
    "export VIRTUAL_ENV=.venv\nlayout python\n": [".venv"],  # its bin/ goes on PATH
    "layout pipenv\n": ["Pipfile", "Pipfile.lock", ".venv"],
    "layout anaconda ./envs/dev\n": ["envs/dev"],
    "use vim\n": [".vimrc.local"],
    'export GIT_EDITOR="./tools/ed --wait"\n': ["tools/ed"],
    'export NODE_OPTIONS="--require ./hook.js"\n': ["hook.js"],
    "export GIT_EXEC_PATH=$PWD/gitexec\n": ["gitexec"],
}


@pytest.mark.parametrize("text", LOADS, ids=[t.strip()[:40] for t in LOADS])
def test_what_an_envrc_loads(text: str, tmp_path: Path) -> None:
    project = tmp_path / "p"
    (project / "config").mkdir(parents=True)
    (project / "sub").mkdir()
    (project / ".envrc").write_text(text)
    found = [path for path, _ in envrc_paths(str(project / ".envrc"), str(tmp_path / "home"))]
    expected = [str((project / rel).resolve()) for rel in LOADS[text]]
    assert found == expected


def test_a_sourced_file_is_read_in_turn_from_its_own_directory(tmp_path: Path) -> None:
    """source_env runs the file in its directory (direnv's pushd): its own relative paths
    are taken from there."""
    (tmp_path / "p" / "env").mkdir(parents=True)
    (tmp_path / "p" / ".envrc").write_text("source_env env/team.sh\nsource_up\n")
    (tmp_path / "p" / "env" / "team.sh").write_text("dotenv team.env\n")
    (tmp_path / ".envrc").write_text("PATH_add outer-bin\n")
    found = [p for p, _ in envrc_paths(str(tmp_path / "p" / ".envrc"), "/home/u")]
    assert str(tmp_path / "p" / "env" / "team.env") in found
    assert str(tmp_path / ".envrc") in found and str(tmp_path / "outer-bin") in found


UNKNOWABLE = [
    'dotenv "$ENVFILE"\n',
    "source_env $(pick-one)\n",
    "watch_file *.nix\n",
    "$LOADER .env\n",
    'eval "$(devbox generate direnv --print-envrc)"\n',
    "export PATH=$GOPATH/bin:$PATH\n",
    "dotenv 'unclosed\n",
    # the environment read from a command's output or a stream, or after a cd
    "export $(grep -v '^#' .env.shared | xargs)\n",
    'while IFS= read -r l; do export "$l"; done < .env.shared\n',
    "cd config\ndotenv\n",
    "pushd config >/dev/null; dotenv; popd\n",
    "source <(sed 's/^/export /' .env.shared)\n",
    "source /dev/stdin < .env.shared\n",
    "direnv_load cat dump.env\n",
    "dotenv .env.x>/dev/null\n",
    # relative to the directory each program runs in, not the .envrc's (a subdirectory's)
    'export PATH="tools:$PATH"\n',
    'export PATH="$PATH:"\n',
    "export LD_PRELOAD=./libhook.so\n",
    "GIT_CONFIG_GLOBAL=team.gitconfig\n",
    "source_env ~ada/envrc\n",
]


@pytest.mark.parametrize("text", UNKNOWABLE)
def test_what_cannot_be_known_fails_closed(text: str, tmp_path: Path) -> None:
    (tmp_path / ".envrc").write_text(text)
    with pytest.raises(UnreadableConfig):
        envrc_paths(str(tmp_path / ".envrc"), "/home/u")


@pytest.mark.parametrize(
    ("config", "closed"),
    [
        ('[global]\nload_dotenv = true\n[whitelist]\nprefix = ["~/code"]\n', True),
        ('[global]\nload_dotenv = true\n[whitelist]\nexact = ["~/code/ws/.envrc"]\n', True),
        ('[global]\nload_dotenv = true\n[whitelist]\nprefix = ["~/elsewhere"]\n', False),
        ("[global]\nload_dotenv = true\n", False),  # each .env is allowed by its content
        ('[whitelist]\nprefix = ["~/code"]\n', False),  # .envrc only: in the catalogue
        ("[global\n", True),  # cannot be read: fail closed
    ],
)
def test_direnv_loading_every_env_without_asking_makes_the_roots_read_only(
    config: str, closed: bool, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    ws = home / "code" / "ws"
    ws.mkdir(parents=True)
    (tmp_path / "xdg" / "direnv").mkdir(parents=True)
    (tmp_path / "xdg" / "direnv" / "direnv.toml").write_text(config)
    found = existing([str(ws)], str(home), str(tmp_path / "xdg"))
    assert bool(found.unreadable) is closed, found.unreadable
    assert (str(ws) in found.read_only) is closed
