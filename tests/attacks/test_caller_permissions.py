"""A caller that lacks a permission tries to use what it guards anyway: by the tool's name
though it is not listed, by other spellings of the name, by the prefixed name with several
servers, through a completion of the guarded prompt's argument, in the handshake era and
in the stateless one (MCP 2026-07-28). Each attempt is refused and nothing reaches the
server; the control shows every attempt that names the real tool or prompt does reach it
when the permission check is off (and the policy alone allows it).

In-process (tests/support/relay.py): the real engine, gate, audit log and relay core, fake
servers that record every request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from launcher.relay.stateless.era import CAPABILITIES, VERSION
from launcher.shared.caller_identity import STATIC, Caller
from policy.permissions import Permissions
from tests.support.relay import RULES, Harness, build, run

NOT_PERMITTED = "DENIED (rule: caller-permissions): operation not permitted"
PERMISSIONS = {
    "tools": [{"server": "*", "tool": "write_*", "required": ["x:write"]}],
    "prompts": [{"server": "*", "prompt": "summarize", "required": ["x:write"]}],
}
# The policy alone allows the writes the permissions guard: only the check stands between.
WRITES = {
    "rules": [
        {
            "name": "allow-writes-in-workspace",
            "if": {"effect": ["write"], "paths": {"roles": ["write-path"], "within": "${ws}"}},
            "then": "allow",
            "reason": "writing the workspace",
        },
        *RULES["rules"],
    ]
}
MALLORY = Caller("mallory", frozenset({"x:read", "x:*", "*", "X:WRITE", "x:write "}), STATIC)
META = {VERSION: "2026-07-28", CAPABILITIES: {}}


def _harness(tmp_path: Path, servers: tuple[str, ...], era: str) -> Harness:
    return build(
        tmp_path,
        servers=servers,
        rules=WRITES,
        permissions=PERMISSIONS,
        caller=MALLORY,
        initialize=era == "handshake",
    )


def _params(era: str, params: dict[str, Any]) -> dict[str, Any]:
    return {**params, "_meta": META} if era == "stateless" else params


def _attempts(h: Harness, names: list[str], era: str) -> list[tuple[str, str]]:
    """Each name called as a write into the workspace: (name, what the caller read)."""
    out: list[tuple[str, str]] = []

    async def scenario() -> None:
        for name in names:
            params = {"name": name, "arguments": {"path": str(h.ws / "new.txt")}}
            answer = await h.request("tools/call", _params(era, params))
            assert answer is not None
            out.append((name, answer["result"]["content"][0]["text"]))

    run(scenario)
    return out


def _check_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: no permission is ever missing (the gate's check and the listings')."""
    monkeypatch.setattr(Permissions, "missing", lambda self, *args: [])


ERAS = ["handshake", "stateless"]


@pytest.mark.parametrize("era", ERAS)
def test_a_caller_calls_the_unlisted_tool_by_name(tmp_path: Path, era: str) -> None:
    h = _harness(tmp_path, ("fs",), era)
    assert _attempts(h, ["write_file"], era) == [("write_file", NOT_PERMITTED)]
    assert h.fs.requests == []
    (entry,) = h.entries()
    assert entry["policy"]["missing"] == ["x:write"]
    assert entry.get("era", "handshake") == era


