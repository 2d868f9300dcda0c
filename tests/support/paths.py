"""Where things are: the virtual environment's programs, the ``ironcurtain`` command, the
test servers."""

from __future__ import annotations

import os
import sys
from pathlib import Path

BIN = os.path.dirname(sys.executable)
IRONCURTAIN = os.path.join(BIN, "ironcurtain")
TESTS = Path(__file__).resolve().parent.parent
PROBE = TESTS / "servers" / "probe_server.py"
FAULTY = TESTS / "servers" / "faulty_server.py"
REPO = TESTS.parent
BUNDLED_POLICY = REPO / "policy" / "defaults"
