"""Sessions starting as root at once (a client starting every wrapped entry together) share
the ACL ledger's directory, which each leaves removed when it holds no record: a start that
finds it gone between making it and opening it makes it again, it is never refused."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO

# Each process enters and leaves the ledger's lock again and again, as starts and ends do.
_TAKER = """
import sys
from pathlib import Path
from launcher.host.acl_ledger import _locked
for _ in range(int(sys.argv[2])):
    with _locked(Path(sys.argv[1])):
        pass
"""


def test_starts_at_once_never_find_the_ledger_directory_gone(tmp_path: Path) -> None:
    directory = tmp_path / "state" / "acl-ledger"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    takers = [
        subprocess.Popen(
            [sys.executable, "-c", _TAKER, str(directory), "400"],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    said = [taker.communicate(timeout=120)[1] for taker in takers]
    assert [taker.returncode for taker in takers] == [0] * 4, "\n".join(said)
    assert not directory.exists()  # left removed: it holds no record


def test_a_file_in_the_ledger_directorys_place_is_refused_not_waited_for(tmp_path: Path) -> None:
    directory = tmp_path / "acl-ledger"
    directory.write_text("")
    done = subprocess.run(
        [sys.executable, "-c", _TAKER, str(directory), "1"],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "FileExistsError" in done.stderr
