"""Every JSON file ironcurtain reads says where it broke, through one reader: a file nested
deeper than the parser goes is one clear error naming the file (the parser alone raises a
RecursionError, a traceback), as is a broken one (its line and column)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from launcher.clients.wrap import backups as wrap_records
from launcher.plan.config import load_config
from launcher.shared.caller_identity import load_caller_file
from launcher.shared.user_errors import USER_ERRORS
from policy.loader import load_json_model
from policy.models import ToolAnnotationsFile
from policy.permissions import load_permissions

DEEP = "[" * 30_000 + "]" * 30_000  # within every size limit
BROKEN = '{\n  "a": [1, 2\n}'


def _records(path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[], object]:
    monkeypatch.setenv("XDG_STATE_HOME", str(path.parent))
    records = wrap_records.records_path()
    records.parent.mkdir(parents=True)
    records.write_bytes(path.read_bytes())
    return wrap_records.load


READERS: dict[str, Callable[[Path, pytest.MonkeyPatch], Callable[[], object]]] = {
    "annotations": lambda p, _: lambda: load_json_model(p, ToolAnnotationsFile),
    "permissions": lambda p, _: lambda: load_permissions(p),
    "config": lambda p, _: lambda: load_config(p, "given", str(p.parent)),
    "caller file": lambda p, _: lambda: load_caller_file(str(p)),
    "wrap records": _records,
}


def test_the_parser_alone_fails_with_a_traceback() -> None:
    with pytest.raises(RecursionError):  # control: what each reader would meet
        json.loads(DEEP)


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize(("text", "said"), [(DEEP, "not JSON"), (BROKEN, "line 3")])
def test_a_bad_json_file_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reader: str, text: str, said: str
) -> None:
    path = tmp_path / "file.json"
    path.write_text(text)
    load = READERS[reader](path, monkeypatch)
    with pytest.raises(USER_ERRORS) as caught:
        load()
    assert said in str(caught.value) and "file.json" in str(caught.value).replace(
        "records.json", "file.json"
    )
