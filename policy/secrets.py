"""Credential detectors: what a server sends to the client is scanned for credentials in
formats with a recognisable shape, and each match is replaced by a marker naming its kind.

The table: each kind, its pattern, where the rule comes from, and what else it may match.
Rules named ``gitleaks:ID`` are those of gitleaks' default configuration
(``config/gitleaks.toml``), ``detect-secrets:NAME`` the plugins of Yelp's detect-secrets.
Every pattern carries a literal part that any match contains (``marker``: a string, or a
small pattern of alternatives): a text without it is passed over with one fast search,
which is what keeps the scan cheap on results without secrets (``scripts/bench.py output``).

================== ==================================== =====================================
kind               source                               false positives
================== ==================================== =====================================
private-key        gitleaks:private-key                 key blocks in documentation or test
                                                        fixtures (masked too: no way to tell)
aws-access-key-id  gitleaks:aws-access-token            AWS's documented example key
                                                        (AKIAIOSFODNN7EXAMPLE) is masked too
github-token       gitleaks:github-pat, github-oauth,   none known: fixed prefix and length
                   github-app-token,
                   github-refresh-token,
                   github-fine-grained-pat
gitlab-token       gitleaks:gitlab-pat                  none known: fixed prefix and length
slack-token        gitleaks:slack-bot-token,            an identifier that starts ``xoxb-``
                   slack-user-token, slack-app-token    and is not a token (rare)
stripe-key         gitleaks:stripe-access-token         test-mode keys (``sk_test_``) are
                                                        masked as well
google-api-key     gitleaks:gcp-api-key                 public browser keys (they are meant
                                                        to be restricted, not secret)
openai-api-key     gitleaks:openai-api-key              none known: needs the ``T3BlbkFJ``
                                                        marker; keys without it are missed
anthropic-api-key  gitleaks:anthropic-api-key,          none known: fixed prefix and length
                   anthropic-admin-api-key
npm-token          gitleaks:npm-access-token            none known
pypi-token         gitleaks:pypi-upload-token           none known
huggingface-token  gitleaks:huggingface-access-token    an identifier ``hf_`` + 34 letters
jwt                gitleaks:jwt                         JWTs shown on purpose (documentation,
                                                        a debugging tool's output)
azure-storage-key  detect-secrets:AzureStorageKey       none known
================== ==================================== =====================================
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from itertools import islice
from typing import Any

from sandbox_profiles.records import frozen

# Each detector's pattern once compiled, by its source (one entry per detector).
_COMPILED: dict[str, re.Pattern[str]] = {}


@frozen
class Detector:
    """One kind of credential: a marker every match contains (a cheap first look), and
    the pattern that finds it."""

    kind: str
    marker: str | re.Pattern[str]  # what every match contains
    source: str  # the pattern, compiled the first time a text shows the marker
    # A character every match holds, looked for first (one memchr: far cheaper than a
    # marker's search, and most texts lack ``_`` or ``-``).
    needs: str = ""

    @property
    def pattern(self) -> re.Pattern[str]:
        compiled = _COMPILED.get(self.source)
        if compiled is None:  # off the start: most sessions never see a marker
            compiled = _COMPILED[self.source] = re.compile(self.source)
        return compiled

    def may_be_in(self, text: str) -> bool:
        if self.needs and self.needs not in text:
            return False
        if isinstance(self.marker, str):
            return self.marker in text
        return self.marker.search(text) is not None


def _detector(
    kind: str, marker: str, pattern: str, literal: bool = True, needs: str = ""
) -> Detector:
    return Detector(kind, marker if literal else re.compile(marker), pattern, needs)


DETECTORS: tuple[Detector, ...] = (
    _detector(
        "private-key",
        "PRIVATE KEY",
        r"-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----"
        r"[\s\S]{64,}?-----END[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----",
        needs="-",
    ),
    _detector(
        "aws-access-key-id",
        "A(?:KIA|SIA|BIA|CCA|3T)",
        # Bounded by what is not a letter or digit (an underscore before it is no bound).
        r"(?<![A-Za-z0-9])(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}(?![A-Za-z0-9])",
        literal=False,
    ),
    _detector(
        "github-token",
        "gh(?:[pousr]|ithub_pat)_",
        r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{82})\b",
        literal=False,
        needs="_",
    ),
    _detector("gitlab-token", "glpat-", r"\bglpat-[A-Za-z0-9_-]{20,}\b", needs="-"),
    _detector("slack-token", "xox", r"\bxox[abposr]-[0-9A-Za-z-]{10,}\b", needs="-"),
    _detector(
        "stripe-key",
        "_(?:live|test)_",
        r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{24,}\b",
        literal=False,
        needs="_",
    ),
    _detector("google-api-key", "AIza", r"\bAIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])"),
    _detector(
        "openai-api-key",
        "T3BlbkFJ",
        r"\bsk-(?:[a-z]+-)?[A-Za-z0-9_-]{20,}T3BlbkFJ[A-Za-z0-9_-]{20,}(?![A-Za-z0-9_-])",
        needs="-",
    ),
    _detector(
        "anthropic-api-key",
        "sk-ant-",
        r"\bsk-ant-(?:api03|admin01)-[A-Za-z0-9_-]{93}AA(?![A-Za-z0-9_-])",
        needs="-",
    ),
    _detector("npm-token", "npm_", r"\bnpm_[A-Za-z0-9]{36}\b", needs="_"),
    _detector(
        "pypi-token", "pypi-AgEIcHlwaS5vcmc", r"\bpypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,}", needs="-"
    ),
    _detector("huggingface-token", "hf_", r"\bhf_[A-Za-z]{34}\b", needs="_"),
    _detector(
        "jwt",
        "eyJ",
        r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}(?![A-Za-z0-9_-])",
        needs=".",
    ),
    _detector("azure-storage-key", "AccountKey=", r"AccountKey=[A-Za-z0-9+/]{86}==?", needs="="),
)


# Every marker in one pattern: for a short text one search beats one per detector.
_ANY_MARKER = re.compile(
    "|".join(
        re.escape(d.marker) if isinstance(d.marker, str) else d.marker.pattern for d in DETECTORS
    )
)
_SHORT = 512

# A whole answer as JSON, strings as they are: the encoder escapes only quotes, backslashes
# and control characters, none of which is in any marker, so a marker in any of its strings
# (keys too) is in this text as it is. Up to this length one search over it all costs less
# than a walk that calls the scan once per string; past it, or when a marker shows (or
# merely spans two strings), each string is scanned as before.
_ENCODE = json.JSONEncoder(ensure_ascii=False, check_circular=False, separators=(",", ":")).encode
_WHOLE = 4096


def marker(kind: str) -> str:
    return f"[secret masked: {kind}]"


def mask_text(text: str, found: list[str] | None = None) -> str:
    """``text`` with every credential a detector recognises replaced by a marker naming
    its kind; each kind found is appended to ``found``.

    >>> mask_text("key: AKIAIOSFODNN7EXAMPLE, region: eu")
    'key: [secret masked: aws-access-key-id], region: eu'
    >>> mask_text("no secrets here, just a plain sentence")
    'no secrets here, just a plain sentence'
    """
    if len(text) < _SHORT and _ANY_MARKER.search(text) is None:
        return text
    for detector in DETECTORS:
        if detector.may_be_in(text):
            text, count = detector.pattern.subn(marker(detector.kind), text)
            if count and found is not None:
                found.extend([detector.kind] * count)
    if "PRIVATE KEY" in text:
        text = _key_pieces(text, found)
    return text


_KEY_EDGE = re.compile(r"-----(BEGIN|END)[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----")
_KEY_LINE = re.compile(r"[A-Za-z0-9+/=]{16,}|(?:Proc-Type|DEK-Info|Comment): .*|")


def _key_pieces(text: str, found: list[str] | None) -> str:
    r"""What is left of a private key read in part (a file's first or last lines, a page
    of it): from a BEGIN line through the key's lines after it, and from an END line back
    over the key's lines before it, each piece one marker. One pass over the lines.

    >>> _key_pieces("head:\n-----BEGIN OPENSSH PRIVATE KEY-----\n" + "QUJD" * 10 + "\n", None)
    'head:\n[secret masked: private-key]\n'
    """
    lines = text.split("\n")
    masked = [False] * len(lines)
    for at, line in enumerate(lines):
        edge = _KEY_EDGE.search(line)
        if edge is None:
            continue
        masked[at] = True
        step = 1 if edge.group(1) == "BEGIN" else -1
        other = at + step
        while 0 <= other < len(lines) and not masked[other]:
            body = lines[other].strip()
            if _KEY_EDGE.fullmatch(body):
                masked[other] = True  # its other end: the piece ends there
                break
            if not _KEY_LINE.fullmatch(body) or (not body and step < 0):
                break
            masked[other] = True
            other += step
    for at in range(len(lines) - 1, -1, -1):  # blank lines that end a piece are the text's
        if masked[at] and not lines[at].strip() and (at + 1 == len(lines) or not masked[at + 1]):
            masked[at] = False
    out: list[str] = []
    for at, line in enumerate(lines):
        if not masked[at]:
            out.append(line)
        elif at == 0 or not masked[at - 1]:
            out.append(marker("private-key"))
            if found is not None:
                found.append("private-key")
    return "\n".join(out)


def mask_strings(value: Any, found: list[str]) -> Any:
    """``value`` (JSON: objects, lists, strings, numbers) with every string masked; the
    same object when nothing was found (no copy on the common path). A long text that
    comes twice (a tool's answer as text and as structured content) is scanned once and
    counted each time."""
    if _none_can_match(value):
        return value
    seen: dict[str, tuple[str, list[str]]] = {}

    def change(text: str) -> str:
        if len(text) < 1024:
            return mask_text(text, found)
        if text not in seen:
            kinds: list[str] = []
            seen[text] = (mask_text(text, kinds), kinds)
        masked, kinds = seen[text]
        found.extend(kinds)
        return masked

    return _walk(value, change)


def _none_can_match(value: Any) -> bool:
    """Whether no string in ``value`` can hold a credential: no marker in its JSON."""
    if isinstance(value, str):
        return len(value) < _SHORT and _ANY_MARKER.search(value) is None
    try:
        text = _ENCODE(value)
    except (TypeError, ValueError, RecursionError):  # not plain JSON: each string is scanned
        return False
    return len(text) < _WHOLE and _ANY_MARKER.search(text) is None


def mask_known(value: Any, known: Sequence[tuple[str, str]], found: list[str]) -> Any:
    """``value`` (JSON) with each of ``known``'s values (name, value: a secret from the
    config) replaced by a marker naming it; the same object when none is there.

    >>> mask_known({"t": "token=s3cr3t-value!"}, [("API_TOKEN", "s3cr3t-value!")], [])
    {'t': 'token=[secret masked: API_TOKEN]'}
    """
    if not known:
        return value

    # The longest first: a value holding another whole is masked whole, not cut around it.
    known = sorted(known, key=lambda pair: -len(pair[1]))

    def change(text: str) -> str:
        for name, secret in known:
            if secret in text:
                found.append(name)
                text = text.replace(secret, marker(name))
        return text

    return _walk(value, change)


def _walk(value: Any, change: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return change(value)
    if isinstance(value, dict):
        # Keys are the server's to choose as much as values are: masked alike. A masked
        # key that meets another (two secrets of one kind) keeps the later value.
        changed: dict[Any, Any] | None = None  # a copy, made at the first change
        for index, (key, item) in enumerate(value.items()):
            new_key = change(key) if isinstance(key, str) else key
            new = _walk(item, change)
            if changed is None:
                if new is item and new_key == key:
                    continue
                changed = dict(islice(value.items(), index))
            changed[new_key] = new
        return value if changed is None else changed
    if isinstance(value, list):
        items = [_walk(item, change) for item in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value
