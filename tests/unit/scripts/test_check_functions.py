"""scripts/check_functions.py: a function is measured from its `def` (decorators not counted) to
its last line, a nested function in its own right, and each one over 60 lines is named with
its place and length, the exit status then 1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO

SCRIPT = REPO / "scripts" / "check_functions.py"


def body(lines: int, indent: str = "    ") -> str:
    """A function body of exactly `lines` lines."""
    return "".join(f"{indent}x = {i}\n" for i in range(lines))


def sample(tmp_path: Path) -> Path:
    source = (
        # 60 lines with its def, 3 decorators above it: at the limit, not over it
        "@a\n@b\n@c\n"
        "def at_limit():\n" + body(59) + "\n"
        # 61 lines: one over
        "def one_over():\n" + body(60) + "\n"
        # a short method of a class, and a long async method
        "class C:\n"
        "    def short(self):\n" + body(3, "        ") + "\n"
        "    async def long_method(self):\n" + body(70, "        ") + "\n"
        # a 20-line parent holding a 10-line child: neither over; then a parent whose nested
        # function alone is over the limit (both named)
        "def parent_ok():\n"
        "    def child():\n" + body(9, "        ") + body(9) + "\n"
        "def parent_long():\n"
        "    def nested_long():\n" + body(64, "        ") + "    return nested_long\n"
    )
    path = tmp_path / "sample.py"
    path.write_text(source)
    return path


def run(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, paths)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_each_function_over_the_limit_is_named_with_its_line_and_length(tmp_path: Path) -> None:
    path = sample(tmp_path)
    result = run(path)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    source = path.read_text().splitlines()
    where = {
        name: source.index(next(s for s in source if f"def {name}(" in s)) + 1
        for name in ("one_over", "long_method", "parent_long", "nested_long")
    }
    assert lines == [
        f"{path}:{where['one_over']} one_over 61 lines",
        f"{path}:{where['long_method']} long_method 71 lines",
        f"{path}:{where['parent_long']} parent_long 67 lines",
        f"{path}:{where['nested_long']} nested_long 65 lines",
    ]


def test_a_directory_of_short_functions_passes(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "ok.py").write_text("def f():\n" + body(59))
    result = run(tmp_path / "pkg")
    assert (result.returncode, result.stdout) == (0, "")
    # the control: one line more and the same directory fails
    (tmp_path / "pkg" / "ok.py").write_text("def f():\n" + body(60))
    assert run(tmp_path / "pkg").returncode == 1
