"""The approvals page's HTML: every value a session or a server sent is escaped
(``html.escape``) where it is put in, so a question's arguments show as text, never as
markup or script; and characters that reorder or hide text (direction overrides, zero-width
ones, controls) show as escapes, so what the operator reads is what would be approved."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from html import escape
from typing import Any

from launcher.shared.shown import visible
from launcher.transports.approvals.board import Decided, Pending

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="csrf" content="{csrf}">
<title>ironcurtain approvals</title>
<style nonce="{nonce}">
body {{ font-family: sans-serif; margin: 1.5em; max-width: 70em; }}
.question {{ border: 2px solid #b60; border-radius: 6px; padding: .6em 1em; margin: 1em 0; }}
pre {{ background: #f4f4f4; padding: .5em; overflow-x: auto; white-space: pre-wrap; }}
dt {{ font-weight: bold; }} dd {{ margin: 0 0 .4em 1em; }}
button {{ margin-right: .6em; padding: .3em .9em; }}
table {{ border-collapse: collapse; }} td, th {{ padding: .2em .6em; border-bottom: 1px solid #ddd;
  text-align: left; vertical-align: top; }}
</style></head>
<body>
<h1>ironcurtain approvals</h1>
<div id="board">{board}</div>
<script nonce="{nonce}">
const events = new EventSource("/events");
events.addEventListener("board", async () => {{
  const reply = await fetch("/board", {{credentials: "same-origin"}});
  if (reply.ok) document.getElementById("board").innerHTML = await reply.text();
}});
</script>
</body></html>
"""


def page(board: str, csrf: str, nonce: str) -> str:
    """The whole page around ``board`` (the already escaped :func:`board_html`)."""
    return PAGE.format(board=board, csrf=escape(csrf), nonce=escape(nonce))


def board_html(
    pending: list[Pending],
    recent: list[Decided],
    notes: list[str],
    csrf: str,
    logged: Sequence[dict[str, Any]] = (),
) -> str:
    """The questions open now (each with its answers), the recent decisions, those of the
    sessions' audit logs (``logged``, newest first), the notes."""
    parts = [f"<h2>Waiting for you ({len(pending)})</h2>"]
    if not pending:
        parts.append('<p id="none">No question is waiting.</p>')
    parts.extend(_question(p, csrf) for p in pending)
    parts.append("<h2>Recent decisions</h2>")
    if recent:
        rows = "".join(
            f"<tr><td>{_when(d.when)}</td><td>{_shown(d.session)}</td>"
            f"<td>{_shown(_call(d.message))}</td><td>{_shown(d.outcome)}</td></tr>"
            for d in recent
        )
        parts.append(
            '<table id="recent"><tr><th>time</th><th>session</th><th>call</th>'
            f"<th>decision</th></tr>{rows}</table>"
        )
    else:
        parts.append("<p>None yet.</p>")
    parts.append(_logged(logged))
    if notes:
        lines = "\n".join(_shown(n) for n in notes)
        parts.append(f'<h2>Sessions</h2><pre id="notes">{lines}</pre>')
    return "\n".join(parts)


# What approving a call gives when the session names no widening: the call runs as it is.
_WITHIN = "this call (for the session: each identical call) in the server's own sandbox"


def _question(p: Pending, csrf: str) -> str:
    m = p.message
    args = json.dumps(m.get("arguments"), indent=2, ensure_ascii=False, sort_keys=True)
    caller = m.get("caller")
    rows = [
        ("session", p.session),
        ("asked", f"{_when(p.since)}: {m.get('question') or ''}"),
        (
            "caller",
            f"{caller.get('name')} ({caller.get('issuer')})"
            if isinstance(caller, dict)
            else "none (the agent of this session)",
        ),
        ("server", str(m.get("server"))),
        ("tool", str(m.get("tool"))),
        ("rule", f"{m.get('rule')}: {m.get('reason')}"),
        ("approving grants", str(m.get("grant") or _WITHIN)),
    ]
    listed = "".join(f"<dt>{k}</dt><dd>{_shown(v)}</dd>" for k, v in rows)
    hidden = (
        f'<input type="hidden" name="csrf" value="{escape(csrf)}">'
        f'<input type="hidden" name="session" value="{escape(p.session)}">'
        f'<input type="hidden" name="id" value="{escape(p.qid)}">'
    )
    buttons = (
        '<button name="answer" value="approve">Approve</button>'
        '<button name="answer" value="session">Approve for this session</button>'
        '<button name="answer" value="deny">Deny</button>'
    )
    offered = m.get("patterns") if isinstance(m.get("patterns"), list) else []
    assert isinstance(offered, list)
    buttons += "".join(
        f'<div class="pattern"><button name="answer" value="pattern{n}">'
        f"Approve for this session all {escape(str(p.get('text')))}</button></div>"
        for n, p in enumerate(offered, 1)
        if isinstance(p, dict)
    )
    return (
        f'<div class="question" data-session="{escape(p.session)}" data-id="{escape(p.qid)}">'
        f"<dl>{listed}<dt>arguments (canonical)</dt>"
        f"<dd><pre>{escape(visible(args))}</pre></dd></dl>"
        f'<form method="post" action="/answer">{hidden}{buttons}</form></div>'
    )


def _logged(entries: Sequence[dict[str, Any]]) -> str:
    """The audit log's recent decisions: its own words, arguments as it has them."""
    if not entries:
        return "<h2>In the audit log</h2><p>No decision yet.</p>"
    rows = "".join(
        "<tr>"
        + "".join(
            f"<td>{_shown(str(value))}</td>"
            for value in (
                e.get("time", ""),
                e.get("sessionId", ""),
                _call({"server": e.get("server"), "tool": e.get("tool")}),
                json.dumps(e.get("arguments"), ensure_ascii=False, sort_keys=True),
                e.get("escalation", ""),
                e.get("result", ""),
            )
        )
        + "</tr>"
        for e in entries
    )
    return (
        '<h2>In the audit log</h2><table id="logged"><tr><th>time</th><th>session</th>'
        "<th>call</th><th>arguments (as logged)</th><th>decision</th><th>result</th></tr>"
        f"{rows}</table>"
    )


def _shown(text: str) -> str:
    """``text`` as one line of the page: escaped, and what acts or hides as escapes."""
    return escape(visible(text, one_line=True))


def _call(message: dict[str, Any]) -> str:
    return f"{message.get('server')}/{message.get('tool')}"


def _when(stamp: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(stamp))
