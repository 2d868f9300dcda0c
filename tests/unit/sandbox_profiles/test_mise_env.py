"""A mise configuration and ``.tool-versions`` read for what mise loads on ``cd``: the files
``[env]`` loads and sources, the directories it and ``path:`` versions put on PATH; what
cannot be known from the text fails closed."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox_profiles.gitconfig import UnreadableConfig
from sandbox_profiles.mise_env import mise_paths, tool_versions_paths

CONFIG = """
env_file = ".env.old"
[env]
_.file = [".env", { path = ".secrets.yaml", redact = true }]
_.path = ["./bin", "{{config_root}}/tools"]
_.source = { path = "./env.sh", tools = true }
NODE_ENV = "development"
[tools]
node = "path:./localnode"
python = ["3.12", { version = "path:../py" }]
"""


def test_what_a_mise_configuration_loads(tmp_path: Path) -> None:
    (tmp_path / "mise.toml").write_text(CONFIG)
    found = {p for p, _ in mise_paths(str(tmp_path / "mise.toml"))}
    names = [".env.old", ".env", ".secrets.yaml", "bin", "tools", "env.sh", "localnode"]
    assert found == {str(tmp_path / n) for n in names} | {str(tmp_path.parent / "py")}


def test_a_configuration_in_mises_folder_is_read_from_the_project_root_too(tmp_path: Path) -> None:
    (tmp_path / ".config" / "mise").mkdir(parents=True)
    (tmp_path / ".config" / "mise" / "config.toml").write_text('[env]\n_.file = "a.env"\n')
    found = {p for p, _ in mise_paths(str(tmp_path / ".config" / "mise" / "config.toml"))}
    assert found == {str(tmp_path / "a.env"), str(tmp_path / ".config" / "mise" / "a.env")}


def test_tool_versions_path_versions(tmp_path: Path) -> None:
    (tmp_path / ".tool-versions").write_text("nodejs 20.1.0\npython path:./py # ours\n")
    assert [p for p, _ in tool_versions_paths(str(tmp_path / ".tool-versions"))] == [
        str(tmp_path / "py")
    ]


@pytest.mark.parametrize(
    "text", ['[env]\n_.file = "{{env.HOME}}/x"\n', '[env]\n_.path = "$HOME/bin"\n', "[env\n"]
)
def test_what_cannot_be_known_fails_closed(text: str, tmp_path: Path) -> None:
    (tmp_path / "mise.toml").write_text(text)
    with pytest.raises(UnreadableConfig):
        mise_paths(str(tmp_path / "mise.toml"))
