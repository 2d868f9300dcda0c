"""The policy judges a git tool by where git really reads and writes (a ``.git`` file's
gitdir, a commondir, a bare repository, core.worktree, includes, alternates, symlinks), and
refuses path-role values it cannot walk. Real engine, bundled policy, real directories."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from policy.decision import StructuralConfig
from policy.engine import PolicyEngine
from policy.gitrepo import git_locations, parse_config
from policy.loader import bundled_policy_dir, load_policy_dir
from policy.paths import UnknownLocationError

GIT_ENV = {
    **os.environ,
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}


def git(*args: str | Path) -> None:
    subprocess.run(["git", *map(str, args)], check=True, capture_output=True, env=GIT_ENV)


@dataclass(frozen=True)
class Env:
    root: Path
    ws: Path
    outside: Path
    other_session: Path
    policy_dir: Path
    engine: PolicyEngine

    def decide(self, tool: str, **args: object) -> tuple[str, str, str]:
        server = "filesystem" if tool in FILESYSTEM_TOOLS else "git"
        if tool == "git_commit":
            args.setdefault("message", "m")
        decision, _ = self.engine.decide(server, tool, args, cwd=str(self.ws))
        return decision.decision, decision.rule, decision.reason


FILESYSTEM_TOOLS = {"read_file", "read_multiple_files", "list_directory", "edit_file"}
READ_DENIED = ("deny", "deny-read-elsewhere")
WRITE_ESCALATED = ("escalate", "escalate-write-elsewhere")
READ_ALLOWED = ("allow", "allow-read-in-workspace")
WRITE_ALLOWED = ("allow", "allow-write-in-workspace")
UNKNOWN = ("deny", "structural-git-location")


@pytest.fixture
def env(tmp_path: Path) -> Env:
    root = Path(os.path.realpath(tmp_path))
    state = root / "state"
    ws = state / "workspaces" / "s1"
    other_session = state / "workspaces" / "s0"
    outside = root / "outside"
    policy_dir = root / "conf" / "policy"
    for d in (ws, other_session, outside, policy_dir):
        d.mkdir(parents=True)
    (ws / "notes.txt").write_text("hi")
    files = load_policy_dir(bundled_policy_dir())
    structural = StructuralConfig(
        protected={str(policy_dir): "the policy directory"},
        state_dir=str(state),
        exempt=(str(ws),),
    )
    engine = PolicyEngine(
        files.policy, files.annotations, structural, variables={"workspace": str(ws)}
    )
    return Env(root, ws, outside, other_session, policy_dir, engine)


def outside_repo(env: Env) -> Path:
    repo = env.outside / "other-repo"
    git("init", "-q", repo)
    git("-C", repo, "commit", "-q", "--allow-empty", "-m", "first")
    return repo


def judged(env: Env, repo: Path) -> tuple[tuple[str, str], tuple[str, str]]:
    """(git_status, git_commit) on ``repo``: a read tool and a write tool."""
    read = env.decide("git_status", repo_path=str(repo))
    write = env.decide("git_commit", repo_path=str(repo))
    return read[:2], write[:2]


# -- a .git file -----------------------------------------------------------------------------


def test_a_real_linked_worktree_of_a_repository_outside_is_not_allowed(env: Env) -> None:
    other = outside_repo(env)
    git("-C", other, "worktree", "add", "-q", env.ws / "wt")
    assert (env.ws / "wt" / ".git").is_file()
    assert judged(env, env.ws / "wt") == (READ_DENIED, WRITE_ESCALATED)
    # A relative repo_path resolves in the workspace and is judged the same.
    assert env.decide("git_log", repo_path="wt")[:2] == READ_DENIED


@pytest.mark.parametrize("form", ["absolute", "relative"])
def test_a_git_file_pointing_outside_is_not_allowed(env: Env, form: str) -> None:
    other = outside_repo(env)
    repo = env.ws / "repo"
    repo.mkdir()
    target = other / ".git" if form == "absolute" else Path(os.path.relpath(other / ".git", repo))
    (repo / ".git").write_text(f"gitdir: {target}\n")
    assert judged(env, repo) == (READ_DENIED, WRITE_ESCALATED)
    assert git_locations(str(repo)) == (str(other / ".git"),)


def test_a_git_file_pointing_inside_the_workspace_is_allowed(env: Env) -> None:
    git("init", "-q", env.ws / "plain")
    assert judged(env, env.ws / "plain") == (READ_ALLOWED, WRITE_ALLOWED)
    (env.ws / "store").mkdir()
    git("init", "-q", "--separate-git-dir", env.ws / "store" / "repo.git", env.ws / "repo")
    assert (env.ws / "repo" / ".git").read_text().startswith("gitdir: ")
    assert judged(env, env.ws / "repo") == (READ_ALLOWED, WRITE_ALLOWED)
    # The same layout with the git directory moved out of the workspace is not.
    (env.ws / "store").rename(env.outside / "store")
    (env.ws / "repo" / ".git").write_text(f"gitdir: {env.outside}/store/repo.git\n")
    assert judged(env, env.ws / "repo") == (READ_DENIED, WRITE_ESCALATED)


@pytest.mark.parametrize(
    ("where", "rule"),
    [
        ("other session", "structural-protected-path"),
        ("policy dir", "structural-protected-path"),
        ("system root", "structural-system-root"),
    ],
)
def test_a_git_file_pointing_at_protected_places_is_denied(env: Env, where: str, rule: str) -> None:
    target = {
        "other session": env.other_session,
        "policy dir": env.policy_dir,
        "system root": Path("/etc"),
    }[where]
    repo = env.ws / "repo"
    repo.mkdir()
    (repo / ".git").write_text(f"gitdir: {target}")
    for tool in ("git_status", "git_commit", "git_reset"):
        decision, got, reason = env.decide(tool, repo_path=str(repo))
        assert (decision, got) == ("deny", rule), reason
        assert "repo_path" in reason


def test_a_symlinked_dot_git_is_followed(env: Env) -> None:
    other = outside_repo(env)
    (env.ws / "repo").mkdir()
    (env.ws / "repo" / ".git").symlink_to(other / ".git")
    assert judged(env, env.ws / "repo") == (READ_DENIED, WRITE_ESCALATED)


# -- commondir, bare repositories, worktree administrative directories ----------------------


def test_a_commondir_pointing_outside_is_not_allowed(env: Env) -> None:
    other = outside_repo(env)
    admin = env.ws / "admin"
    admin.mkdir()
    (admin / "HEAD").write_text("ref: refs/heads/main\n")
    (admin / "commondir").write_text(f"{os.path.relpath(other / '.git', admin)}\n")
    repo = env.ws / "repo"
    repo.mkdir()
    (repo / ".git").write_text("gitdir: ../admin\n")
    assert judged(env, repo) == (READ_DENIED, WRITE_ESCALATED)
    assert git_locations(str(repo)) == (str(admin), str(other / ".git"))


def test_a_commondir_inside_a_dot_git_directory_is_followed(env: Env) -> None:
    other = outside_repo(env)
    git("init", "-q", env.ws / "repo")
    (env.ws / "repo" / ".git" / "commondir").write_text(str(other / ".git"))
    assert judged(env, env.ws / "repo") == (READ_DENIED, WRITE_ESCALATED)


def test_a_bare_repository_in_the_workspace_is_allowed(env: Env) -> None:
    bare = env.ws / "bare.git"
    git("init", "-q", "--bare", bare)
    assert judged(env, bare) == (READ_ALLOWED, WRITE_ALLOWED)
    assert env.decide("git_log", repo_path=str(bare))[:2] == READ_ALLOWED
    # Its own commondir is followed like any git directory's.
    other = outside_repo(env)
    (bare / "commondir").write_text(str(other / ".git"))
    assert judged(env, bare) == (READ_DENIED, WRITE_ESCALATED)


def test_a_worktree_administrative_directory_names_its_working_tree(env: Env) -> None:
    other = outside_repo(env)
    admin = env.ws / "admin"
    admin.mkdir()
    (admin / "HEAD").write_text("ref: refs/heads/main\n")
    (admin / "commondir").write_text("../inside-common\n")
    (env.ws / "inside-common" / "objects").mkdir(parents=True)
    (admin / "gitdir").write_text(f"{other}/.git\n")  # the working tree: ``other``
    assert judged(env, admin) == (READ_DENIED, WRITE_ESCALATED)


# -- config and objects ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "config",
    [
        "[core]\n\tworktree = {out}\n",
        '[Core] WorkTree = "{out}" ; moved\n',
        "[core]\n\thooksPath = {out}/hooks\n",
        "[include]\n\tpath = {out}/shared.gitconfig\n",
        '[includeIf "gitdir:~/"]\n\tpath = {out}/shared.gitconfig\n',
    ],
)
def test_a_config_that_moves_git_outside_is_not_allowed(env: Env, config: str) -> None:
    git("init", "-q", env.ws / "repo")
    with (env.ws / "repo" / ".git" / "config").open("a") as handle:
        handle.write(config.format(out=env.outside))
    assert judged(env, env.ws / "repo") == (READ_DENIED, WRITE_ESCALATED)


def test_an_included_config_is_read_for_a_worktree(env: Env) -> None:
    other = outside_repo(env)
    git("init", "-q", env.ws / "repo")
    (env.ws / "repo" / "extra.gitconfig").write_text(f"[core]\n\tworktree = {other}\n")
    with (env.ws / "repo" / ".git" / "config").open("a") as handle:
        handle.write("[include]\n\tpath = ../extra.gitconfig\n")
    assert judged(env, env.ws / "repo") == (READ_DENIED, WRITE_ESCALATED)


def test_alternates_and_symlinks_in_the_git_directory_are_followed(env: Env) -> None:
    other = outside_repo(env)
    git("init", "-q", env.ws / "a")
    (env.ws / "a" / ".git" / "objects" / "info" / "alternates").write_text(
        f"# borrowed\n{other}/.git/objects\n"
    )
    assert judged(env, env.ws / "a") == (READ_DENIED, WRITE_ESCALATED)
    git("init", "-q", env.ws / "b")
    refs = env.ws / "b" / ".git" / "refs"
    subprocess.run(["rm", "-rf", str(refs)], check=True)
    refs.symlink_to(other / ".git" / "refs")
    assert judged(env, env.ws / "b") == (READ_DENIED, WRITE_ESCALATED)


# -- what cannot be known is refused -------------------------------------------------------


def _loop(env: Env) -> Path:
    for a, b in (("a", "b"), ("b", "a")):
        (env.ws / a).mkdir()
        (env.ws / a / ".git").write_text(f"gitdir: ../{b}/.git\n")
    return env.ws / "a"


def _symlink_loop(env: Env) -> Path:
    (env.ws / "r").mkdir()
    (env.ws / "r" / ".git").symlink_to(env.ws / "r" / ".git")
    return env.ws / "r"


def _malformed(env: Env) -> Path:
    (env.ws / "r").mkdir()
    (env.ws / "r" / ".git").write_text("this is no pointer\n")
    return env.ws / "r"


def _empty_pointer(env: Env) -> Path:
    (env.ws / "r").mkdir()
    (env.ws / "r" / ".git").write_text("gitdir: \n")
    return env.ws / "r"


def _missing_target(env: Env) -> Path:
    (env.ws / "r").mkdir()
    (env.ws / "r" / ".git").write_text(f"gitdir: {env.outside}/nothing-here\n")
    return env.ws / "r"


def _fifo(env: Env) -> Path:
    (env.ws / "r").mkdir()
    os.mkfifo(env.ws / "r" / ".git")
    return env.ws / "r"


def _huge(env: Env) -> Path:
    (env.ws / "r").mkdir()
    (env.ws / "r" / ".git").write_text("gitdir: " + "x/" * 5000)
    return env.ws / "r"


def _unreadable_commondir(env: Env) -> Path:
    git("init", "-q", env.ws / "r")
    (env.ws / "r" / ".git" / "commondir").mkdir()
    return env.ws / "r"


def _bad_config(env: Env) -> Path:
    git("init", "-q", env.ws / "r")
    with (env.ws / "r" / ".git" / "config").open("a") as handle:
        handle.write('[core]\n\tworktree = "unterminated\n')
    return env.ws / "r"


def _too_many_hops(env: Env) -> Path:
    # Each repository's core.worktree is the next one: more hops than the walk follows.
    for i in range(6):
        git("init", "-q", env.ws / f"r{i}")
        with (env.ws / f"r{i}" / ".git" / "config").open("a") as handle:
            handle.write(f"[core]\n\tworktree = {env.ws}/r{i + 1}\n")
    return env.ws / "r0"


@pytest.mark.parametrize(
    "make",
    [
        _loop,
        _symlink_loop,
        _malformed,
        _empty_pointer,
        _missing_target,
        _fifo,
        _huge,
        _unreadable_commondir,
        _bad_config,
        _too_many_hops,
    ],
)
def test_a_git_directory_that_cannot_be_known_is_refused(env: Env, make: object) -> None:
    assert callable(make)
    repo = make(env)
    for tool in ("git_status", "git_commit"):
        decision, rule, reason = env.decide(tool, repo_path=str(repo))
        assert (decision, rule) == UNKNOWN, reason
        assert "'repo_path'" in reason and str(env.root) not in reason
    with pytest.raises(UnknownLocationError):
        git_locations(str(repo))


def test_a_file_list_of_a_git_tool_is_walked_too(env: Env) -> None:
    git("init", "-q", env.ws / "repo")
    _loop(env)
    ok = env.decide("git_add", repo_path=str(env.ws / "repo"), files=["notes.txt"])
    assert ok[:2] == WRITE_ALLOWED
    # files are relative to the repository: "../a" is the workspace's loop.
    bad = env.decide("git_add", repo_path=str(env.ws / "repo"), files=["notes.txt", "../a"])
    assert bad[:2] == UNKNOWN and "'files'" in bad[2]
    # A path that is no repository (a plain directory or file, a missing path) adds nothing.
    assert env.decide("git_status", repo_path=str(env.ws))[:2] == READ_ALLOWED
    assert git_locations(str(env.ws)) == ()
    assert git_locations(str(env.ws / "notes.txt")) == ()
    assert git_locations(str(env.ws / "missing" / "deeper")) == ()


def test_filesystem_tools_are_not_judged_by_git(env: Env) -> None:
    other = outside_repo(env)
    git("-C", other, "worktree", "add", "-q", env.ws / "wt")
    _loop(env)
    assert env.decide("list_directory", path=str(env.ws / "wt"))[:2] == READ_ALLOWED
    assert env.decide("list_directory", path=str(env.ws / "a"))[:2] == READ_ALLOWED
    # ... while the git server is (the pair that shows the difference).
    assert env.decide("git_status", repo_path=str(env.ws / "wt"))[:2] == READ_DENIED


def test_the_forwarded_repo_path_is_the_canonical_one_alone(env: Env) -> None:
    git("init", "-q", "--separate-git-dir", env.ws / "store.git", env.ws / "repo")
    decision, transport = env.engine.decide(
        "git", "git_status", {"repo_path": "repo/../repo"}, cwd=str(env.ws)
    )
    assert decision.decision == "allow"
    assert transport == {"repo_path": str(env.ws / "repo")}
    assert git_locations(str(env.ws / "repo")) == (str(env.ws / "store.git"),)
    # Judged by its git directory elsewhere, it is still forwarded as the path named.
    (env.ws / "store.git").rename(env.outside / "store.git")
    (env.ws / "repo" / ".git").write_text(f"gitdir: {env.outside}/store.git\n")
    decision, transport = env.engine.decide(
        "git", "git_status", {"repo_path": "repo"}, cwd=str(env.ws)
    )
    assert (decision.decision, decision.rule) == READ_DENIED
    assert transport == {"repo_path": str(env.ws / "repo")}


# -- path-role shapes -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "args", "arg"),
    [
        ("read_file", {"path": 7}, "path"),
        ("read_file", {"path": None}, "path"),
        ("read_file", {"path": {"path": "/etc/passwd"}}, "path"),
        ("read_multiple_files", {"paths": [["/etc/passwd"]]}, "paths"),
        ("read_multiple_files", {"paths": ["notes.txt", {"path": "x"}]}, "paths"),
        ("read_multiple_files", {"paths": ["notes.txt", 7]}, "paths"),
        ("edit_file", {"path": [{"path": "notes.txt"}], "edits": []}, "path"),
        ("git_add", {"repo_path": ".", "files": [["notes.txt"]]}, "files"),
    ],
)
def test_path_role_values_must_be_strings_or_lists_of_strings(
    env: Env, tool: str, args: dict[str, object], arg: str
) -> None:
    decision, rule, reason = env.decide(tool, **args)
    assert (decision, rule) == ("deny", "structural-path-shape"), reason
    assert f"'{arg}'" in reason


def test_a_nested_path_outside_the_workspace_is_never_allowed(env: Env) -> None:
    # Without the shape rule the nested value would be walked but never canonicalised.
    (env.ws / "escape").symlink_to(env.outside)
    (env.outside / "secret.txt").write_text("s")
    nested = {"paths": [[str(env.ws / "escape" / "secret.txt")]]}
    assert env.decide("read_multiple_files", **nested)[:2] == ("deny", "structural-path-shape")


def test_a_list_of_strings_is_canonicalised_for_policy_and_transport(env: Env) -> None:
    (env.ws / "sub").mkdir()
    (env.ws / "escape").symlink_to(env.outside)
    (env.outside / "secret.txt").write_text("s")
    decision, transport = env.engine.decide(
        "filesystem",
        "read_multiple_files",
        {"paths": ["notes.txt", "sub/../notes.txt"]},
        cwd=str(env.ws),
    )
    assert decision.decision == "allow"
    assert transport == {"paths": [str(env.ws / "notes.txt")] * 2}
    decision, transport = env.engine.decide(
        "filesystem",
        "read_multiple_files",
        {"paths": ["notes.txt", "escape/secret.txt"]},
        cwd=str(env.ws),
    )
    assert (decision.decision, decision.rule) == READ_DENIED
    assert transport == {"paths": [str(env.ws / "notes.txt"), str(env.outside / "secret.txt")]}
    # A string where a list may be, a list for a single path, objects in other arguments:
    # all fine; one level deeper is not.
    assert env.decide("read_file", path=["notes.txt"])[:2] == READ_ALLOWED
    git_status = env.decide("git_status", repo_path=["."], extra={"repo_path": 1})
    assert git_status[:2] == READ_ALLOWED
    assert env.decide("read_multiple_files", paths=[["notes.txt"]])[1] == "structural-path-shape"


# -- the config reader ----------------------------------------------------------------------


def test_the_config_is_read_as_git_reads_it(env: Env) -> None:
    text = (
        "# comment\n[core]\n\tbare = false\n\tflag\n"
        '[core "sub"] worktree = /not-core\n'
        "[CORE]\n\tWorkTree = a\\\n b ; c\n"
        '[section.Sub]\n\tkey = "x\\ty" # z\n'
    )
    assert parse_config(text) == [
        ("core", None, "bare", "false"),
        ("core", None, "flag", None),
        ("core", "sub", "worktree", "/not-core"),
        ("core", None, "worktree", "a b"),
        ("section", "sub", "key", "x\ty"),
    ]
    assert parse_config("k = 1\n[c]\nw = a\tb\t") == [("", None, "k", "1"), ("c", None, "w", "a b")]
    for bad in ("[core", '[core "x]', "[core]\nk = \\q", "[c]\n=x", "[c]\n1k = 1"):
        with pytest.raises(UnknownLocationError):
            parse_config(bad)
    git("init", "-q", env.ws / "repo")
    head, tail = str(env.outside)[:5], str(env.outside)[5:]
    with (env.ws / "repo" / ".git" / "config").open("a") as handle:
        handle.write(f'[CORE]\n\tWorkTree = "{head}\\\n{tail}" # moved\n')
    assert parse_config((env.ws / "repo" / ".git" / "config").read_text())[-1] == (
        "core",
        None,
        "worktree",
        str(env.outside),
    )
    assert judged(env, env.ws / "repo") == (READ_DENIED, WRITE_ESCALATED)