@pytest.mark.parametrize("era", ERAS)
def test_control_the_call_by_name_is_made_without_the_check(
    tmp_path: Path, era: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _check_off(monkeypatch)
    h = _harness(tmp_path, ("fs",), era)
    [(_, text)] = _attempts(h, ["write_file"], era)
    assert text == "tools/call write_file"  # the server's own answer
    assert h.fs.methods == ["tools/call"]


SPELLINGS = [
    "Write_file", "WRITE_FILE", "write_*", "write_file ", " write_file", "write_file\u0000",
    "write_fil", "write_file\n", "wr\u0131te_file", "write\u200b_file",
]  # fmt: skip
PREFIXED = ["fs__write_file", "notes__write_file"]
PREFIXED_SPELLINGS = [
    "write_file", "FS__write_file", "fs__Write_file", "fs___write_file", "fs_write_file",
    "fs__write_*", "*__write_file", "fs__notes__write_file", "notes__fs__write_file",
    "fs__write_file__", "__write_file",
]  # fmt: skip


@pytest.mark.parametrize("era", ERAS)
def test_other_spellings_of_the_name_reach_nothing(tmp_path: Path, era: str) -> None:
    h = _harness(tmp_path, ("fs",), era)
    for name, text in _attempts(h, SPELLINGS, era):
        assert text.startswith("DENIED"), (name, text)
    assert h.fs.requests == []


@pytest.mark.parametrize("era", ERAS)
def test_with_several_servers_no_prefixed_name_gets_through(tmp_path: Path, era: str) -> None:
    h = _harness(tmp_path, ("fs", "notes"), era)
    said = dict(_attempts(h, PREFIXED + PREFIXED_SPELLINGS, era))
    assert [said[name] for name in PREFIXED] == [NOT_PERMITTED, NOT_PERMITTED]
    assert all(text.startswith("DENIED") for text in said.values()), said
    assert h.servers["fs"].requests == h.servers["notes"].requests == []


@pytest.mark.parametrize("era", ERAS)
def test_control_the_prefixed_names_are_called_without_the_check(
    tmp_path: Path, era: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _check_off(monkeypatch)
    h = _harness(tmp_path, ("fs", "notes"), era)
    said = dict(_attempts(h, PREFIXED + PREFIXED_SPELLINGS, era))
    assert [said[name] for name in PREFIXED] == ["tools/call write_file"] * 2
    # Only the real names reach a server, check or no check.
    assert h.servers["fs"].methods == h.servers["notes"].methods == ["tools/call"]


def _prompt_attempts(h: Harness, era: str, servers: tuple[str, ...]) -> list[dict[str, Any]]:
    """The guarded prompt got, and its argument completed, on each server."""
    answers: list[dict[str, Any]] = []
    inside = str(h.ws / "a.txt")

    async def scenario() -> None:
        for server in servers:
            name = f"{server}__summarize" if len(servers) > 1 else "summarize"
            got = {"name": name, "arguments": {"path": inside}}
            ref = {"type": "ref/prompt", "name": name}
            completed = {"ref": ref, "argument": {"name": "path", "value": inside}}
            for method, params in (("prompts/get", got), ("completion/complete", completed)):
                answer = await h.request(method, _params(era, params))
                assert answer is not None
                answers.append(answer)

    run(scenario)
    return answers


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("servers", [("fs",), ("fs", "notes")])
def test_the_guarded_prompt_is_reached_neither_directly_nor_by_completion(
    tmp_path: Path, era: str, servers: tuple[str, ...]
) -> None:
    h = _harness(tmp_path, servers, era)
    for answer in _prompt_attempts(h, era, servers):
        assert answer["error"]["message"] == NOT_PERMITTED, answer
    assert all(fake.requests == [] for fake in h.servers.values())


@pytest.mark.parametrize("era", ERAS)
def test_control_the_prompt_and_its_completion_are_served_without_the_check(
    tmp_path: Path, era: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _check_off(monkeypatch)
    h = _harness(tmp_path, ("fs",), era)
    answers = _prompt_attempts(h, era, ("fs",))
    assert all("result" in answer for answer in answers), answers
    assert h.fs.methods == ["prompts/get", "completion/complete"]


def _listed(h: Harness, era: str) -> tuple[list[str], list[str]]:
    names: dict[str, list[str]] = {}

    async def scenario() -> None:
        for method, key in (("tools/list", "tools"), ("prompts/list", "prompts")):
            answer = await h.request(method, _params(era, {}))
            assert answer is not None
            names[key] = [item["name"] for item in answer["result"][key]]

    run(scenario)
    return names["tools"], names["prompts"]


@pytest.mark.parametrize("era", ERAS)
def test_the_guarded_tool_and_prompt_are_not_listed(tmp_path: Path, era: str) -> None:
    h = _harness(tmp_path, ("fs", "notes"), era)
    assert _listed(h, era) == (["fs__read_file", "notes__read_file"], [])


@pytest.mark.parametrize("era", ERAS)
def test_control_without_the_check_they_are_listed(
    tmp_path: Path, era: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _check_off(monkeypatch)
    h = _harness(tmp_path, ("fs", "notes"), era)
    tools, prompts = _listed(h, era)
    assert "fs__write_file" in tools and prompts == ["fs__summarize", "notes__summarize"]
