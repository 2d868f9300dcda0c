"""Pattern approvals judged as data: which patterns a question offers, and which calls fall
under one. The attack rows are what an agent with allowed calls only would try next; each
has a control showing a naive check (a prefix of the raw path, the host a lenient parser
reads) would have let it through."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from policy.models import ToolAnnotation
from policy.patterns import CallShape, Pattern, call_shape, covers, offered, strict_host

WRITE = ToolAnnotation(
    tool_name="write_file",
    server_name="fs",
    effect="write",
    side_effects=True,
    args={"path": ["write-path"], "content": ["none"]},
)
FETCH = ToolAnnotation(
    tool_name="fetch",
    server_name="web",
    effect="read",
    side_effects=False,
    args={"url": ["fetch-url"], "max_length": ["none"]},
)
REMOVE = ToolAnnotation(
    tool_name="delete",
    server_name="fs",
    effect="delete",
    side_effects=True,
    args={"path": ["delete-path"]},
)
ENV = ToolAnnotation(
    tool_name="env_value", server_name="probe", effect="read", side_effects=False,
    args={"name": ["none"]},
)  # fmt: skip


def _write(path: str, rule: str = "escalate-write-elsewhere") -> CallShape:
    return call_shape("fs", "write_file", rule, WRITE, {"path": path, "content": "x"}, "/")


def _fetch(url: str) -> CallShape:
    return call_shape("web", "fetch", "ask-fetch", FETCH, {"url": url}, "/")


def _none(directory: str) -> None:
    return None


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "out").symlink_to(b)
    return a.resolve(), b.resolve()


def _directory_pattern(a: Path) -> Pattern:
    (pattern,) = offered(_write(str(a / "first.txt")), _none)
    assert pattern.kind == "directory" and pattern.value == str(a)
    return pattern


def test_a_directory_pattern_covers_writes_under_it(places: tuple[Path, Path]) -> None:
    a, _ = places
    pattern = _directory_pattern(a)
    assert covers(pattern, _write(str(a / "second.txt")))
    assert covers(pattern, _write(str(a / "deeper" / "third.txt")))
    assert f"whose every path is under {a}" in pattern.text()


@pytest.mark.parametrize(
    "trick",
    ["{a}/../b/x.txt", "{a}/out/x.txt", "{a}/./../b/x.txt", "{a}x/x.txt", "{a}/out"],
    ids=["dot-dot", "symlink-out", "dot-then-dot-dot", "sibling-prefix", "the-link-itself"],
)
def test_a_directory_pattern_is_not_left_by_a_path_trick(
    places: tuple[Path, Path], trick: str
) -> None:
    a, _ = places
    pattern = _directory_pattern(a)
    raw = trick.format(a=a)
    shape = _write(raw)
    if trick != "{a}/out":
        assert not covers(pattern, shape), shape.paths
    else:  # the link itself resolves to the other directory, never a path under a
        assert shape.paths == (str(places[1]),) and not covers(pattern, shape)
    # Control: the raw path as the agent wrote it starts with the directory.
    raw_shape = CallShape("fs", "write_file", pattern.rule, shape.classes, (raw,), ())
    if trick != "{a}x/x.txt":
        assert covers(pattern, raw_shape)
    else:
        assert raw.startswith(str(a))  # a string prefix, not a path under it


def test_a_pattern_is_bound_to_its_server_tool_and_rule(places: tuple[Path, Path]) -> None:
    a, _ = places
    pattern = _directory_pattern(a)
    shape = _write(str(a / "x.txt"))
    assert covers(pattern, shape)
    # The same write escalated for another reason (a credential in its arguments, a tool
    # changed since pinned) is not what the human approved.
    assert not covers(pattern, _write(str(a / "x.txt"), rule="secret-in-arguments"))
    other = CallShape("other", "write_file", pattern.rule, shape.classes, shape.paths, ())
    assert not covers(pattern, other)


def test_removal_is_never_a_write_pattern(places: tuple[Path, Path]) -> None:
    a, _ = places
    pattern = _directory_pattern(a)
    removing = call_shape("fs", "write_file", pattern.rule, REMOVE, {"path": str(a / "x")}, "/")
    assert not covers(pattern, removing)
    assert offered(removing, _none) == []


def test_an_argument_the_annotation_does_not_name_is_never_covered(
    places: tuple[Path, Path],
) -> None:
    a, _ = places
    pattern = _directory_pattern(a)
    extra = call_shape(
        "fs", "write_file", pattern.rule, WRITE,
        {"path": str(a / "x"), "content": "", "also": "/etc/passwd"}, "/",
    )  # fmt: skip
    assert not covers(pattern, extra)


def test_no_directory_pattern_over_a_refused_place_or_the_root(places: tuple[Path, Path]) -> None:
    a, _ = places
    assert offered(_write(str(a / "x")), lambda d: "protected") == []
    assert offered(_write("/x.txt"), _none) == []


def test_a_domain_pattern_covers_that_host_only() -> None:
    # A fetch tool is offered its host, never "any URL" (every host at once).
    (pattern,) = offered(_fetch("https://example.com/a"), _none)
    assert pattern.kind == "domain" and pattern.value == "https://example.com"
    assert covers(pattern, _fetch("https://EXAMPLE.com/other?q=1"))
    assert covers(pattern, _fetch("https://example.com:443/x"))
    assert covers(pattern, _fetch("https://example.com."))


# The same host as the pattern's, reached another way: another service of that host, or
# the same one in clear.
ORIGIN_TRICKS = {
    "other-port": "https://example.com:8443/",
    "service-port": "http://example.com:6379/",
    "https-to-http": "http://example.com/",
    "port-zero": "https://example.com:0/",
}


@pytest.mark.parametrize("url", list(ORIGIN_TRICKS.values()), ids=list(ORIGIN_TRICKS))
def test_a_domain_pattern_does_not_cover_another_port_or_scheme(url: str) -> None:
    (pattern,) = offered(_fetch("https://example.com/"), _none)
    assert not covers(pattern, _fetch(url))
    assert strict_host(url) == "example.com"  # control: the host alone is the same


def test_a_domain_pattern_given_for_http_does_not_cover_https_elsewhere() -> None:
    (pattern,) = offered(_fetch("http://example.com:8080/a"), _none)
    assert pattern.value == "http://example.com:8080"
    assert "on http://example.com:8080 (exactly this scheme, host and port" in pattern.text()
    assert covers(pattern, _fetch("HTTP://Example.com:08080/b"))
    assert not covers(pattern, _fetch("https://example.com:8080/b"))
    assert not covers(pattern, _fetch("http://example.com/b"))


# A host a lenient parser (or a reader) takes for example.com that is not, or that a
# fetcher would take for another host.
URL_TRICKS = {
    "suffix": "https://example.com.evil.net/",
    "userinfo": "https://example.com@evil.net/",
    "userinfo-port": "https://example.com:443@evil.net/",
    "backslash": "https://evil.net\\@example.com/",
    "subdomain": "https://evil.example.com/",
    "idn-homoglyph": "https://ex\u0430mple.com/",
    "punycode-homoglyph": "https://xn--exmple-4nf.com/",
    "percent-host": "https://example%2ecom/",
    "fullwidth-dot": "https://example\uff0ecom/",
    "other-scheme": "ftp://example.com/",
    "no-slashes": "https:example.com",
}


@pytest.mark.parametrize("url", list(URL_TRICKS.values()), ids=list(URL_TRICKS))
def test_a_domain_pattern_is_not_used_by_a_url_trick(url: str) -> None:
    (pattern,) = offered(_fetch("https://example.com/"), _none)
    assert not covers(pattern, _fetch(url))
    assert strict_host(url) in (
        None,
        "evil.example.com",
        "example.com.evil.net",
        "xn--exmple-4nf.com",
    )


CONTROLS = {
    "suffix": lambda u: "example.com" in u,
    "userinfo": lambda u: "example.com" in u,
    "backslash": lambda u: urlsplit(u).hostname == "example.com",
    "subdomain": lambda u: (urlsplit(u).hostname or "").endswith("example.com"),
}


@pytest.mark.parametrize("name", list(CONTROLS), ids=list(CONTROLS))
def test_control_a_naive_host_check_passes_the_trick(name: str) -> None:
    assert CONTROLS[name](URL_TRICKS[name])


@pytest.mark.parametrize(
    "url", [" https://example.com/", "https://exa\tmple.com/"], ids=["leading-space", "tab"]
)
def test_a_url_is_judged_as_it_is_forwarded(url: str) -> None:
    # What the server is sent is the canonical URL, and that is what the pattern judges.
    assert strict_host(url) is None
    assert _fetch(url).urls == ("https://example.com/",)


def test_a_url_with_two_hosts_offers_no_domain() -> None:
    two = call_shape(
        "web", "fetch", "ask-fetch", FETCH,
        {"url": ["https://example.com/", "https://other.org/"]}, "/",
    )  # fmt: skip
    assert offered(two, _none) == []


def test_a_tool_pattern_only_for_a_class_that_changes_nothing(places: tuple[Path, Path]) -> None:
    a, _ = places
    env = call_shape("probe", "env_value", "ask-env", ENV, {"name": "HOME"}, "/")
    (pattern,) = offered(env, _none)
    assert pattern.kind == "tool" and pattern.value == "opaque"
    assert covers(pattern, call_shape("probe", "env_value", "ask-env", ENV, {"name": "X"}, "/"))
    # A write tool is offered its directory, never "any arguments".
    assert [p.kind for p in offered(_write(str(a / "x")), _none)] == ["directory"]


def test_paths_are_read_as_the_policy_reads_them(places: tuple[Path, Path]) -> None:
    a, b = places
    relative = call_shape(
        "fs", "write_file", "r", WRITE, {"path": "out/x.txt", "content": ""}, str(a)
    )
    assert relative.paths == (os.path.join(b, "x.txt"),)


# What a hostile server names its tool, or the agent its directory, so that the words the
# operator chooses read as a narrower pattern (or another directory) than the one given.
SHOWN_TRICKS = {
    "tool-fakes-a-scope": (
        Pattern("tool", "evil", "read_file whose every path is under /home/u/docs", "r", "read"),
        "whose every path is under /home/u/docs on server",
    ),
    "directory-fakes-the-end": (
        Pattern(
            "directory", "fs", "write_file", "r", "/tmp/x (reads and writes there); not /home/u"
        ),
        "under /tmp/x (reads and writes there);",
    ),
    "directory-homoglyph": (
        Pattern("directory", "fs", "write_file", "r", "/home/u/pr\u043ej"),
        "under /home/u/pr\u043ej (",
    ),
    "directory-bidi": (
        Pattern("directory", "fs", "write_file", "r", "/home/u/\u202ejorp"),
        "under /home/u/\u202ejorp (",
    ),
}


@pytest.mark.parametrize("name", list(SHOWN_TRICKS), ids=list(SHOWN_TRICKS))
def test_a_name_in_the_offered_words_cannot_pass_for_the_words_around_it(name: str) -> None:
    pattern, naive = SHOWN_TRICKS[name]
    text = pattern.text()
    assert text.isascii() and text.isprintable()  # no look-alike or invisible character
    shown = pattern.tool if pattern.kind == "tool" else pattern.value
    # The name is delimited: it ends where its quote does, and reads back as given.
    quoted = re.search(r' "((?:[^"\\]|\\.)*)"', text)
    assert quoted is not None and json.loads(f'"{quoted[1]}"') == shown
    # Control: written as it is, the name's own words read as the pattern's.
    head = f"calls of {pattern.tool} on server '{pattern.server}' escalated by rule r"
    assert naive in f"{head} whose every path is under {pattern.value} ("


def test_a_plain_name_is_shown_as_it_is() -> None:
    text = Pattern("directory", "fs", "write_file", "r", "/home/u/proj-1.2").text()
    assert "calls of write_file on server 'fs'" in text and "under /home/u/proj-1.2 (" in text


GIT_ADD = ToolAnnotation(
    tool_name="git_add", server_name="git", effect="write", side_effects=True,
    args={"repo_path": ["write-path"], "files": ["write-path"]},
    relative_to={"files": "repo_path"},
)  # fmt: skip
COPY = ToolAnnotation(
    tool_name="copy", server_name="fs", effect="write", side_effects=True,
    args={"source": ["read-path"], "destination": ["write-path"]},
)  # fmt: skip


def _git_add(repo: Path, *files: str, cwd: str = "/") -> CallShape:
    arguments = {"repo_path": str(repo), "files": list(files)}
    return call_shape("git", "git_add", "ask-git", GIT_ADD, arguments, cwd)


def test_every_path_of_a_call_must_lie_under_the_directory(places: tuple[Path, Path]) -> None:
    """Two paths in one call, one under the pattern, one not: a list holding one outside,
    a path relative to another argument that leaves it, a read from outside beside a write
    inside (and the other way round)."""
    a, b = places
    repo = a / "repo"
    repo.mkdir()
    (pattern,) = [p for p in offered(_git_add(repo, "x.txt"), _none) if p.kind == "directory"]
    assert pattern.value == str(a)
    assert covers(pattern, _git_add(repo, "y.txt", "sub/z.txt"))
    for shape in (_git_add(repo, "y.txt", f"{b}/x"), _git_add(repo, "y.txt", "../../b/x")):
        assert not covers(pattern, shape), shape.paths
        # Control: the first path alone is under it.
        assert covers(pattern, _git_add(repo, "y.txt"))
    copy = Pattern("directory", "fs", "copy", "ask-copy", str(a))
    for source, destination in ((b / "s", a / "d"), (a / "s", b / "d")):
        arguments = {"source": str(source), "destination": str(destination)}
        shape = call_shape("fs", "copy", "ask-copy", COPY, arguments, "/")
        assert not covers(copy, shape), shape.paths
    inside = {"source": str(a / "s"), "destination": str(a / "d")}
    assert covers(copy, call_shape("fs", "copy", "ask-copy", COPY, inside, "/"))


def test_a_relative_path_is_judged_from_the_servers_directory(places: tuple[Path, Path]) -> None:
    """``x.txt`` from the server's working directory ``b`` is ``b/x.txt``: not under ``a``,
    whatever directory the agent meant it from."""
    a, b = places
    pattern = _directory_pattern(a)
    relative = call_shape(
        "fs", "write_file", pattern.rule, WRITE, {"path": "x.txt", "content": ""}, str(b)
    )
    assert relative.paths == (str(b / "x.txt"),) and not covers(pattern, relative)
    same = call_shape(
        "fs", "write_file", pattern.rule, WRITE, {"path": "x.txt", "content": ""}, str(a)
    )
    assert covers(pattern, same)  # control: from a, it is under a


def test_a_tool_pattern_for_reads_does_not_cover_the_tool_once_it_writes(
    places: tuple[Path, Path],
) -> None:
    """The tool's annotation gains a write role (the tool changed): the call's shape is
    worked out again at each call, so the pattern given for its reads no longer covers it."""
    a, _ = places
    reads = ToolAnnotation(
        tool_name="show", server_name="fs", effect="read", side_effects=False,
        args={"path": ["read-path"]},
    )  # fmt: skip
    writes = ToolAnnotation(
        tool_name="show", server_name="fs", effect="write", side_effects=True,
        args={"path": ["read-path", "write-path"]},
    )  # fmt: skip
    arguments = {"path": str(a / "x")}
    (pattern,) = offered(call_shape("fs", "show", "r", reads, arguments, "/"), _none)
    assert pattern.kind == "tool" and pattern.value == "read"
    assert covers(pattern, call_shape("fs", "show", "r", reads, {"path": "/etc/hosts"}, "/"))
    assert not covers(pattern, call_shape("fs", "show", "r", writes, arguments, "/"))
