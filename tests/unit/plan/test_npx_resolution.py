"""``wrap`` and ``run`` find an ``npx`` package in the same places: a package ``run`` would
start in its sandbox is never left alone by ``wrap`` as "not installed", and the other way
round."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from launcher.clients.catalogue.known import Entry
from launcher.clients.wrap.changes import launch_problem
from launcher.plan.config import LoadedConfig
from launcher.plan.programs import npx_to_node, search_path
from launcher.shared.user_errors import ConfigError

_CONFIG = LoadedConfig(path=Path("mcp-servers.json"), source="test", servers={}, warnings=())
_ARGS = ["-y", "@s/srv", "--flag"]


def _package(node_modules: Path) -> Path:
    """The package ``@s/srv`` in ``node_modules``; its script."""
    pkg = node_modules / "@s" / "srv"
    (pkg / "bin").mkdir(parents=True)
    script = pkg / "bin" / "cli.js"
    script.write_text("#!/usr/bin/env node\n")
    script.chmod(0o755)
    (pkg / "package.json").write_text('{"version": "1.4.2", "bin": {"srv": "bin/cli.js"}}')
    return script


def _run_finds(npx: str) -> str | None:
    """The script ``run`` starts for ``npx -y @s/srv`` (None: it refuses the server)."""
    try:
        _node, args = npx_to_node(npx, list(_ARGS), search_path(), _CONFIG, "srv")
    except ConfigError as exc:
        assert "node is not on PATH" not in str(exc), "this test needs node on PATH"
        return None
    assert args[1:] == ["--flag"]
    return args[0]


@pytest.fixture
def npm_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty home, and no npm variables of the caller's."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("npm_config_cache", raising=False)
    monkeypatch.delenv("npm_config_prefix", raising=False)
    return home


@pytest.mark.parametrize("where", ["npm_config_prefix", "npx cache", "npx's own prefix"])
def test_wrap_and_run_find_the_same_npx_packages(
    where: str, tmp_path: Path, npm_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An npx of its own (its prefix holds no package unless the case puts one there).
    npx = tmp_path / "node" / "bin" / "npx"
    npx.parent.mkdir(parents=True)
    npx.write_text("#!/bin/sh\n")
    npx.chmod(0o755)
    if where == "npm_config_prefix":
        prefix = tmp_path / "global"
        script = _package(prefix / "lib" / "node_modules")
        monkeypatch.setenv("npm_config_prefix", str(prefix))
    elif where == "npx cache":
        script = _package(npm_home / ".npm" / "_npx" / "abc" / "node_modules")
    else:
        script = _package(tmp_path / "node" / "lib" / "node_modules")
    entry = Entry(name="srv", raw={}, command=str(npx), args=list(_ARGS))
    assert launch_problem(entry) is None
    assert _run_finds(str(npx)) == os.path.realpath(script)


def test_a_package_neither_finds_is_left_alone_by_wrap_and_refused_by_run(
    tmp_path: Path, npm_home: Path
) -> None:
    npx = tmp_path / "node" / "bin" / "npx"
    npx.parent.mkdir(parents=True)
    npx.write_text("#!/bin/sh\n")
    npx.chmod(0o755)
    entry = Entry(name="srv", raw={}, command=str(npx), args=list(_ARGS))
    problem = launch_problem(entry)
    assert problem is not None and "npm install -g @s/srv" in problem
    assert _run_finds(str(npx)) is None
