"""``ironcurtain approvals``: answer running sessions' escalations in a terminal."""

from __future__ import annotations

import json
import sys

from launcher.cli.approvals_desk import Desk, Question, note, pattern_choices, prompt, serve
from launcher.relay.approving.approval import APPROVE, APPROVE_SESSION, DENY
from launcher.shared import rundir
from launcher.shared.shown import visible
from launcher.shared.user_errors import UsageError

_KEYS = {"a": APPROVE, "s": APPROVE_SESSION, "d": DENY}


def _ask(question: Question) -> None:
    """Show ``question``: which session, which call, whose request it is in words, the rule,
    what approving grants and the exact arguments; then the prompt."""
    message = question.message
    args = json.dumps(message.get("arguments"), indent=2, ensure_ascii=False, sort_keys=True)
    said = f": {message['question']}" if message.get("question") else ""
    head = visible(
        f"[session {question.link.session}] {message.get('server')}/{message.get('tool')} "
        f"needs your approval{said}",
        one_line=True,
    )
    rule = visible(f"rule {message.get('rule')}: {message.get('reason')}", one_line=True)
    caller = message.get("caller")
    asker = (
        visible(f"asked by caller {caller.get('name')} ({caller.get('issuer')})", one_line=True)
        if isinstance(caller, dict)
        else ""
    )
    text = (
        f"\n{head}\n"
        + (f"  {asker}\n" if asker else "")
        + f"  {rule}\n"
        + (f"  {visible(str(message['grant']), one_line=True)}\n" if message.get("grant") else "")
        + f"  arguments: {visible(args)}"
        + "".join(
            f"\n  [{key}] approve for this session all {visible(text, one_line=True)}"
            for key, _, text in pattern_choices(message)
        )
    )
    print(text, flush=True)  # what would act on the terminal shown as escapes
    prompt()


def attach(session: str | None) -> int:
    """Answer the escalations of ``session``, else of every running session of this user's
    (those started later too), until that session ends or the input does."""
    desk = Desk(session, _ask)
    desk.scan()
    if session is not None and not desk.links:
        for path, why in desk.doubted.items():
            raise UsageError(f"not attaching to {path}: {why}")
        raise UsageError(
            f"no approvals socket for session {session} in {rundir.bases()[0]}: "
            "is `ironcurtain run` running "
            "(with --approval auto or socket) as this user?"
        )
    desk.read_from(sys.stdin.fileno())
    if not desk.links:
        note(f"no session running in {rundir.bases()[0]} yet; waiting for one")
    note("answering here (Ctrl-C leaves)")
    try:
        how = serve(desk, _KEYS, sys.stdin.fileno())
    except KeyboardInterrupt:
        return 0
    if how == "ended":
        note("the session ended")
    return 0
