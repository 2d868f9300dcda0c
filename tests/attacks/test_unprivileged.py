"""The sandbox as an ordinary user would get it: the real profile and bwrap, run as uid 65534.

(The rest of the suite runs as whoever runs pytest: in CI that is root.)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.marks import needs_installed
from tests.support.paths import REPO

SYSTEM_PYTHON = "/usr/bin/python3"
NOBODY = 65534

pytestmark = [
    pytest.mark.sandbox,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (to drop to uid 65534)"),
    needs_installed(
        not shutil.which("setpriv")
        or not shutil.which("bwrap")
        or not os.path.exists(SYSTEM_PYTHON),
        "needs setpriv, bwrap and /usr/bin/python3",
    ),
]

SCRIPT = """
id -u
echo data > ./inside.txt && echo WRITE_INSIDE_OK
ls /root >/dev/null 2>&1 && echo ROOT_VISIBLE
ls /home >/dev/null 2>&1 && echo HOME_VISIBLE
echo x > /usr/planted 2>/dev/null && echo USR_WRITABLE
echo "$HOST_SECRET"
"""

RUNNER = """
import os, subprocess, sys
from sandbox_profiles.profile import ProfileRequest, build_profile, write_runtime_files
from sandbox_profiles.bwrap import render as render_bwrap
ws, runtime, script = sys.argv[1:4]
write_runtime_files(runtime, os.getuid(), os.getgid())
request = ProfileRequest(name="probe", command_path="/bin/sh", args=["-c", script], env={},
                         workspace=ws, runtime_dir=runtime, search_path=["/usr/bin", "/bin"],
                         host_env=os.environ)
profile = build_profile(request)
done = subprocess.run(render_bwrap(profile), env=dict(profile.env), capture_output=True,
                      text=True, timeout=30)
sys.stdout.write(done.stdout)
sys.stderr.write(done.stderr)
sys.exit(done.returncode)
"""


@pytest.fixture
def scratch() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="ironcurtain-nobody-", dir="/tmp"))
    (path / "ws").mkdir()
    for p in (path, path / "ws"):
        os.chown(p, NOBODY, NOBODY)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_sandbox_works_for_an_ordinary_user(scratch: Path) -> None:
    # The checkout may sit where uid 65534 cannot read (under /root): run a copy.
    lib = scratch / "lib"
    shutil.copytree(
        REPO / "sandbox_profiles",
        lib / "sandbox_profiles",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    done = subprocess.run(
        [
            "setpriv",
            f"--reuid={NOBODY}",
            f"--regid={NOBODY}",
            "--clear-groups",
            "--",
            SYSTEM_PYTHON,
            "-c",
            RUNNER,
            str(scratch / "ws"),
            str(scratch / "run"),
            SCRIPT,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd="/",
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(lib),
            "HOST_SECRET": "s3cr3t",
            "PYTHONDONTWRITEBYTECODE": "1",
        },
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split()
    assert lines[0] == str(NOBODY)
    assert "WRITE_INSIDE_OK" in lines
    assert (scratch / "ws" / "inside.txt").read_text() == "data\n"
    assert (scratch / "ws" / "inside.txt").stat().st_uid == NOBODY
    for leak in ("ROOT_VISIBLE", "HOME_VISIBLE", "USR_WRITABLE", "s3cr3t"):
        assert leak not in lines
