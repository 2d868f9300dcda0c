"""The ``ironcurtain`` executable: a ``run`` line of the usual shape starts its session
without loading typer (``launcher.cli.run``); every other line goes to the typer app."""

from __future__ import annotations

import os
import sys
from typing import NoReturn

from launcher.cli.exits import finish


def main() -> NoReturn:
    # Pydantic looks for plugins in every installed distribution's entry points when it
    # builds the first model: a scan at every start that ironcurtain's own models never need.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    from launcher.cli.run import read_run, start
    from launcher.cli.run_flags import flag_names

    opts = read_run(sys.argv[1:], os.environ)
    if opts is None:
        from launcher.cli.app import dispatch

        finish(lambda: dispatch(sys.argv), flag_names(sys.argv))
    finish(lambda: start(opts), flag_names(sys.argv))
