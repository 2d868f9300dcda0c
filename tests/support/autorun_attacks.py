"""The attacks on what host tools run by themselves, as data, each under the id the autorun
catalogue's entries name it by: git configurations a naive reader would misread (planted by
``tests/attacks/test_autorun_families.py``) and the places a lefthook configuration names
(``tests/attacks/test_lefthook_places.py``). ``tests/attacks/test_persistence.py`` checks
that every catalogue entry names an attack that exists."""

from __future__ import annotations

import os

# Repositories whose git configuration names a place git runs or reads, not there yet:
# id -> (the repository's .git/config, bytes; what the server writes there: rel -> content)
HOOK = "#!/bin/sh\ntouch {marker}\n"
FSMONITOR = '[core]\n\tfsmonitor = "touch {marker}; true"\n'
BIG = 1 << 20


def _git_config_attacks() -> dict[str, tuple[bytes, dict[str, str]]]:
    head = b"[core]\n\trepositoryformatversion = 0\n"
    hooks = {".hk/pre-commit": HOOK}
    return {
        "bom-hooks-path": (b"\xef\xbb\xbf" + head + b"\thooksPath = .hk\n", hooks),
        "bom-include": (
            b"\xef\xbb\xbf" + head + b"[include]\n\tpath = ../../bom-inc.gitconfig\n",
            {"../bom-inc.gitconfig": FSMONITOR},
        ),
        "crlf-hooks-path": (head.replace(b"\n", b"\r\n") + b"\thooksPath = .hk\r\n", hooks),
        "case-and-comment": (head + b"[Core]\n\tHooksPath = .hk ; the team's\n", hooks),
        "quoted-escapes": (head + b'\thooksPath = ".h\\"k\\\\x"\n', {'.h"k\\x/pre-commit': HOOK}),
        "continued-line": (head + b"\thooksPath = .h\\\nk\n", hooks),
        "past-a-mib": (head + b"#" * BIG + b"\n\thooksPath = .hk\n", hooks),
        "include-if-onbranch": (
            head + b'[includeIf "onbranch:ma*"]\n\tpath = ../../ob.gitconfig\n',
            {"../ob.gitconfig": FSMONITOR},
        ),
        "include-if-hasconfig": (
            head + b'[includeIf "hasconfig:remote.*.url:https://x/**"]\n'
            b"\tpath = ../../hc.gitconfig\n"
            b'[remote "origin"]\n\turl = https://x/y\n',
            {"../hc.gitconfig": FSMONITOR},
        ),
        "form-feed-kept": (head + b"\thooksPath = .h\x0ck\n", {".h\x0ck/pre-commit": HOOK}),
    }


GIT_CONFIG_ATTACKS = _git_config_attacks()
# The user's repository includes a file too large to look at: every root goes read-only.
FAIL_CLOSED = "unreadable-include"
FAMILY_ATTACK_IDS = (
    "lefthook-config",
    "lefthook-script",
    "lefthook-agent",
    *GIT_CONFIG_ATTACKS,
    FAIL_CLOSED,
)

# Where npm puts lefthook's binary, which the hook it installs then runs.
NPM_LEFTHOOK = "node_modules/lefthook-linux-{}/bin/lefthook".format(
    {"x86_64": "x64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
)
SCRIPT = '\n  scripts:\n    "check.sh":\n      runner: sh\n'
NOOP = "\n  commands:\n    ok:\n      run: 'true'\n"
# case -> (the user's configuration: name, content), what the server writes: rel -> content
LEFTHOOK_CASES: dict[str, tuple[tuple[str, str], dict[str, str]]] = {
    "yaml-source-dir": (
        ("lefthook.yml", "SOURCE_DIR: tools/hk  # ours\npre-commit:" + SCRIPT),
        {"tools/hk/pre-commit/check.sh": "touch {marker}\n"},
    ),
    "toml-source-dir-local": (
        (
            "lefthook.toml",
            'source_dir_local = "my hooks"\n[pre-commit.scripts."check.sh"]\nrunner = "sh"\n',
        ),
        {"my hooks/pre-commit/check.sh": "touch {marker}\n"},
    ),
    "jsonc-source-dir": (
        (
            ".lefthook.jsonc",
            '{\n  // the team\'s hooks\n  "source_dir": "ci/hooks",\n'
            '  "pre-commit": {"scripts": {"check.sh": {"runner": "sh"}}},\n}\n',
        ),
        {"ci/hooks/pre-commit/check.sh": "touch {marker}\n"},
    ),
    "rc": (
        ("lefthook.yml", "rc: ./hookrc\npre-commit:" + NOOP),
        {"hookrc": "touch {marker}\n"},
    ),
    "extends-glob": (
        ("lefthook.yml", "extends:\n  - cfg/*.yml\npre-commit:" + NOOP),
        {"cfg/team.yml": "pre-commit:\n  commands:\n    t:\n      run: touch {marker}\n"},
    ),
    "dot-config-scripts": (
        ("lefthook.yml", "pre-commit:" + SCRIPT),
        {".config/lefthook/pre-commit/check.sh": "touch {marker}\n"},
    ),
    "npm-lefthook": (
        ("lefthook.yml", "pre-commit:" + NOOP),
        {NPM_LEFTHOOK: "#!/bin/sh\ntouch {marker}\n"},
    ),
}
ENCLOSING = "enclosing-repository"
FLOW_ID = "flow"  # a configuration not read for sure: the roots read-only
LEFTHOOK_ATTACKS = [*LEFTHOOK_CASES, ENCLOSING]
LEFTHOOK_ATTACK_IDS = (*LEFTHOOK_ATTACKS, FLOW_ID)

# The attacks of tests/attacks/test_direnv_and_homes.py: what a present .envrc loads, a
# home's PATH, hard links of a hook, agent instruction files.
DIRENV_HOME_ATTACK_IDS = (
    "dotenv-default",
    "dotenv",
    "dotenv-if-exists",
    "source-env",
    "envrc-local",
    "path-add",
    "local-bin",
    "home-bin",
    "hard-linked-hook",
    "hard-link-made",
    "instruction-files",
    "instruction-imports",
    "mise-env",
    "envrc-unreadable",
)

# The attacks of tests/attacks/test_catalogue_review.py: .envrc forms a reader misread, files
# of a dotfiles repository that tools run at start.
REVIEW_ATTACK_IDS = (
    "envrc-crlf",
    "envrc-virtualenv",
    "envrc-editor",
    "envrc-export-output",
    "envrc-relative-path",
    "envrc-moved-dir",
    "envrc-linked-dir",
    "direnvrc",
    "vim-plugin",
    "gdbinit",
    "home-file-hard-link",
)
