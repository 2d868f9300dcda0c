"""The catalogue's data: the names host tools load or run from a directory, by tool family.

Each row is ``(pattern, who loads or runs it and when, where the tool documents it, the
attack tests)``. A pattern is a path suffix matched at any depth as whole trailing
components (``.git/hooks`` matches ``a/.git/hooks``), case-insensitively. Braces give a
family in one row: ``{,.}lefthook.{yml,toml}`` is ``lefthook.yml``, ``lefthook.toml``,
``.lefthook.yml`` and ``.lefthook.toml``. A ``*`` may stand in the last component only
(``mise.*.toml``). A test named ``name`` is the generic one: every name planted, new, at
some depth, by a hostile server, and none left after the session.

What is left out, and why:

- ``pyproject.toml``, ``setup.cfg``, ``tox.ini``, ``package.json``: pylint's ``init-hook``,
  flake8's local plugins, mypy's plugins and ESLint's ``eslintConfig`` can be set in them,
  but they are the project's own manifests, edited in normal work; they stay writable.
- ``.env`` and ``.env.*``: data most projects keep and edit as ordinary work. They are
  protected where a present ``.envrc`` loads them (``dotenv``, ``dotenv_if_exists``,
  ``source_env``, ``watch_file``: ``sandbox_profiles.direnv`` reads it as direnv's stdlib
  does), since direnv reloads what an allowed ``.envrc`` names without asking again;
  direnv's own ``load_dotenv`` asks for ``direnv allow`` of the ``.env``'s content, as for
  an ``.envrc``.
- a home's ``bin`` by name: projects keep a ``bin/`` of their own; a ``bin`` beside a shell
  profile (a home's) is matched by structure instead.
- ``conftest.py`` and test files: pytest imports them when the user runs the tests, which
  runs the project's code anyway (so does an editor's test discovery).
- ``.gitattributes``: it only picks among the filter, diff and merge drivers the user's git
  configuration defines, which name the programs; those configurations are protected.
- ``node_modules``: what ``npm install`` writes there is the project's dependencies (save
  the lefthook packages the hook lefthook installs runs by itself, on ``git commit``).
- ``package.json`` scripts: run by ``npm run``, ``npm test`` and ``npm install`` (its
  ``prepare`` and ``postinstall``), which the user runs on purpose on the project's code.
- ``.pre-commit-config.yml``: pre-commit reads ``.pre-commit-config.yaml`` only.
"""

from __future__ import annotations

Row = tuple[str, str, str, str]

_ANY_CONFIG = "{yml,yaml,json,jsonc,toml}"
# Lefthook's configuration names (what they name is read by ``sandbox_profiles.lefthook``).
LEFTHOOK_CONFIGS = "{,.,.config/}lefthook{,-local}." + _ANY_CONFIG
_JS = "{js,mjs,cjs,ts,mts,cts}"

