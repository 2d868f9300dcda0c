"""What ``wrap`` says besides wrapping: a dry run's diffs are each a valid diff even when a
file has no final newline (``patch`` turns each original into what wrap then writes); a
project file git tracks is named as such before its rewrite puts this machine's paths in
it (the control: the same file untracked is not); Qwen Code's files are known; a server
allowed any name is not reported as allowed one domain."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from launcher.session.report import reach
from policy.egress import EgressRules
from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.paths import IRONCURTAIN


def _cli(user: Home, project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [IRONCURTAIN, *args], env=user.env, cwd=project, capture_output=True, text=True,
        stdin=subprocess.DEVNULL, timeout=60,
    )  # fmt: skip


def _entry(name: str) -> dict[str, object]:
    return {"mcpServers": {name: {"command": "/usr/bin/env", "args": ["true"]}}}


def test_each_dry_run_diff_applies_with_patch_when_a_file_has_no_final_newline(
    user: Home, tmp_path: Path
) -> None:
    project = user.root / "proj"
    project.mkdir()
    files = {
        project / ".mcp.json": json.dumps(_entry("a")),  # one line, no final newline
        user.home / ".claude.json": json.dumps(_entry("b"), indent=2),
    }
    for path, text in files.items():
        path.write_text(text)
    shown = _cli(user, project, "wrap", "--client", "claude-code", "--dry-run", "--no-annotate")
    assert shown.returncode == 0, shown.stderr
    pieces = re.split(r"(?m)^(?=--- )", shown.stdout)
    diffs = {p.split(" (now)", 1)[0][4:]: p for p in pieces if p.startswith("--- ")}
    assert set(diffs) >= {str(p) for p in files}, shown.stdout
    assert "\\ No newline at end of file" in diffs[str(project / ".mcp.json")]
    done = _cli(user, project, "wrap", "--client", "claude-code", "--no-annotate")
    assert done.returncode == 0, done.stderr
    for path, text in files.items():
        original, patched = tmp_path / "original", tmp_path / "patched"
        original.write_text(text)
        applied = subprocess.run(
            ["patch", "-s", "-o", str(patched), str(original)], input=diffs[str(path)],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert applied.returncode == 0, applied.stdout + applied.stderr
        assert patched.read_bytes() == path.read_bytes()  # what wrap then wrote


@pytest.mark.parametrize("committed", [True, False])
def test_a_project_file_git_tracks_is_named_before_it_is_rewritten(
    user: Home, committed: bool
) -> None:
    project = user.root / "proj"
    project.mkdir()
    (project / ".mcp.json").write_text(json.dumps(_entry("a"), indent=2) + "\n")
    git = ["git", "-C", str(project)]
    subprocess.run([*git, "init", "-q"], check=True, env=user.env)
    if committed:
        subprocess.run([*git, "add", ".mcp.json"], check=True, env=user.env)
    done = _cli(user, project, "wrap", "--client", "claude-code", "--no-annotate")
    assert done.returncode == 0, done.stderr
    said = f"{project / '.mcp.json'} is tracked by git: the rewrite puts this machine's paths"
    assert (said in done.stderr) is committed, done.stderr


def test_qwen_codes_user_and_project_files_are_listed_and_wrapped(user: Home) -> None:
    project = user.root / "proj"
    (project / ".qwen").mkdir(parents=True)
    (user.home / ".qwen").mkdir()
    (user.home / ".qwen" / "settings.json").write_text(json.dumps(_entry("q-user")))
    (project / ".qwen" / "settings.json").write_text(json.dumps(_entry("q-project")))
    listed = _cli(user, project, "clients").stdout
    assert f"Qwen Code (user): {user.home / '.qwen' / 'settings.json'}" in listed
    assert f"Qwen Code (project): {project / '.qwen' / 'settings.json'}" in listed
    done = _cli(user, project, "wrap", "--client", "qwen-code", "--no-annotate")
    assert done.returncode == 0, done.stderr
    for path in (user.home / ".qwen" / "settings.json", project / ".qwen" / "settings.json"):
        (entry,) = json.loads(path.read_text())["mcpServers"].values()
        assert entry["command"] == IRONCURTAIN


@pytest.mark.parametrize(
    ("allowed", "said"),
    [
        (["*"], "any public name"),
        (["*", "example.org"], "any public name"),
        (["*:443"], "any public name on port 443, 0 domains more"),
        (["example.org"], "1 domain"),
        (["a.example.org", "b.example.org"], "2 domains"),
    ],
)
def test_the_report_says_any_public_name_for_a_star(allowed: list[str], said: str) -> None:
    assert reach(EgressRules.from_config(allowed)) == said


@needs_bwrap
def test_a_start_failure_is_shown_as_lines_and_the_servers_own_lines_stay_escaped(
    user: Home,
) -> None:
    config = user.root / "mcp-servers.json"
    script = r"printf 'line1\n\033[2Kforged\n' >&2; exit 1"
    server = {"command": "/bin/sh", "args": ["-c", script]}
    config.write_text(json.dumps({"mcpServers": {"v": server}}))
    done = _cli(user, user.root, "annotate-tools", "--server", "v", "--heuristic",
                "--config", str(config), "--output", str(user.root / "out.json"))  # fmt: skip
    assert done.returncode != 0
    lines = done.stderr.splitlines()
    start = lines.index("ironcurtain: error: server 'v' failed to start: server 'v' exited "
                        "with status 1")  # fmt: skip
    # ironcurtain's own line breaks are lines; what the server wrote stays escaped.
    assert lines[start + 1 : start + 4] == ["  its last output:", "    line1", "    \\x1b[2Kforged"]
    assert "\\x0a" not in done.stderr
