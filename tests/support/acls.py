"""Trees with ACLs the user set, and ``getfacl -R`` of them, for the tests of what a session
running as root opens to its servers' user (``launcher.host.acl_ledger``)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.support.marks import lacks, needs_installed

SANDBOX_UID = 65534
BOB = 4242  # a user the owner gave limited access to
SECRET = "TOPSECRET-7f3a"

needs_acl_tools = needs_installed(
    shutil.which("getfacl") is None or shutil.which("setfacl") is None,
    "needs getfacl and setfacl (Debian's acl package)",
)


def setfacl(*args: str) -> None:
    subprocess.run(["setfacl", *args], check=True, capture_output=True, text=True)


def user_tree(root: Path) -> Path:
    """``root`` holding what a user keeps: a 0600 secrets file, a file bob may only read
    (his entry says rw-, the mask limits it to r--), a directory passing bob r-x on to what
    is made in it, a directory the sandbox is not shown. Skips where the filesystem has no
    ACLs."""
    (root / "sub").mkdir(parents=True)
    (root / "hidden").mkdir()
    (root / "secrets.txt").write_text(SECRET)
    (root / "secrets.txt").chmod(0o600)
    (root / "shared.txt").write_text("shared")
    (root / "sub" / "note.txt").write_text("note")
    (root / "hidden" / "private.key").write_text("key")
    (root / "hidden" / "private.key").chmod(0o600)
    try:
        setfacl("-m", f"u:{BOB}:rw-,m::r--", str(root / "shared.txt"))
    except subprocess.CalledProcessError as exc:
        lacks(f"no ACLs on this filesystem: {exc.stderr.strip()}")
    setfacl("-d", "-m", f"u:{BOB}:r-x", str(root / "sub"))
    (root / "sub" / "inherited.txt").write_text("inherited")  # bob's entry passed on
    return root


def getfacl(root: Path) -> dict[str, str]:
    """``getfacl -R`` of ``root`` (numeric ids): each file's block (owner, group, entries),
    by its path."""
    done = subprocess.run(
        ["getfacl", "-R", "-p", "-n", str(root)], check=True, capture_output=True, text=True
    )
    blocks = [b.strip() for b in done.stdout.split("\n\n") if b.strip()]
    return {b.splitlines()[0].removeprefix("# file: "): b for b in blocks}


def names_sandbox(block: str) -> bool:
    """Whether a file's ``getfacl -n`` block gives the sandbox's user anything of its own: an
    entry (access or default), or the file itself."""
    lines = block.splitlines()
    return f"# owner: {SANDBOX_UID}" in lines or any(
        line.removeprefix("default:").startswith(f"user:{SANDBOX_UID}:") for line in lines
    )