# What a login, a desktop session or a shell runs or puts on PATH, and programs a
# configuration names, when a writable root holds a home's copy (a home's own bin/ is matched
# by structure: ``sandbox_profiles.autorun.HOME_BIN_ENTRY``).
LOGIN_NAMES: tuple[Row, ...] = (
    (
        ".local/bin",
        "on PATH in every login shell (Debian's and Ubuntu's .profile, systemd's "
        "file-hierarchy): a planted git or ls there runs instead of the real one",
        "file-hierarchy(7); Debian skel .profile",
        "local-bin",
    ),
    (
        "{.bashrc.d,.profile.d}",
        "sourced by the default .bashrc of Fedora and RHEL (.bashrc.d) "
        "and by .profile conventions (.profile.d)",
        "Fedora /etc/skel/.bashrc",
        "name",
    ),
    (
        "{.config/systemd,.local/share/systemd}",
        "systemd --user: units (ExecStart) and generators run at login and by timers",
        "systemd.unit(5) (user unit search path)",
        "name",
    ),
    (
        ".config/autostart",
        "the desktop session runs each .desktop file's Exec at login",
        "XDG Autostart specification",
        "name",
    ),
    (
        ".local/share/applications",
        "desktop entries: Exec run as the handler of files and URLs",
        "XDG Desktop Entry specification",
        "name",
    ),
    (
        ".config/environment.d",
        "systemd --user's environment (PATH, LD_PRELOAD) at login",
        "environment.d(5)",
        "name",
    ),
    (
        ".config/plasma-workspace",
        "KDE Plasma sources env/*.sh at login",
        "KDE Plasma docs (startup scripts)",
        "name",
    ),
    (
        ".config/{sway,i3,hypr}",
        "sway, i3 and Hyprland run exec lines of their configuration",
        "sway(5), i3 user guide, Hyprland wiki",
        "name",
    ),
    (".pam_environment", "pam_env reads it at login (LD_PRELOAD, PATH)", "pam_env.conf(5)", "name"),
    (
        "{.xprofile,.xsessionrc,.xsession,.xinitrc}",
        "X display managers and startx source or run them at login",
        "Xsession(5) (Debian), startx(1), GDM and LightDM docs",
        "name",
    ),
    (
        "{.tmux.conf,.config/tmux,.screenrc}",
        "tmux and screen run run-shell and exec lines at start",
        "tmux(1), screen(1)",
        "name",
    ),
    (".lessfilter", "lesspipe runs it on every file less opens", "lesspipe(1) (Debian)", "name"),
    (
        ".kube/config",
        "kubectl runs a user's exec credential plugin on every command",
        "Kubernetes docs (client-go credential plugins)",
        "name",
    ),
    (
        ".docker/{config.json,cli-plugins}",
        "docker runs credential helpers and CLI plugins (cliPluginsExtraDirs, cli-plugins/)",
        "Docker docs (config.json, CLI plugins)",
        "name",
    ),
    (
        ".gnupg/{gpg-agent.conf,gpg.conf}",
        "gpg-agent runs its pinentry-program; gpg its helpers (git commit -S starts it)",
        "gpg-agent(1)",
        "name",
    ),
    (
        ".direnvrc",
        "direnv sources it before every .envrc it loads (when the configuration directory "
        "holds no direnvrc), on every cd into an allowed directory",
        "direnv-stdlib(1); direnv 2.32 stdlib (__main__)",
        "direnvrc",
    ),
    (
        "{.bash_completion,.bash_completion.d,.local/share/bash-completion,.inputrc,.mkshrc}",
        "bash-completion sources ~/.bash_completion at every interactive start and the "
        "user's completions on the first TAB; readline binds keys to text (a macro typed on "
        "Enter); mksh runs .mkshrc",
        "bash-completion README (BASH_COMPLETION_USER_FILE, user completions); readline(3); "
        "mksh(1)",
        "name",
    ),
    (
        "{.oh-my-zsh,.oh-my-bash,.bash_it,.zprezto,.config/fish,.cargo/env,.cargo/bin,.nvm,"
        ".sdkman,.pyenv,.rbenv,.asdf,.volta,.bun/bin,.deno/bin,.npm-global}",
        "the shell's start files source these frameworks and version managers (their "
        "scripts, functions and shims) and put their bin/ first on PATH",
        "oh-my-zsh, rustup (.cargo/env), nvm, SDKMAN!, pyenv, rbenv, asdf, Volta, Bun and "
        "Deno installers; fish(1) (conf.d, functions)",
        "name",
    ),
    (
        "{.vim,.config/emacs,.config/gdb,.lldbinit,.config/lldb,.ipython,.config/ipython,"
        ".pythonrc,.pythonrc.py,.psqlrc,.sqliterc,.my.cnf,.wgetrc,.curlrc}",
        "tools run these at every start: vim's plugin/ and ftplugin/, Emacs's init, gdb's and "
        "lldb's init commands (shell), IPython's startup/ scripts, PYTHONSTARTUP, psql's and "
        "sqlite3's \\! and .shell lines, mysql's pager, wget's and curl's output files",
        "vim :help startup; gdb manual (initialization files); IPython docs (startup); "
        "psql(1), sqlite3 docs (.sqliterc), mysql(1), wget(1), curl(1)",
        "vim-plugin, gdbinit",
    ),
    (
        "{.config/starship.toml,.config/kitty,.config/alacritty,.config/wezterm,.wezterm.lua,"
        ".config/ghostty,.config/foot,.config/gh,.config/containers,.config/user-dirs.dirs,"
        ".xbindkeysrc,.config/openbox/autostart,.config/labwc,.config/lxsession,"
        ".config/autostart-scripts,.kde/Autostart,.kde4/Autostart,.local/share/dbus-1,"
        ".local/share/kservices5,.local/share/kservices6,.config/hg,.hgrc,.subversion,"
        ".config/jj,.config/lazygit,.tigrc,.config/tig,.gradle/init.d,.gradle/init.gradle,"
        ".gradle/gradle.properties,.m2/settings.xml,.config/pip,.pip,.config/uv}",
        "the prompt (starship's custom modules on every prompt), terminals (the shell they "
        "start, Lua that runs), gh's and tig's aliases, containers' hooks, desktop sessions' "
        "autostart and D-Bus activation, Mercurial's hooks, Subversion's and jj's programs, "
        "Gradle's init scripts and JVM options, Maven's and pip's package sources",
        "starship, kitty, Alacritty, WezTerm, gh, containers.conf(5), Openbox, labwc, KDE, "
        "D-Bus specification (session services), hgrc(5), Gradle (init scripts), Maven, pip "
        "docs",
        "name",
    ),
)

