"""The configuration reference (docs/configuration.md) is the schema's, and the docs' links lead
somewhere: the reference is what scripts/config_reference.py writes now, every field of every
schema class is in it, its examples validate, the lookup order it states is the code's; every
relative link of README.md, CONTRIBUTING.md and docs/ names a file (and a heading) that exists."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from launcher.plan import config_schema
from launcher.plan.config import find_config, load_config
from launcher.plan.config_schema import SecretConfig, ServerConfig, json_name
from policy.schema import validate
from tests.support.paths import REPO

TOP = REPO
SCRIPT = TOP / "scripts" / "config_reference.py"
DOCS = [TOP / "README.md", TOP / "CONTRIBUTING.md", *sorted((TOP / "docs").glob("*.md"))]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("config_reference", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _schema_classes() -> list[type[Any]]:
    return [
        cls
        for _, cls in inspect.getmembers(config_schema, inspect.isclass)
        if dataclasses.is_dataclass(cls) and cls.__module__ == config_schema.__name__
    ]


def test_the_reference_is_what_the_script_writes() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


def test_the_check_names_the_file_when_it_differs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    script = _script()
    doc = tmp_path / "docs" / "configuration.md"
    doc.parent.mkdir()
    doc.write_text("# old\n")
    monkeypatch.setattr(script, "DOC", doc)
    monkeypatch.setattr(script, "ROOT", tmp_path)
    assert script.main(["config_reference.py", "--check"]) == 1
    assert "docs/configuration.md differs" in capsys.readouterr().err
    assert script.main(["config_reference.py", "--write"]) == 0
    assert script.main(["config_reference.py", "--check"]) == 0


def test_every_field_of_every_schema_class_is_documented() -> None:
    text = _script().render()
    classes = _schema_classes()
    assert len(classes) >= 8
    for cls in classes:
        for field in dataclasses.fields(cls):
            key = json_name(field.name)
            assert f"- **`{key}`**:" in text, f"{cls.__name__}.{field.name} is not in the reference"


def test_the_field_examples_validate() -> None:
    script = _script()
    for cls in _schema_classes():
        for field in dataclasses.fields(cls):
            data = {json_name(field.name): script.EXAMPLES[cls.__name__, field.name]}
            if cls is ServerConfig and field.name != "command":
                data["command"] = "x"
            if cls is SecretConfig:  # its other required fields
                data = {"from": "env:X", "hosts": ["h"], **data}
            validate(cls, data)


def _loads(path: Path, tmp_path: Path) -> list[str]:
    loaded = load_config(path, "--config", str(tmp_path), env={"HOME": str(tmp_path)})
    assert not loaded.warnings
    return sorted(loaded.servers)


def test_the_complete_example_validates(tmp_path: Path) -> None:
    example = TOP / "docs" / "mcp-servers.example.json"
    assert _loads(example, tmp_path) == ["fetch", "filesystem", "git", "internal-api", "time"]


def test_the_readme_example_validates(tmp_path: Path) -> None:
    readme = (TOP / "README.md").read_text()
    section = readme.split("## Your own servers", 1)[1]
    block = re.search(r"```json\n(.*?)```", section, re.S)
    assert block, "README.md: no JSON example under 'Your own servers'"
    path = tmp_path / "mcp-servers.json"
    path.write_text(block.group(1))
    assert len(_loads(path, tmp_path)) >= 3


def test_the_lookup_order_is_the_documented_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (TOP / "docs" / "configuration.md").read_text()
    assert text.index("`--config FILE`") < text.index("`$IRONCURTAIN_CONFIG`")
    assert text.index("`$IRONCURTAIN_CONFIG`") < text.index("in the current directory")
    assert text.index("in the current directory") < text.index("~/.config/ironcurtain/")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    user = tmp_path / "xdg" / "ironcurtain" / "mcp-servers.json"
    assert find_config(None, {})[1] == "bundled default"
    user.parent.mkdir(parents=True)
    user.write_text("{}")
    assert find_config(None, {}) == (user, "user config")
    (tmp_path / "mcp-servers.json").write_text("{}")
    assert find_config(None, {})[1] == "./mcp-servers.json"
    assert find_config(None, {"IRONCURTAIN_CONFIG": "e.json"})[0] == Path("e.json")
    assert find_config("c.json", {"IRONCURTAIN_CONFIG": "e.json"})[0] == Path("c.json")


def _prose(text: str) -> str:
    """Markdown without its code: fenced blocks and inline code spans."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def _anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings, as GitHub makes them."""
    seen: dict[str, int] = {}
    found = set()
    for line in re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M).splitlines():
        heading = re.match(r"#{1,6} (.*)", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}-{count}")
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(TOP)))
def test_every_relative_link_resolves(doc: Path) -> None:
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", _prose(doc.read_text())):
        if re.match(r"[a-z]+:", target):
            continue  # a URL
        name, _, fragment = target.partition("#")
        where = (doc.parent / name).resolve() if name else doc
        if not where.exists():
            broken.append(f"{target}: no such file")
        elif fragment and where.suffix == ".md" and fragment not in _anchors(where):
            broken.append(f"{target}: no such heading")
    assert not broken, f"{doc.relative_to(TOP)}: {broken}"


def test_json_examples_in_the_docs_parse() -> None:
    for doc in DOCS:
        for block in re.findall(r"^```json\n(.*?)^```", doc.read_text(), re.S | re.M):
            if block.lstrip().startswith(("{", "[")):
                json.loads(block)


def test_a_field_without_words_stops_the_script(monkeypatch: pytest.MonkeyPatch) -> None:
    script = _script()
    monkeypatch.delitem(script.EXAMPLES, ("NetworkSandbox", "hosts"))
    with pytest.raises(SystemExit, match=r"NetworkSandbox\.hosts has no example"):
        script.render()
    monkeypatch.setitem(script.EXAMPLES, ("NetworkSandbox", "hosts"), {})
    said = script.field_comments()
    del said["ServerConfig", "timeout"]  # a field with no comment above it in the schema
    monkeypatch.setattr(script, "field_comments", lambda: said)
    with pytest.raises(SystemExit, match=r"ServerConfig\.timeout has no meaning"):
        script.render()
