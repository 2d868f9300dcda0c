"""The caller model and the caller file of ``run --caller``: every way a file can be wrong
is refused naming the file and what was expected; the audit log's per-client views name the
caller in every entry and keep one hash chain; ``audit tail --caller`` shows one caller's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.audit.log import AuditLog
from launcher.audit.read import verify
from launcher.cli.audit import tail_log
from launcher.plan.caller_sources import check_caller_options
from launcher.plan.session_plan import RunOptions
from launcher.shared.caller_identity import STATIC, Caller, load_caller_file
from launcher.shared.user_errors import OptionError

# What a caller file holds, and what the refusal says about it.
MALFORMED = [
    ("{not json", "is not JSON (line 1, column 2)"),
    ("", "is not JSON"),
    ('["billing-agent"]', "holds a JSON list, not an object"),
    ('"billing-agent"', "holds a JSON string, not an object"),
    ('{"permissions": []}', 'has no "name"'),
    ('{"name": 7}', 'its "name" is not a string'),
    ('{"name": ""}', 'its "name" is empty'),
    ('{"name": "billing agent"}', 'its "name" holds a space, a control or a non-ASCII character'),
    ('{"name": "billing\\u001b[2Jagent"}', "holds a space, a control or a non-ASCII character"),
    ('{"name": "bill\\u00efng"}', "holds a space, a control or a non-ASCII character"),
    ('{"name": ".."}', 'its "name" is made of dots alone'),
    (json.dumps({"name": "a" * 256}), 'its "name" is longer than 255 characters'),
    ('{"name": "a", "permissions": "crm:read"}', '"permissions" is a JSON string, not a list'),
    ('{"name": "a", "permissions": [1]}', '"permissions": permission 1 is not a string'),
    ('{"name": "a", "permissions": ["crm read"]}', "permission 1 holds a space"),
    ('{"name": "a", "role": "admin"}', 'has the unknown key "role"'),
    ('{"name": "a", "Permissions": []}', 'has the unknown key "Permissions"'),
]


@pytest.mark.parametrize(("text", "said"), MALFORMED)
def test_a_malformed_caller_file_is_refused_naming_the_file(
    tmp_path: Path, text: str, said: str
) -> None:
    path = tmp_path / "caller.json"
    path.write_text(text)
    with pytest.raises(OptionError) as refused:
        load_caller_file(str(path))
    message = refused.value.said({"caller_file": "--caller"}.__getitem__)
    assert message.startswith(f"--caller {path}: ")
    assert said in message
    assert 'expected a JSON object {"name": "billing-agent"' in message


def test_a_caller_file_names_the_caller(tmp_path: Path) -> None:
    path = tmp_path / "caller.json"
    path.write_text('{"name": "billing-agent", "permissions": ["crm:read", "files:write"]}')
    caller = load_caller_file(str(path))
    assert caller == Caller("billing-agent", frozenset({"crm:read", "files:write"}), STATIC)
    assert load_caller_file(str(path)).key == caller.key  # the same caller, read twice
    (tmp_path / "none.json").write_text('{"name": "auth0|507f1f77"}')
    assert load_caller_file(str(tmp_path / "none.json")).permissions == frozenset()
    with pytest.raises(OptionError, match="cannot be read: No such file"):
        load_caller_file(str(tmp_path / "missing.json"))


def test_callers_from_different_sources_are_different_callers() -> None:
    static = Caller("alice", frozenset(), STATIC)
    federated = Caller("alice", frozenset(), "https://id.example.com")
    assert static != federated and static.key != federated.key


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"caller_file": "c.json", "http_port": 0}, "over HTTP use the OIDC options"),
        ({"oidc_issuer": "https://id.example"}, "is only used with http_port"),
        ({"oidc_issuer": "https://id.example", "http_port": 0}, "needs oidc_audience"),
        ({"oidc_audience": "aud", "http_port": 0}, "is only used with oidc_issuer"),
        ({"oidc_jwks_url": "file:///k", "http_port": 0}, "is only used with oidc_issuer"),
        ({"permissions_claim": "roles", "http_port": 0}, "is only used with oidc_issuer"),
        (
            {
                "oidc_issuer": "https://i",
                "oidc_audience": "a",
                "http_port": 0,
                "http_token_file": "t",
            },
            "is not used with oidc_issuer",
        ),
    ],
)
def test_caller_options_that_do_not_go_together(options: dict[str, object], said: str) -> None:
    with pytest.raises(OptionError, match=said):
        check_caller_options(RunOptions(**options))  # type: ignore[arg-type]


def test_every_view_of_the_log_names_its_caller_and_one_chain_holds(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(str(path), "s1")
    alice = {"caller": Caller("alice", frozenset(), "https://id").audited, "httpSession": "a1"}
    bob = {"caller": Caller("bob", frozenset(), STATIC).audited}
    as_alice, as_bob = log.for_client(lambda e: alice), log.for_client(lambda e: bob)
    as_alice.write({"tool": "t1"})
    prepared = as_bob.prepare({"tool": "t2"}, late=("result",))
    log.write({"event": "quarantine"})  # the session's own: no caller
    as_bob.write({"result": "ok"}, prepared)
    as_alice.write({"tool": "t3", "caller": "forged"})  # the view's fields win
    log.close()
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    assert [e.get("caller", {}).get("name") for e in entries] == [
        "alice", None, "bob", "alice", None
    ]  # fmt: skip
    assert entries[0]["httpSession"] == "a1" and "httpSession" not in entries[2]
    assert entries[2]["result"] == "ok" and entries[-1]["entries"] == 4
    assert verify(path.read_text().splitlines()) == (4, None)


def test_audit_tail_shows_one_callers_entries(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(str(path), "s1")
    for name, tool in (("alice", "a1"), ("bob", "b1"), ("alice", "a2"), ("alice-2", "c1")):
        audited = {"caller": Caller(name, frozenset(), STATIC).audited}
        log.for_client(lambda e, audited=audited: audited).write(  # type: ignore[misc]
            {"server": "s", "tool": tool, "policy": {"decision": "allow"}, "result": "success"}
        )
    log.write({"server": "s", "tool": "nobody", "policy": {"decision": "allow"}})
    log.close()
    tail_log(str(path), 20, False, "alice")
    shown = capsys.readouterr().out.splitlines()
    assert [line.split()[2] for line in shown] == ["s/a1", "s/a2"]
    assert all(line.endswith("caller=alice") for line in shown)
    tail_log(str(path), 20, False)
    assert len(capsys.readouterr().out.splitlines()) == 6  # the control: every entry
