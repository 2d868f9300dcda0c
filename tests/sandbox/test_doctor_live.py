"""``ironcurtain doctor`` on this machine, and sessions where a part of the sandbox is missing:
without libseccomp doctor fails and ``run`` refuses unless ``--allow-no-seccomp`` (then the
servers run without the filter, and it says so); with a bwrap that cannot start,
``--allow-unsandboxed`` runs the server bare and the audit log says so."""

from __future__ import annotations

from tests.support.audit import audit_entries
from tests.support.cli import ironcurtain
from tests.support.fakes import FAILING_BWRAP, fake_bin
from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.sdk import call, connect


@needs_bwrap
def test_doctor_on_this_machine(user: Home) -> None:
    done = ironcurtain(user, "doctor")
    assert done.returncode == 0, done.stdout
    lines = done.stdout.splitlines()
    assert any(line.startswith("ok    bubblewrap") for line in lines)
    assert any(line.startswith("ok    seccomp") for line in lines)
    assert lines[-1] == "this machine can sandbox"


def test_allow_unsandboxed_runs_and_the_audit_log_says_so(user: Home) -> None:
    import asyncio

    user.env["PATH"] = f"{fake_bin(user, 'bwrap', FAILING_BWRAP)}:{user.env['PATH']}"
    audit = user.root / "audit.jsonl"

    async def scenario() -> None:
        async with connect(
            user, "--server", "time", "--allow-unsandboxed", "--audit-log", str(audit)
        ) as s:
            error, text = await call(s, "get_current_time", {"timezone": "UTC"})
            assert not error, text

    asyncio.run(scenario())
    assert [e["sandboxed"] for e in audit_entries(audit)] == [False]


def _without_libseccomp(user: Home) -> None:
    """Make the seccomp binding fail to load, as it does where libseccomp is missing."""
    fake = user.root / "no-seccomp"
    fake.mkdir(exist_ok=True)
    (fake / "pyseccomp.py").write_text('raise RuntimeError("Unable to find libseccomp")\n')
    user.env["PYTHONPATH"] = str(fake)


@needs_bwrap
def test_without_libseccomp_doctor_fails_and_run_refuses(user: Home) -> None:
    _without_libseccomp(user)
    done = ironcurtain(user, "doctor")
    assert done.returncode == 3
    assert "FAIL  seccomp          Unable to find libseccomp" in done.stdout
    done = ironcurtain(user, "run", "--server", "time")
    assert done.returncode == 3 and "Traceback" not in done.stderr
    assert "no seccomp filter can be built" in done.stderr
    assert "apt-get install libseccomp2" in done.stderr and "--allow-no-seccomp" in done.stderr


@needs_bwrap
def test_allow_no_seccomp_runs_without_the_filter_and_warns(user: Home) -> None:
    _without_libseccomp(user)
    # stdin is empty: the session starts, reports, sees end of input and stops.
    done = ironcurtain(user, "run", "--server", "time", "--allow-no-seccomp")
    assert done.returncode == 0, done.stderr
    assert "WARNING: sandboxes have NO SYSTEM-CALL FILTER" in done.stderr
    assert "time  sandboxed (bwrap, no network, NO seccomp filter)" in done.stderr
