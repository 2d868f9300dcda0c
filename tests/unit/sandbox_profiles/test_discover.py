"""What a command needs inside the sandbox, found from real files laid out in a temp dir.
(An npx package run in its sandbox: ``tests/sandbox/test_npx_session.py``.)"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from launcher.plan.programs import resolve_command
from sandbox_profiles.discover import program_dirs, which


def _exe(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_venv_console_script_needs_the_venv_and_its_base_python(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    base_bin = os.path.dirname(os.path.realpath(sys._base_executable))  # type: ignore[attr-defined]
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(f"home = {base_bin}\n")
    (venv / "bin" / "python").symlink_to(os.path.realpath(sys._base_executable))  # type: ignore[attr-defined]
    tool = _exe(venv / "bin" / "tool", f"#!{venv}/bin/python\nprint('hi')\n")
    dirs = [d for d, _ in program_dirs(str(tool), [])]
    assert str(venv) in dirs
    base_prefix = os.path.dirname(base_bin)
    assert base_prefix in dirs or base_prefix.startswith("/usr")
    assert str(tmp_path) not in dirs  # nothing wider than needed


def test_npm_bin_link_needs_the_package_tree(tmp_path: Path) -> None:
    prefix = tmp_path / "prefix"
    script = _exe(
        prefix / "lib" / "node_modules" / "@scope" / "pkg" / "dist" / "index.js",
        "#!/usr/bin/env node\nconsole.log(1)\n",
    )
    (prefix / "bin").mkdir()
    (prefix / "bin" / "tool").symlink_to(os.path.relpath(script, prefix / "bin"))
    dirs = [d for d, _ in program_dirs(str(prefix / "bin" / "tool"), ["/usr/bin"])]
    assert dirs == [str(prefix / "bin"), str(prefix / "lib" / "node_modules")]


def test_which_finds_executables_only(tmp_path: Path) -> None:
    _exe(tmp_path / "a" / "tool", "#!/bin/sh\n")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "plain").write_text("not executable")
    assert which("tool", [str(tmp_path / "b"), str(tmp_path / "a")]) == str(tmp_path / "a/tool")
    assert which("plain", [str(tmp_path / "b")]) is None
    assert which(str(tmp_path / "a" / "tool"), []) == str(tmp_path / "a" / "tool")


def test_pyenv_shim_is_replaced_by_the_real_interpreter(tmp_path: Path) -> None:
    root = tmp_path / "pyenv"
    _exe(root / "shims" / "python3", '#!/usr/bin/env bash\nexec pyenv exec python3 "$@"\n')
    _exe(root / "bin" / "pyenv", f'#!/bin/sh\n[ "$1" = which ] && echo {sys.executable}\n')
    assert resolve_command("python3", [str(root / "shims")]) == sys.executable


def test_shim_without_a_manager_is_left_alone(tmp_path: Path) -> None:
    shim = _exe(tmp_path / "shims" / "tool", "#!/bin/sh\n")
    assert resolve_command("tool", [str(tmp_path / "shims")]) == str(shim)


def test_resolve_npx_finds_the_cache_entry_and_checks_versions(tmp_path: Path) -> None:
    from sandbox_profiles.discover import PackageNotInstalled, npx_roots, resolve_npx

    pkg = tmp_path / "home/.npm/_npx/abc/node_modules/@s/srv"
    _exe(pkg / "bin" / "cli.js", "#!/usr/bin/env node\n")
    (pkg / "package.json").write_text('{"version": "1.4.2", "bin": {"srv": "bin/cli.js"}}')
    roots = npx_roots(str(tmp_path / "home"), None, [str(tmp_path / "prefix")])
    assert roots[0].endswith("_npx/abc")
    assert resolve_npx(["-y", "@s/srv", "--flag"], roots) == (str(pkg / "bin/cli.js"), ["--flag"])
    assert resolve_npx(["--yes", "--", "@s/srv@1.4"], roots) is not None
    try:
        resolve_npx(["-y", "@s/srv@2.0.0"], roots)
    except PackageNotInstalled as exc:
        assert "npm install -g @s/srv@2.0.0" in str(exc)
    else:
        raise AssertionError("a version that is not installed must not be run")
    assert resolve_npx(["-p", "x", "y"], roots) is None