# Files that steer an AI agent: read as instructions by the user's next agent session in the
# directory. Treated as the catalogue's when a sandbox writes them; a call the user approved
# may still write one (``sandbox_profiles.autorun.INSTRUCTION_ENTRIES``).
INSTRUCTION_NAMES: tuple[Row, ...] = (
    (
        "{CLAUDE.md,CLAUDE.local.md}",
        "Claude Code loads them as memory in every session below the directory",
        "Claude Code docs (memory)",
        "instruction-files",
    ),
    (
        "{AGENTS.md,AGENT.md}",
        "Codex CLI, opencode, Amp and others load them as instructions",
        "agents.md; Codex CLI docs (AGENTS.md); Amp docs (AGENT.md)",
        "instruction-files",
    ),
    (
        "GEMINI.md",
        "Gemini CLI loads it as context",
        "Gemini CLI docs (GEMINI.md)",
        "instruction-files",
    ),
    (
        "{.cursorrules,.windsurfrules,.clinerules,.roorules,.goosehints}",
        "Cursor, Windsurf, "
        "Cline, Roo Code and Goose load them as rules (.clinerules may be a folder)",
        "Cursor, Windsurf, Cline, Roo Code and Goose docs",
        "instruction-files",
    ),
    (
        ".github/{copilot-instructions.md,instructions,prompts,chatmodes}",
        "GitHub Copilot loads the repository's custom instructions, prompt files and modes",
        "GitHub Copilot docs (repository custom instructions)",
        "instruction-files",
    ),
    (".junie", "JetBrains Junie loads guidelines.md", "Junie docs (guidelines)", "name"),
    (
        "{AGENTS.override.md,QWEN.md,.rules,.augment-guidelines,.github/agents}",
        "Codex CLI loads AGENTS.override.md before AGENTS.md; Qwen Code QWEN.md; Zed .rules; "
        "Augment its guidelines; Copilot the repository's custom agents (the rules folders "
        "of .augment, .trae and .idx are protected with them, whole)",
        "Codex CLI docs (AGENTS.md discovery); Qwen Code docs; Zed docs (rules); Augment and "
        "GitHub Copilot (custom agents) docs",
        "instruction-files",
    ),
)

# direnv's own family beyond .envrc: names nothing but direnv and the .envrc conventions use.
# ``.env`` and ``.env.*`` are data most projects keep: protected only where a present .envrc
# loads them (``sandbox_profiles.direnv`` reads it).
ENVRC_NAMES: tuple[Row, ...] = (
    (
        "{.envrc.*,.envrc.d}",
        "direnv: the .envrc conventions source .envrc.local, .envrc.private and .envrc.d/*.sh "
        "(source_env_if_exists), which direnv does not ask to allow again when they change",
        "direnv-stdlib(1) (source_env, source_env_if_exists); direnv wiki (.envrc.local)",
        "envrc-local",
    ),
    (
        ".direnv",
        "direnv's layout directory: layout python, ruby, go and anaconda put its bin/ on PATH "
        "on cd, and a planted one is used as it is",
        "direnv-stdlib(1) (layout, direnv_layout_dir)",
        "name",
    ),
)

