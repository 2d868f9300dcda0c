"""How a command ends: its exit status, and a user's mistake said in one line on stderr."""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable
from typing import NoReturn


def finish(body: Callable[[], int | None], names: Callable[[str], str] | None = None) -> NoReturn:
    """Run the command; exit with its status. A user's mistake is one line on stderr and
    its exit status, never a traceback, each setting it names said as ``names`` says (the
    command's flags); the rest as typer ends a command (Ctrl-C: 130)."""
    try:
        code = body()
    except KeyboardInterrupt:
        sys.exit(130)
    except EOFError:
        print("\nAborted!", file=sys.stderr)
        sys.exit(1)
    except Exception as exc:
        from launcher.shared.user_errors import USER_ERRORS, UserError

        if isinstance(exc, OSError) and exc.errno == errno.EPIPE:
            # Nobody reads the output any more: exit quietly, and flush nothing at exit.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(1)
        if not isinstance(exc, USER_ERRORS):
            raise
        from launcher.shared.shown import visible  # a message can quote a file, a server, a name

        said = exc.said(names) if names and isinstance(exc, UserError) else str(exc)
        one_line = not getattr(exc, "own_lines", False)
        print(f"ironcurtain: error: {visible(said, one_line=one_line)}", file=sys.stderr)
        sys.exit(getattr(exc, "exit_code", 2))
    sys.exit(code or 0)
