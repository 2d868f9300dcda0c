"""scripts/server_matrix.py's judgement: a row whose outcome is not the known one is noticed
(a known difference that now answers the same, a difference not known, a known row failing
another way), what changes from run to run is masked and nothing else, and the file of known
differences names only rows the matrix has."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from tests.support.paths import REPO


def _load() -> ModuleType:
    path = REPO / "scripts" / "server_matrix.py"
    spec = importlib.util.spec_from_file_location("server_matrix", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


matrix = _load()
SERVER = matrix.SERVERS[0]
CALLS: list[tuple[str, dict[str, Any]]] = [("read", {}), ("write", {})]


def row(direct: list[tuple[bool, str]], through: list[tuple[bool, str]]) -> object:
    tools = {"read": {"type": "object"}, "write": {"type": "object"}}
    answers = {era: matrix.Answers(tools=dict(tools), calls=list(through)) for era in matrix.ERAS}
    server = matrix.Server(SERVER.name, SERVER.package, SERVER.command, CALLS)
    return matrix.Row(server, "1", matrix.Answers(tools=dict(tools), calls=direct), answers)


def known(**settings: object) -> dict[str, object]:
    entry = matrix.Known("why", ("read: direct",), bool(settings.get("may_pass", False)))
    return {f"{SERVER.name} / {era}": entry for era in matrix.ERAS}


def test_the_same_answers_with_nothing_known_surprise_no_one() -> None:
    answers = [(False, "a"), (False, "b")]
    assert matrix.judge([row(answers, answers)], {}) == []


def test_a_difference_not_known_is_a_surprise_in_each_era() -> None:
    surprises = matrix.judge([row([(False, "a"), (False, "b")], [(False, "a"), (True, "no")])], {})
    assert len(surprises) == len(matrix.ERAS)
    assert all('write: direct "b" vs through error "no"' in s for s in surprises)


def test_a_known_difference_is_no_surprise_but_one_that_is_gone_is() -> None:
    differs = row([(False, "a"), (False, "b")], [(True, "denied"), (False, "b")])
    assert matrix.judge([differs], known()) == []
    same = row([(False, "a"), (False, "b")], [(False, "a"), (False, "b")])
    assert all("now answers the same" in s for s in matrix.judge([same], known()))
    assert matrix.judge([same], known(may_pass=True)) == []


def test_a_known_row_failing_another_way_is_a_surprise() -> None:
    other = row([(False, "a"), (False, "b")], [(False, "a"), (True, "broken")])
    assert len(matrix.judge([other], known())) == len(matrix.ERAS)


def test_a_changed_input_schema_is_a_difference() -> None:
    changed = row([(False, "a")], [(False, "a")])
    for answers in changed.through.values():  # type: ignore[attr-defined]
        answers.tools["read"] = {"type": "object", "properties": {"x": {}}}
    assert "tool read: input schema differs" in matrix.judge([changed], {})[0]


def test_what_changes_from_run_to_run_is_masked_and_nothing_else() -> None:
    ws = "/tmp/ironcurtain-matrix-x/memory/direct"
    text = (
        f"{ws}/notes.txt at 2026-12-07T17:57:35.083Z in {matrix.ROOT}/.venv, "
        "commit 0123456789abcdef0123456789abcdef01234567 (0123456), took 12 ms; 42 rows"
    )
    assert matrix.normalise(text, ws) == (
        "<ws>/notes.txt at <time> in <checkout>/.venv, commit <hash> (<short-hash>), "
        "took <ms>; 42 rows"
    )


def test_the_known_differences_name_rows_of_the_matrix() -> None:
    rows = {f"{s.name} / {era}" for s in matrix.SERVERS for era in matrix.ERAS}
    expected = matrix.read_expected(matrix.EXPECTED)
    assert expected
    assert set(expected) <= rows
    assert all(entry.why and entry.differs for entry in expected.values())


def test_every_server_is_pinned_in_the_install_script() -> None:
    script = (REPO / "scripts" / "install_matrix.sh").read_text()
    for server in matrix.SERVERS:
        assert f"  {server.package}\n" in script, server.package
    assert Path(matrix.MATRIX).name == "matrix"