_EDITORS = "{Code,Code - Insiders,Cursor,Windsurf,VSCodium,Trae}"
_APP_DIRS = "{.config,Library/Application Support}"
# The user-level files of the MCP clients wrap knows (launcher/clients/catalogue/table.py), as
# places relative to a home, matched below any directory: a writable root may hold a home's copy.
# tests/unit/sandbox_profiles/test_catalogue_clients.py walks the client table to keep the two
# in step.
CLIENT_USER_NAMES: tuple[Row, ...] = (
    (
        ".claude.json",
        "Claude Code: the user's MCP servers it starts",
        "Claude Code docs (mcp)",
        "name",
    ),
    (
        _APP_DIRS + "/Claude",
        "Claude Desktop: claude_desktop_config.json's MCP servers it starts, its extensions",
        "docker/mcp-gateway client table; Claude Desktop docs",
        "name",
    ),
    (
        _APP_DIRS + "/" + _EDITORS + "/User",
        "VS Code and its forks: the user's mcp.json servers, settings naming programs, user "
        "tasks, and the extensions' globalStorage (Cline's and Roo Code's MCP servers)",
        "toolhive and docker/mcp-gateway client tables; VS Code docs (user settings)",
        "name",
    ),
    (
        "{.vscode-server,.vscode-server-insiders,.vscode-oss,.cursor-server,.windsurf-server}",
        "VS Code Server and its forks: data/User mcp.json and settings, extensions it runs",
        "toolhive client table; VS Code Remote docs",
        "name",
    ),
    (
        ".codeium",
        "Windsurf: mcp_config.json servers (also Windsurf for JetBrains)",
        "toolhive client table",
        "name",
    ),
    (
        ".config/{zed,goose,amp,opencode,crush,github-copilot}",
        "Zed, Goose, Amp, opencode, Crush, GitHub Copilot: the user's MCP servers, language "
        "servers and tasks they start; crushrc is a shell script Crush runs at start",
        "toolhive and docker/mcp-gateway client tables; Crush docs (crushrc)",
        "name",
    ),
    (
        "{.lmstudio,.cache/lm-studio/mcp.json,.copilot,.kimi,.qoder,.sema4ai,.cline}",
        "LM Studio, GitHub Copilot CLI, Kimi, Qoder, Sema4.ai, Cline (its shared settings): "
        "the MCP servers they start",
        "toolhive and docker/mcp-gateway client tables; Cline (MCP settings in ~/.cline)",
        "name",
    ),
    (
        ".aws/{config,cli,amazonq}",
        "AWS CLI and SDKs run credential_process from config, and ! aliases from cli/alias; "
        "Amazon Q starts the MCP servers in amazonq/",
        "AWS CLI docs (credential_process, aliases); Amazon Q docs (qdev-mcp)",
        "name",
    ),
)

