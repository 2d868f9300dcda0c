"""The credential detectors on text: each kind found in a realistic sample (made here, not a
live credential), the look-alikes each one must leave alone, and the walk over a message."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from policy.secrets import DETECTORS, mask_known, mask_strings, mask_text

B64 = "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
KEY_BODY = "\n".join(["MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7" + "x" * 12] * 3)

TRUE = {
    "private-key": f"-----BEGIN RSA PRIVATE KEY-----\n{KEY_BODY}\n-----END RSA PRIVATE KEY-----",
    "aws-access-key-id": "AKIAIOSFODNN7EXAMPLE",
    "github-token": "ghp_" + B64,
    "gitlab-token": "glpat-" + "x1Y2z3W4v5U6t7S8r9Q0",
    "slack-token": "xoxb-1234567890-0987654321-" + "AbCdEfGhIjKlMnOpQrStUvWx",
    "stripe-key": "sk_live_" + "51H8aBcDeFgHiJkLmNoPqRsT",
    "google-api-key": "AIza" + "SyA-1234567890abcdefghijklmnopqrstu",
    "openai-api-key": "sk-proj-" + "A" * 20 + "T3BlbkFJ" + "B" * 20,
    "anthropic-api-key": "sk-ant-api03-" + "a" * 93 + "AA",
    "npm-token": "npm_" + B64,
    "pypi-token": "pypi-AgEIcHlwaS5vcmc" + "C" * 60,
    "huggingface-token": "hf_" + "abcdefghijklmnopqrstuvwxyzABCDEFGH",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
    + "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "azure-storage-key": "AccountKey=" + "A" * 86 + "==",
}

FALSE = {
    "private-key": "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8A\n"
    + "-----END PUBLIC KEY-----",
    "aws-access-key-id": "AKIA is the prefix of AWS key ids; AKIA1234 is too short",
    "github-token": "ghp_short and the word ghost_protocol",
    "gitlab-token": "glpat- is the prefix, glpat-short",
    "slack-token": "xoxo, gossip girl; xoxb-short",
    "stripe-key": "pk_live_ is a publishable key prefix; sk_live_short",
    "google-api-key": "AIza is a prefix; AIzaShort",
    "openai-api-key": "sk-1234567890abcdefghijklmnop (no OpenAI marker)",
    "anthropic-api-key": "sk-ant-api03-tooshort",
    "npm-token": "npm_config_cache=/tmp/npm",
    "pypi-token": "pypi-token-for-docs",
    "huggingface-token": "hf_hub_download(repo_id='gpt2') and hf_1234",
    "jwt": "eyJhbGciOiJIUzI1NiJ9 alone is only a header",
    "azure-storage-key": "AccountKey=short",
}


def test_every_detector_has_a_true_and_a_false_sample() -> None:
    kinds = {d.kind for d in DETECTORS}
    assert kinds == set(TRUE) == set(FALSE)


@pytest.mark.parametrize("kind", sorted(TRUE))
def test_each_kind_is_found_and_named(kind: str) -> None:
    found: list[str] = []
    text = f"before {TRUE[kind]} after"
    masked = mask_text(text, found)
    assert masked == f"before [secret masked: {kind}] after"
    assert found == [kind]


@pytest.mark.parametrize("kind", sorted(FALSE))
def test_look_alikes_are_left_alone(kind: str) -> None:
    found: list[str] = []
    assert mask_text(FALSE[kind], found) == FALSE[kind]
    assert found == []


def test_every_occurrence_is_masked_and_counted() -> None:
    found: list[str] = []
    text = f"{TRUE['aws-access-key-id']} and again {TRUE['aws-access-key-id']}"
    assert mask_text(text, found).count("[secret masked: aws-access-key-id]") == 2
    assert found == ["aws-access-key-id", "aws-access-key-id"]


def test_a_message_is_walked_and_left_as_it_is_when_clean() -> None:
    clean = {"content": [{"type": "text", "text": "hello"}], "n": 3, "ok": True}
    found: list[str] = []
    assert mask_strings(clean, found) is clean and found == []
    dirty = {"content": [{"type": "text", "text": "k=" + TRUE["npm-token"]}], "meta": [clean]}
    masked = mask_strings(dirty, found)
    assert masked["content"][0]["text"] == "k=[secret masked: npm-token]"
    assert masked["meta"][0] is clean  # untouched parts are shared, not copied
    assert dirty["content"][0]["text"].startswith("k=npm_")  # the input is not changed


KEY_LINES = KEY_BODY.split("\n")


@pytest.mark.parametrize(
    "read",
    [
        # the first lines of the file (head), the last lines (tail), a page in the middle
        "-----BEGIN OPENSSH PRIVATE KEY-----\n" + "\n".join(KEY_LINES[:2]),
        "\n".join(KEY_LINES[1:]) + "\n-----END OPENSSH PRIVATE KEY-----\n",
        "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n"
        + "DEK-Info: AES-128-CBC,0123\n\n"
        + "\n".join(KEY_LINES),
    ],
    ids=["head", "tail", "pem-headers"],
)
def test_a_private_key_read_in_part_is_masked(read: str) -> None:
    found: list[str] = []
    shown = mask_text(f"the file says:\n{read}\nthat is all", found)
    assert not any(line in shown for line in KEY_LINES), shown
    assert shown.startswith("the file says:\n[secret masked: private-key]")
    assert shown.endswith("\nthat is all") and found == ["private-key"]


def test_aws_key_ids_bounded_by_underscores_or_letters_are_masked() -> None:
    key = TRUE["aws-access-key-id"]
    for text in (f"AWS_KEY_{key}", f"{key}_old", f"id={key}."):
        assert key not in mask_text(text), text
    assert mask_text(f"X{key}") == f"X{key}"  # a longer word is not an id


def test_a_credential_used_as_an_object_key_is_masked() -> None:
    found: list[str] = []
    masked = mask_strings({"tokens": {TRUE["github-token"]: "ci"}}, found)
    assert masked == {"tokens": {"[secret masked: github-token]": "ci"}}
    assert found == ["github-token"]


def test_a_long_hostile_text_is_read_once() -> None:
    # Many key-like lines and edges with nothing between them: linear, not quadratic.
    hostile = ("A" * 64 + "\n-----END RSA PRIVATE KEY-----\n") * 20_000
    assert "A" * 64 not in mask_text(hostile)


def test_a_known_value_holding_another_is_masked_whole() -> None:
    # Masking the shorter first would leave the longer one's rest (its "-and-more") in view.
    known = [("SHORT", "tok-1"), ("LONG", "tok-1-and-more")]
    found: list[str] = []
    out = mask_known({"t": "tok-1-and-more and tok-1"}, known, found)
    assert out == {"t": "[secret masked: LONG] and [secret masked: SHORT]"}
    assert sorted(found) == ["LONG", "SHORT"]


# Where a hostile server may put a credential in a small answer, around it what the JSON
# encoder escapes (quotes, backslashes, control characters) and what it does not (non-ASCII,
# a lone surrogate): an answer is passed whole only when no string in it can hold one.
PLACES: dict[str, Callable[[str], object]] = {
    "a value": lambda s: {"content": [{"type": "text", "text": s}]},
    "a key": lambda s: {"structuredContent": {s: 1}},
    "deep in a list": lambda s: {"a": [[[{"b": ["x", s]}]]]},
    "after escapes": lambda s: {"text": 'q"\\\n\t\x01' + s + '"\\'},
    "among non-ASCII": lambda s: {"text": "é\u2028日本 " + s + " \ud800"},
    "a bare string": lambda s: s,
}


@pytest.mark.parametrize("place", sorted(PLACES))
@pytest.mark.parametrize("kind", sorted(TRUE))
def test_a_credential_anywhere_in_a_small_answer_is_masked(kind: str, place: str) -> None:
    found: list[str] = []
    answer = PLACES[place](TRUE[kind])
    masked = mask_strings(answer, found)
    assert TRUE[kind] not in json.dumps(masked, ensure_ascii=False), masked
    assert kind in found


def test_a_credential_escaped_on_the_wire_is_masked() -> None:
    # The server writes every character as \uXXXX: its line holds no marker, the decoded
    # text does. The check is over what the client would read, not over the server's line.
    key = TRUE["aws-access-key-id"]
    line = '{"content":[{"type":"text","text":"' + "".join(f"\\u{ord(c):04x}" for c in key) + '"}]}'
    assert not any(d.may_be_in(line) for d in DETECTORS)  # the line alone would pass
    found: list[str] = []
    masked = mask_strings(json.loads(line), found)
    assert masked["content"][0]["text"] == "[secret masked: aws-access-key-id]"


def test_a_marker_split_over_two_strings_changes_nothing() -> None:
    # Its JSON shows "AKIA" across a key and its value: each string is scanned, none holds one.
    answer = {"AK": "IA" + "B" * 16}
    found: list[str] = []
    assert mask_strings(answer, found) == answer and found == []


def test_a_clean_answer_larger_than_one_search_is_scanned_and_left_as_it_is() -> None:
    clean = {"content": [{"type": "text", "text": "plain words " * 2000}]}
    found: list[str] = []
    assert mask_strings(clean, found) is clean and found == []
    dirty = {"content": [{"type": "text", "text": "plain words " * 2000 + TRUE["jwt"]}]}
    assert mask_strings(dirty, found)["content"][0]["text"].endswith("[secret masked: jwt]")
