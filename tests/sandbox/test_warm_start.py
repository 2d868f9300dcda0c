"""A warm start: ``ironcurtain run`` over stdio (planning, the spawn of the real time server
in its sandbox, the relay, a listing), its config and policy unchanged since the last start,
never imports pydantic; the first start validates them and keeps them. (The kept config and
policy themselves: ``tests/unit/plan/test_config_cache.py`` and
``tests/unit/policy/test_policy_cache.py``.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.client import PROTOCOL
from tests.support.home import make_home


@pytest.mark.parametrize(
    ("entry", "typer_loaded"), [("launcher.cli.entry", "False"), ("launcher.cli.app", "True")]
)
def test_a_warm_session_never_imports_pydantic(
    tmp_path: Path, entry: str, typer_loaded: str
) -> None:
    # The whole of `ironcurtain run` over stdio (planning, the spawn, the relay, a listing),
    # its config and policy unchanged since the last start; the first start validates.
    # Through the executable (launcher.cli.entry) typer is not loaded either; through
    # `python -m launcher.cli.app` it is, and still brings no pydantic.
    user = make_home(tmp_path)
    program = (
        "import atexit, sys; atexit.register(lambda: sys.stderr.write("
        "f'pydantic imported: {\"pydantic\" in sys.modules}, '"
        "f'typer imported: {\"typer\" in sys.modules}\\n')); "
        f"sys.argv[0] = 'ironcurtain'; from {entry} import main; main()"
    )
    requests = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": PROTOCOL,
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]
    said = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-c", program, "run", "--server", "time"],
            input="".join(json.dumps(r) + "\n" for r in requests),
            capture_output=True,
            text=True,
            env=user.env,
            cwd=user.root,
            timeout=60,
        )
        assert '"id":2' in done.stdout.replace(" ", "") and "get_current_time" in done.stdout
        said.append(done.stderr.strip().splitlines()[-1])
    assert said == [
        f"pydantic imported: True, typer imported: {typer_loaded}",
        f"pydantic imported: False, typer imported: {typer_loaded}",
    ]