NAMES: tuple[Row, ...] = (
    # git
    (".git/hooks", "git runs hooks on commit, checkout, merge, push", "srt, Codex CLI", "name"),
    (
        ".git/config",
        "git reads it on every command: core.fsmonitor, core.hooksPath, aliases, filters, "
        "pager and editor run programs",
        "srt, Codex CLI",
        "deep-git-config",
    ),
    (".gitconfig", "git's user configuration, when a writable root is a home", "srt", "name"),
    (
        ".config/git",
        "git's user configuration (config), when a root is a home",
        "git-config(1)",
        "name",
    ),
    (".gitmodules", "git submodule: URLs and update modes", "srt", "name"),
    (".hg/hgrc", "Mercurial runs [hooks] from it", "Mercurial hgrc(5)", "name"),
    (".hg/sharedpath", "Mercurial: sends hg to another repository's hgrc", "Mercurial", "name"),
    (".git/rebase-merge", "git rebase --continue runs its todo list's exec lines", "git", "name"),
    (".git/rebase-apply", "git am and rebase state", "git", "name"),
    (".git/sequencer", "git cherry-pick and revert --continue: their todo list", "git", "name"),
    (".jj/repo/config.toml", "Jujutsu: repository config (aliases, programs)", "jj docs", "name"),
    # git hook managers: their configurations and script folders, run by the hooks git runs
    (
        LEFTHOOK_CONFIGS,
        "lefthook, from the hook it installs, on git commit and the other hooks: every "
        "command and script these configurations name (the -local ones are merged in)",
        "lefthook docs (configuration: config file names); lefthook 2.2.2",
        "lefthook-config, lefthook-agent",
    ),
    (
        "{.lefthook,.lefthook-local}",
        "lefthook runs the scripts in <source_dir>/<hook>/ (source_dir, source_dir_local; "
        "a folder a configuration names instead is protected as named)",
        "lefthook docs (source_dir, source_dir_local)",
        "lefthook-script, yaml-source-dir",
    ),
    (
        ".config/{lefthook,lefthook-local}",
        "lefthook also runs the scripts in .config/lefthook/<hook>/ and "
        ".config/lefthook-local/<hook>/, whatever source_dir says",
        "lefthook 2.2.2 (internal/command/run.go: getSourceDirs)",
        "dot-config-scripts",
    ),
    (
        "node_modules/{lefthook,lefthook-*,@evilmartians/lefthook,@evilmartians/lefthook-installer}",
        "the git hook lefthook installs runs lefthook from these packages when it is not on "
        "PATH (lefthook installed with npm)",
        "lefthook 2.2.2 (internal/templates/hook.tmpl)",
        "name",
    ),
    (
        ".git/info/lefthook-remotes",
        "lefthook: the remote configurations it fetched, loaded as configuration",
        "lefthook docs (remotes)",
        "name",
    ),
    (".husky", "husky: the hooks directory git runs (core.hooksPath)", "husky docs", "name"),
    (
        ".config/husky",
        "husky sources init.sh before every hook, when a root is a home",
        "husky docs",
        "name",
    ),
    (".pre-commit-config.yaml", "pre-commit: hooks run on git commit", "pre-commit docs", "name"),
    (".overcommit.yml", "overcommit: hooks run on git commit", "overcommit README", "name"),
    (
        ".git-hooks",
        "overcommit: custom hooks it runs (plugin_directory)",
        "overcommit README",
        "name",
    ),
    ("captainhook.json", "CaptainHook: actions its git hooks run", "CaptainHook docs", "name"),
    (
        "{,.}simple-git-hooks.{js,cjs,mjs,json}",
        "simple-git-hooks: loaded when it runs (the project's prepare or postinstall), and "
        "its commands written into .git/hooks",
        "simple-git-hooks README; simple-git-hooks 2.14",
        "name",
    ),
    (
        "{.lintstagedrc{,.json,.yaml,.yml,.mjs,.mts,.js,.ts,.cjs,.cts},lint-staged.config."
        + _JS
        + "}",
        "lint-staged, from the pre-commit hook: JavaScript configurations run, every "
        "configuration's commands run",
        "lint-staged README (configuration); lint-staged 16.4",
        "name",
    ),
    (
        "{.commitlintrc{,.json,.yaml,.yml,.js,.cjs,.mjs,.ts,.cts,.mts},commitlint.config."
        + _JS
        + "}",
        "commitlint, from the commit-msg hook: JavaScript configurations run, plugins load",
        "commitlint docs (configuration); @commitlint/load 20.5",
        "name",
    ),
    # shells
    (".bashrc", "bash, at every interactive start", "srt, shell manuals", "name"),
    (".bash_profile", "bash login shells", "srt", "name"),
    (".bash_login", "bash login shells", "bash(1)", "name"),
    (".bash_logout", "bash, when a login shell exits", "bash(1)", "name"),
    (".bash_aliases", "sourced by the default .bashrc of Debian and Ubuntu", "Debian skel", "name"),
    (".profile", "sh, dash, bash and ksh login shells", "srt", "name"),
    (".zshrc", "zsh, at every interactive start", "srt", "name"),
    (".zshenv", "zsh, at every start", "zsh(1)", "name"),
    (".zprofile", "zsh login shells", "srt", "name"),
    (".zlogin", "zsh login shells", "zsh(1)", "name"),
    (".zlogout", "zsh, when a login shell exits", "zsh(1)", "name"),
    (".kshrc", "ksh interactive shells", "ksh(1)", "name"),
    (".cshrc", "csh and tcsh at every start", "tcsh(1)", "name"),
    (".tcshrc", "tcsh at every start", "tcsh(1)", "name"),
    (".login", "csh login shells", "tcsh(1)", "name"),
    (".logout", "csh, when a login shell exits", "tcsh(1)", "name"),
    (".config/fish", "fish runs config.fish and conf.d/ at every start", "fish docs", "name"),
    # directory hooks and environment managers
    (".envrc", "direnv, on cd (after direnv allow)", "direnv docs", "name"),
    (
        ".config/direnv",
        "direnv: direnvrc and lib/ sourced by every .envrc, when a root is a home",
        "direnv-stdlib(1)",
        "name",
    ),
    (
        "{,.}mise{,.local}.toml",
        "mise, on cd: [env] and [hooks] run commands, [tools] puts programs on PATH",
        "mise docs (configuration)",
        "name",
    ),
    (
        "{,.}mise.*.toml",
        "mise, on cd, for MISE_ENV",
        "mise docs (configuration environments)",
        "name",
    ),
    (".config/mise{,.local}.toml", "mise, on cd", "mise docs (configuration)", "name"),
    ("mise/config{,.local}.toml", "mise, on cd", "mise docs (configuration)", "name"),
    ("mise/config.*.toml", "mise, on cd, for MISE_ENV", "mise docs (configuration)", "name"),
    ("{.mise,.config/mise}", "mise, on cd: config.toml, conf.d/, tasks", "mise docs", "name"),
    (
        ".tool-versions",
        "asdf and mise: a 'path:' version puts that directory's programs on PATH",
        "asdf docs (.tool-versions), mise docs",
        "name",
    ),
    (
        "{shell.nix,default.nix,flake.nix,flake.lock}",
        "nix-shell and nix develop; direnv's use nix and use flake evaluate them on cd and "
        "run their shellHook, and reload when they change",
        "direnv-stdlib(1) (use nix, use flake), nix-direnv",
        "name",
    ),
    (
        "{devenv.nix,devenv.yaml,devenv.local.nix}",
        "devenv, on cd through direnv: enterShell runs",
        "devenv docs",
        "name",
    ),
    # editors and IDEs: folders and local configurations
    (".vscode", "VS Code: tasks that run on folder open, settings naming programs", "srt", "name"),
    (".idea", "JetBrains IDEs: run configurations, external tools", "srt", "name"),
    (".fleet", "JetBrains Fleet: run configurations", "Fleet docs", "name"),
    (
        ".devcontainer",
        "Dev Containers: initializeCommand runs on the host",
        "containers.dev",
        "name",
    ),
    (
        ".devcontainer.json",
        "Dev Containers: initializeCommand runs on the host",
        "containers.dev",
        "name",
    ),
    (".zed", "Zed: project tasks and language servers", "Zed docs", "name"),
    (".helix", "Helix: languages.toml names language-server commands", "Helix docs", "name"),
    (
        ".exrc",
        "vim and neovim with 'exrc' set, on start in the directory",
        "vim :help exrc",
        "name",
    ),
    (".vimrc", "vim with 'exrc' set", "vim :help exrc", "name"),
    (".nvimrc", "neovim with 'exrc' set", "neovim :help exrc", "name"),
    (".nvim.lua", "neovim with 'exrc' set", "neovim :help exrc", "name"),
    (
        ".config/nvim",
        "neovim: init.lua at every start, when a root is a home",
        "neovim :help init",
        "name",
    ),
    (".lazy.lua", "lazy.nvim loads it from the directory", "lazy.nvim docs", "name"),
    (".dir-locals.el", "Emacs: directory-local variables, eval forms", "Emacs manual", "name"),
    (".dir-locals-2.el", "Emacs: directory-local variables", "Emacs manual", "name"),
    (
        "{.emacs,.emacs.d}",
        "Emacs: init file at every start, when a root is a home",
        "Emacs manual",
        "name",
    ),
    # what editors run on open or save: linters' and formatters' configurations that are code
    (
        "eslint.config." + _JS,
        "ESLint (the editor's ESLint server on open and save) runs the flat configuration",
        "ESLint docs (configuration files)",
        "name",
    ),
    (
        ".eslintrc{,.js,.cjs,.yaml,.yml,.json}",
        "ESLint's older configurations: JavaScript ones run; parser and plugins named by a "
        "relative path load that file",
        "ESLint docs (configuration files, deprecated)",
        "name",
    ),
    (
        "{.prettierrc{,.json,.yml,.yaml,.json5,.js,.mjs,.cjs,.ts,.mts,.cts,.toml},prettier.config."
        + _JS
        + "}",
        "Prettier (format on save): JavaScript configurations run; plugins named by a path load",
        "Prettier docs (configuration file, plugins); prettier 3.10",
        "name",
    ),
    (
        "{.stylelintrc{,.json,.yaml,.yml,.js,.ts,.cjs,.mjs},.config/stylelintrc{,.json,.yaml,.yml,.js,.ts,.cjs,.mjs},stylelint.config.{js,ts,cjs,mjs}}",
        "stylelint (the editor's extension on open and save): JavaScript configurations run; "
        "plugins named by a path load",
        "stylelint docs (configuration); cosmiconfig 9 search places",
        "name",
    ),
    (
        "{,.}pylintrc{,.toml}",
        "pylint (the editor's extension on open and save) runs init-hook and loads plugins",
        "pylint docs (init-hook, load-plugins); pylint 4.1",
        "name",
    ),
    (
        ".flake8",
        "flake8: [flake8:local-plugins] paths are imported",
        "flake8 docs (local plugins)",
        "name",
    ),
    (
        "{,.}mypy.ini",
        "mypy (the editor's extension): plugins may be a path to a file it imports",
        "mypy docs (plugins)",
        "name",
    ),
    # AI clients
    (".mcp.json", "Claude Code: project MCP servers it starts", "srt", "name"),
    (".claude", "Claude Code: hooks and status line in settings, commands, agents", "srt", "name"),
    (".cursor", "Cursor: mcp.json servers, rules", "Cursor docs", "name"),
    (".gemini", "Gemini CLI: settings.json MCP servers and tools", "Gemini CLI docs", "name"),
    (".codex", "Codex CLI: config.toml", "Codex CLI (read-only in its sandbox)", "name"),
    (".windsurf", "Windsurf: rules and workflows", "Windsurf docs", "name"),
    (".continue", "Continue: config with MCP servers", "Continue docs", "name"),
    (".roo", "Roo Code: mcp.json servers", "Roo Code docs", "name"),
    (".amazonq", "Amazon Q: mcp.json servers", "Amazon Q docs", "name"),
    (".kiro", "Kiro: hooks and MCP settings", "Kiro docs", "name"),
    (
        "{.qwen,.augment,.trae,.idx,.github/hooks,.github/mcp.json}",
        "Qwen Code's settings (MCP servers, tools), Augment's and Trae's settings (Trae's "
        "mcp.json servers), Firebase Studio's dev.nix (run when the workspace opens), the "
        "hooks Copilot's agents run, the MCP servers Copilot CLI starts",
        "Qwen Code, Augment, Trae, Firebase Studio (dev.nix), GitHub Copilot (hooks) and "
        "Copilot CLI (command reference: MCP server loading) docs",
        "name",
    ),
    (
        "{opencode.json,opencode.jsonc,.opencode}",
        "opencode: MCP servers it starts, commands",
        "opencode docs (config)",
        "name",
    ),
    (".amp", "Amp: settings.json MCP servers (amp.mcpServers)", "toolhive client table", "name"),
    (".factory", "Factory droid: mcp.json servers", "toolhive client table", "name"),
    (".vibe", "Mistral Vibe: config.toml MCP servers", "Mistral Vibe docs", "name"),
    ("{.crush.json,crush.json}", "Crush: MCP servers it starts", "docker/mcp-gateway", "name"),
    (".aider.conf.yml", "aider: lint-cmd and test-cmd it runs", "aider docs", "name"),
    # Python
    ("sitecustomize.py", "Python imports it at every start when on sys.path", "site docs", "name"),
    ("usercustomize.py", "Python imports it at every start when on sys.path", "site docs", "name"),
    ("pyvenv.cfg", "makes a directory a virtualenv (its home names the Python)", "venv", "name"),
    (".pdbrc", "pdb runs its commands when debugging in the directory", "pdb docs", "name"),
    ("bin/activate", "sourced to activate a virtualenv", "venv docs", "name"),
    ("bin/activate.fish", "sourced to activate a virtualenv (fish)", "venv docs", "name"),
    ("bin/activate.csh", "sourced to activate a virtualenv (csh)", "venv docs", "name"),
    (
        "ipython_config.py",
        "IPython loads it from the directory it starts in",
        "IPython docs (config files)",
        "name",
    ),
    # Node
    (".npmrc", "npm: node-options, script-shell and git name programs", "npm docs", "name"),
    (".yarnrc", "yarn 1: yarn-path runs the given script", "yarn docs", "name"),
    (".yarnrc.yml", "yarn 2+: yarnPath and plugins run code", "yarn docs", "name"),
    (
        ".yarn/{releases,plugins}",
        "yarn 2+ runs the release yarnPath names and its plugins on every command",
        "yarn docs (yarnPath, plugins)",
        "name",
    ),
    (".pnpmfile.cjs", "pnpm: hooks run on install", "pnpm docs", "name"),
    ("bunfig.toml", "bun: preload scripts", "bun docs", "name"),
    # other tools
    (".ripgreprc", "ripgrep (RIPGREP_CONFIG_PATH): --pre runs a program", "srt", "name"),
    (".gdbinit", "gdb auto-loads it (where auto-load safe-path allows)", "gdb manual", "name"),
    (
        ".cargo/config{,.toml}",
        "cargo: rustc-wrapper, runners and aliases run programs",
        "cargo docs",
        "name",
    ),
    ("rust-toolchain{,.toml}", "rustup: a toolchain path it runs", "rustup docs", "name"),
    (".rprofile", "R sources it at start in the directory", "R docs", "name"),
    (".irbrc", "irb loads it from the directory", "irb docs", "name"),
    (".pryrc", "pry loads it from the directory", "pry docs", "name"),
    (".ghci", "GHCi runs it from the directory", "GHC docs", "name"),
    (".octaverc", "Octave runs it at start in the directory", "Octave docs", "name"),
    (".ssh", "ssh: config ProxyCommand, authorized_keys, when a root is a home", "ssh(1)", "name"),
    *ENVRC_NAMES,
    *CLIENT_USER_NAMES,
    *LOGIN_NAMES,
    *INSTRUCTION_NAMES,
)

