"""The judgement of a writable root as a whole (``sandbox_profiles.writable_roots``) on real
directories, and the homes it is given (``launcher.plan.workspace.homes``)."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from launcher.plan import workspace
from launcher.shared.user_errors import OptionError
from sandbox_profiles.writable_roots import root_problem


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a directory to another uid")
def test_a_home_a_directory_service_does_not_list_is_found_by_its_owner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A directory service that does not enumerate its users (sssd, LDAP) lists nobody in
    # getpwall(); the home of the workspace's owner is still a home.
    other = tmp_path / "other"
    other.mkdir()
    os.chown(other, 54321, 54321)
    entry = ("dirsvc-user", "x", 54321, 54321, "", str(other), "/bin/sh")
    real = pwd.getpwuid
    monkeypatch.setattr(pwd, "getpwall", lambda: [])
    monkeypatch.setattr(
        pwd, "getpwuid", lambda uid: pwd.struct_passwd(entry) if uid == 54321 else real(uid)
    )
    with pytest.raises(OptionError) as refused:
        workspace.check_workspace(str(other), "~dirsvc-user")
    assert "is the home directory of dirsvc-user" in str(refused.value)
    os.chown(other, 54322, 54322)  # the control: its owner's home is elsewhere
    with pytest.raises(KeyError):
        real(54322)
    workspace.check_workspace(str(other), "~dirsvc-user")


def test_the_way_to_an_entry_of_several_parts_is_refused_an_ordinary_bin_is_not(
    tmp_path: Path,
) -> None:
    for name, said in ((".cargo", ".cargo/config"), (".hg", ".hg/hgrc"), (".jj", ".jj/repo")):
        why = root_problem(str(tmp_path / "p" / name), {})
        assert why is not None and said in why, (name, why)
    assert root_problem(str(tmp_path / "p" / "bin"), {}) is None
    assert root_problem(str(tmp_path / "p" / "src" / "hooks"), {}) is None


def test_a_directory_git_takes_for_a_repository_is_refused_whatever_its_name(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    for name in ("objects", "refs"):
        (store / name).mkdir(parents=True)
    (tmp_path / "plain").mkdir()
    assert root_problem(str(store / "objects"), {}) is None  # no HEAD: not a repository
    (store / "HEAD").write_text("ref: refs/heads/main\n")
    why = root_problem(str(store / "objects"), {})
    assert why is not None and "git directory" in why
    assert root_problem(str(tmp_path / "plain"), {}) is None


def test_a_home_is_found_by_identity_under_another_name(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    alias = tmp_path / "alias"
    alias.symlink_to(home)
    homes = {str(alias): "your home directory"}  # the home as $HOME names it, a link
    assert root_problem(str(home), homes) == "is your home directory"
    assert root_problem(str(tmp_path), homes) == f"holds your home directory ({alias})"
    assert root_problem(str(home / "work"), homes) is None
