"""`ironcurtain run` read without typer (launcher.cli.run) reads every line it accepts as
typer would, and leaves every other line to typer."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest
import typer

from launcher.cli import app
from launcher.cli import run as run_cmd_module
from launcher.cli.run import read_run
from launcher.cli.run_flags import BY_FLAG, NOT_FLAGS, RUN_FLAGS, Kind, kind
from launcher.plan.run_options import RunOptions

EXECUTABLE = os.path.join(os.path.dirname(sys.executable), "ironcurtain")


def typer_reads(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> RunOptions:
    """The RunOptions typer's `run` command starts a session with, for ``argv``."""
    seen: list[RunOptions] = []

    def record(opts: RunOptions) -> int:
        seen.append(opts)
        return 0

    monkeypatch.setattr(run_cmd_module, "start", record)
    with pytest.raises(SystemExit) as ended:
        app.dispatch(["ironcurtain", *argv])
    assert ended.value.code == 0, f"typer refused {argv}"
    assert len(seen) == 1
    return seen[0]


def test_the_run_command_takes_the_tables_options() -> None:
    command = cast(Any, typer.main.get_command(app.app)).commands["run"]
    kinds: dict[str, Kind] = {}
    for param in command.params:
        assert param.param_type_name == "option", param.name  # no argument
        assert len(param.opts) == 1 and not param.secondary_opts, param.opts
        if param.is_flag:
            kinds[param.opts[0]] = "flag"
        elif param.multiple:
            assert param.type.name == "str"
            kinds[param.opts[0]] = "many"
        else:
            kinds[param.opts[0]] = param.type.name
    assert kinds == {option.flag: kind(option.flag) for option in RUN_FLAGS}


def test_every_setting_of_a_session_is_an_option_or_said_not_to_be() -> None:
    """A field added to RunOptions is given a flag, or named as one no command line sets."""
    fields = set(RunOptions.__dataclass_fields__)
    flagged = [option.field for option in RUN_FLAGS]
    assert len(set(flagged)) == len(flagged) == len(BY_FLAG)
    assert set(flagged) | NOT_FLAGS == fields
    assert not set(flagged) & NOT_FLAGS


WORDS = {
    "str": ["x.json", "/tmp/some dir/p", "", "ünï", "a=b"],
    "many": ["time", "git", "fs-1"],
    "int": ["0", "8080", "007", "65535"],
    "float": ["1", "2.5", "120.0", "0.001"],
}


def lines() -> list[list[str]]:
    """Every option alone in both spellings, then 300 random lines (a fixed seed)."""
    out: list[list[str]] = [["run"]]
    for option in RUN_FLAGS:
        flag, takes = option.flag, kind(option.flag)
        if takes == "flag":
            out.append(["run", flag])
            continue
        for word in WORDS[takes]:
            out.append(["run", flag, word])
            out.append(["run", f"{flag}={word}"])
    rng = random.Random(18)
    for _ in range(300):
        line = ["run"]
        for flag in rng.sample(list(BY_FLAG), rng.randint(1, len(BY_FLAG))):
            takes = kind(flag)
            for _ in range(rng.randint(1, 3) if takes == "many" else 1):
                if takes == "flag":
                    line.append(flag)
                elif rng.random() < 0.5:
                    line += [flag, rng.choice(WORDS[takes])]
                else:
                    line.append(f"{flag}={rng.choice(WORDS[takes])}")
        out.append(line)
    return out


def test_every_line_read_here_is_read_so_by_typer(monkeypatch: pytest.MonkeyPatch) -> None:
    for argv in lines():
        ours = read_run(argv, {})
        assert ours is not None, argv
        assert ours == typer_reads(argv, monkeypatch), argv


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["check"],
        ["--help"],
        ["run", "--help"],
        ["run", "-h"],
        ["run", "extra"],
        ["run", "--"],
        ["run", "--conf", "x.json"],  # an abbreviation
        ["run", "--config"],  # no value
        ["run", "--config", "--workspace", "w"],  # a value that looks like an option
        ["run", "--config=-x"],
        ["run", "--config", "a", "--config", "b"],  # given twice: typer takes the last
        ["run", "--allow-unsandboxed=true"],
        ["run", "--allow-unsandboxed", "--allow-unsandboxed"],
        ["run", "--http", "abc"],
        ["run", "--http", "-1"],
        ["run", "--http", "+80"],
        ["run", "--http", " 80"],
        ["run", "--http", "8_0"],
        ["run", "--max-identical-calls", "-1"],
        ["run", "--approval-timeout", "1e3"],
        ["run", "--approval-timeout", "inf"],
        ["run", "--approval-timeout", ".5"],
        ["run", "--http", "1" * 5000],  # past what int() takes: typer's error
        ["run", "--approval-timeout", "1." + "0" * 19],
    ],
)
def test_any_other_line_is_left_to_typer(argv: list[str]) -> None:
    assert read_run(argv, {}) is None


def test_a_completion_request_is_left_to_typer() -> None:
    assert read_run(["run"], {"_IRONCURTAIN_COMPLETE": "bash_source"}) is None
    assert read_run(["run"], {"HOME": "/root"}) is not None


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--server", "no-such-server"],  # read here: planning refuses it
        ["run", "--audit-args", "plain"],
        ["run", "--approval-timeout", "0"],
        ["run", "--http", "-1"],  # left to typer: planning refuses it
        ["run", "--http", "abc"],  # left to typer: typer refuses it
        ["run", "--bogus"],
    ],
)
def test_the_executable_answers_as_typer_does(tmp_path: Path, argv: list[str]) -> None:
    """A refused line gets the same message and exit status from the executable as from
    the typer app, and starts nothing."""
    env = {**os.environ, "HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state")}
    env.pop("XDG_CONFIG_HOME", None)
    runs = [
        subprocess.run(
            command + argv,
            capture_output=True,
            text=True,
            env=env,
            stdin=subprocess.DEVNULL,
            timeout=60,
        )
        for command in ([EXECUTABLE], [sys.executable, "-m", "launcher.cli.app"])
    ]
    ours, typers = runs
    assert ours.returncode == typers.returncode == 2
    # typer names the program as it was started: `ironcurtain` or `python -m launcher.cli.app`
    assert ours.stderr == typers.stderr.replace("python -m launcher.cli.app", "ironcurtain")
    assert ours.stderr.strip() and not ours.stdout
    assert "Traceback" not in ours.stderr


READ_A_LINE = """
import sys
from launcher.cli.run import read_run
assert read_run(["run", "--server", "time", "--http", "0"], {}) is not None
THEN
watched = ("typer", "launcher.plan.session_plan")
print(sorted(name for name in watched if name in sys.modules))
"""


@pytest.mark.parametrize(
    ("then", "loaded"),
    [
        ("", []),
        # the controls: the typer app loads typer, the planner is seen when loaded
        ("import launcher.cli.app", ["typer"]),
        ("import launcher.plan.session_plan", ["launcher.plan.session_plan"]),
    ],
)
def test_reading_a_run_line_loads_neither_typer_nor_the_planner(
    then: str, loaded: list[str]
) -> None:
    """The options are read from the table without typer (the start-up promise), and without
    the planner, which the session start loads next."""
    done = subprocess.run(
        [sys.executable, "-c", READ_A_LINE.replace("THEN", then)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == repr(loaded)