# Name patterns for the last component alone, matched by their ending.
SUFFIXES: tuple[Row, ...] = (
    ("*.pth", "Python runs its import lines at start (in a site directory)", "site docs", "name"),
    ("*.code-workspace", "VS Code workspace: settings and tasks", "VS Code docs", "name"),
    ("*.sublime-project", "Sublime Text: build systems", "Sublime docs", "name"),
)


def expand(pattern: str) -> list[str]:
    """Every name a brace pattern stands for, in order.

    >>> expand("{,.}a{,-b}.{x,y}")
    ['a.x', 'a.y', 'a-b.x', 'a-b.y', '.a.x', '.a.y', '.a-b.x', '.a-b.y']
    >>> expand("{a{1,2},b}")
    ['a1', 'a2', 'b']
    """
    start = pattern.find("{")
    if start < 0:
        return [pattern]
    depth, end = 0, start
    for end in range(start, len(pattern)):
        depth += {"{": 1, "}": -1}.get(pattern[end], 0)
        if depth == 0:
            break
    if depth:
        raise ValueError(f"unbalanced braces in catalogue pattern {pattern!r}")
    alternatives, depth, begin = [], 0, start + 1
    for i in range(start + 1, end):
        depth += {"{": 1, "}": -1}.get(pattern[i], 0)
        if pattern[i] == "," and depth == 0:
            alternatives.append(pattern[begin:i])
            begin = i + 1
    alternatives.append(pattern[begin:end])
    head, tail = pattern[:start], pattern[end + 1 :]
    return [name for alt in alternatives for name in expand(head + alt + tail)]
