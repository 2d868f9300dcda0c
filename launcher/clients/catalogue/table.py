"""The MCP clients ironcurtain knows: where each keeps its servers (user files relative to the
home, project files relative to the project root, as on Linux), in which format, under
which key and in which entry shape. Each row names where its locations were documented;
``docs/clients.md`` lists them with their macOS and Windows forms.

A path whose last part holds ``*`` is every file of that directory matching it (Continue's
one-file-per-server blocks). A file's format follows its name (``.toml``, ``.yaml``/``.yml``),
else it is the client's JSON (``json``, or ``jsonc`` where the client reads comments).
"""

from __future__ import annotations

import sys

from launcher.clients.catalogue.entry_shape import COPILOT, GOOSE, NAMED, OPENCODE, STANDARD, Shape
from sandbox_profiles.records import frozen


@frozen
class Client:
    name: str  # as --client takes it
    label: str
    user: tuple[str, ...]  # user-level files, relative to the home directory
    project: tuple[str, ...]  # project-level files, relative to the project root
    key: str  # the top-level key that holds the servers
    syntax: str  # json or jsonc: how its JSON files are read (TOML and YAML by their name)
    # Where the client starts a server: "project" (the project root) or "none" (a directory
    # of the client's own: nothing to count on).
    cwd: str
    shape: Shape = STANDARD
    # In its TOML or YAML files, the servers are a list of entries each with its "name"
    # (else an object of entries by name).
    listed: bool = False
    # The variables it fills in an entry's values (launcher.clients.catalogue.var_syntax): none,
    # claude, copilot, kiro, gemini, vscode, windsurf, opencode or shell.
    variables: str = "none"
    # Where it fills them: "all" (every value) or "env" (only its env values; the
    # command, args and cwd are taken as written).
    filled_in: str = "all"
    source: str = ""  # where its locations and format are documented
    elsewhere: str = ""  # its user files on macOS and Windows, where they differ
    # Files it may keep servers in that wrap cannot edit safely, and why.
    unsupported: tuple[tuple[str, str], ...] = ()


def _app_support(name: str) -> str:
    if sys.platform == "darwin":
        return f"Library/Application Support/{name}"
    return f".config/{name}"


_TOOLHIVE = "github.com/stacklok/toolhive pkg/client/config.go"
_DOCKER = "github.com/docker/mcp-gateway pkg/client/config.yml"
_MAC_WIN = "macOS ~/Library/Application Support/{0}; Windows %APPDATA%\\{0}"
_CODE = f"{_app_support('Code')}/User/globalStorage"  # VS Code extensions' own storage


def _in_editors(extension_file: str) -> tuple[str, ...]:
    """An editor extension's file, in each editor of the VS Code family that runs it (each
    keeps its extensions' settings apart)."""
    editors = ("Code", "Code - Insiders", "Cursor", "Windsurf", "VSCodium")
    return tuple(f"{_app_support(e)}/User/globalStorage/{extension_file}" for e in editors)


CLIENTS: tuple[Client, ...] = (
    Client("claude-desktop", "Claude Desktop",
           (f"{_app_support('Claude')}/claude_desktop_config.json",), (), "mcpServers",
           "json", "none", source=_DOCKER, elsewhere=_MAC_WIN.format("Claude")),
    Client("claude-code", "Claude Code", (".claude.json",), (".mcp.json",), "mcpServers",
           "json", "project", variables="claude",
           source="docs.anthropic.com/en/docs/claude-code/mcp; " + _TOOLHIVE),
    Client("cursor", "Cursor", (".cursor/mcp.json",), (".cursor/mcp.json",), "mcpServers",
           "json", "project", variables="vscode", source=_DOCKER),
    Client("vscode", "VS Code", (f"{_app_support('Code')}/User/mcp.json",),
           (".vscode/mcp.json",), "servers", "jsonc", "project", variables="vscode",
           source=_DOCKER, elsewhere=_MAC_WIN.format("Code\\User")),
    Client("vscode-insiders", "VS Code Insiders",
           (f"{_app_support('Code - Insiders')}/User/mcp.json",), (), "servers", "jsonc",
           "none", variables="vscode", source=_TOOLHIVE,
           elsewhere=_MAC_WIN.format("Code - Insiders\\User")),
    Client("vscode-server", "VS Code Server (remote)", (".vscode-server/data/User/mcp.json",),
           (), "servers", "jsonc", "none", variables="vscode", source=_TOOLHIVE),
    Client("windsurf", "Windsurf", (".codeium/windsurf/mcp_config.json",), (), "mcpServers",
           "json", "none", variables="windsurf", source=_TOOLHIVE),
    Client("windsurf-jetbrains", "Windsurf for JetBrains", (".codeium/mcp_config.json",), (),
           "mcpServers", "json", "none", source=_TOOLHIVE),
    Client("gemini", "Gemini CLI", (".gemini/settings.json",), (".gemini/settings.json",),
           "mcpServers", "jsonc", "project", variables="gemini", source=_DOCKER),
    Client("qwen-code", "Qwen Code", (".qwen/settings.json",),
           (".qwen/settings.json", ".qwen/settings.local.json"), "mcpServers", "jsonc",
           "project", variables="gemini",
           source="qwenlm.github.io/qwen-code-docs/en/users/features/mcp (a Gemini CLI fork: "
           "its settings.json as Gemini CLI's)"),
    Client("antigravity", "Antigravity", (".gemini/antigravity/mcp_config.json",), (),
           "mcpServers", "json", "none", source=_TOOLHIVE),
    Client("codex", "Codex CLI", (".codex/config.toml",), (), "mcp_servers", "json", "none",
           source=_TOOLHIVE),
    Client("zed", "Zed", (".config/zed/settings.json",), (".zed/settings.json",),
           "context_servers", "jsonc", "project", source=_DOCKER,
           elsewhere="Windows %APPDATA%\\Zed\\settings.json"),
    # Cline 3.x (VS Code, CLI, JetBrains) reads one shared file; the per-editor files are
    # what older versions read (moved into the shared file once).
    Client("cline", "Cline",
           (".cline/data/settings/cline_mcp_settings.json",
            *_in_editors("saoudrizwan.claude-dev/settings/cline_mcp_settings.json")), (),
           "mcpServers", "json", "none",
           source="github.com/cline/cline pull 9630 (MCP settings moved to "
           "~/.cline/data/settings), issue 7081 (CLI and JetBrains read that file); " + _DOCKER,
           elsewhere="the same under the home (%USERPROFILE%\\.cline); older versions: "
           + _MAC_WIN.format("Code\\User\\globalStorage\\saoudrizwan.claude-dev")),
    Client("roo-code", "Roo Code",
           _in_editors("rooveterinaryinc.roo-cline/settings/mcp_settings.json"),
           (".roo/mcp.json",), "mcpServers", "json", "none",
           source="docs.roocode.com/features/mcp/using-mcp-in-roo; " + _TOOLHIVE,
           elsewhere=_MAC_WIN.format("Code\\User\\globalStorage\\rooveterinaryinc.roo-cline")),
    Client("continue", "Continue",
           (".continue/config.yaml", ".continue/mcpServers/*.yaml",
            ".continue/mcpServers/*.yml", ".continue/mcpServers/*.json"),
           (".continue/mcpServers/*.yaml", ".continue/mcpServers/*.yml",
            ".continue/mcpServers/*.json"), "mcpServers", "json", "none", NAMED, listed=True,
           source="docs.continue.dev/customize/deep-dives/mcp; " + _DOCKER),
    Client("goose", "Goose", (".config/goose/config.yaml",), (), "extensions", "json",
           "none", GOOSE, source="block.github.io/goose/docs/guides/config-files; " + _DOCKER,
           elsewhere="Windows %APPDATA%\\Block\\goose\\config\\config.yaml"),
    Client("amp", "Amp", (".config/amp/settings.json",), (".amp/settings.json",),
           "amp.mcpServers", "jsonc", "project", source=_TOOLHIVE,
           elsewhere="Windows %APPDATA%\\amp\\settings.json"),
    Client("opencode", "opencode",
           (".config/opencode/opencode.json", ".config/opencode/opencode.jsonc",
            ".opencode/opencode.json", ".opencode/opencode.jsonc"),
           ("opencode.json", "opencode.jsonc", ".opencode/opencode.json",
            ".opencode/opencode.jsonc"), "mcp", "jsonc", "project", OPENCODE,
           variables="opencode", source="opencode.ai/docs/mcp-servers; " + _DOCKER),
    Client("kiro", "Kiro", (".kiro/settings/mcp.json",), (".kiro/settings/mcp.json",),
           "mcpServers", "json", "none", variables="kiro", filled_in="env",
           source="kiro.dev/docs/mcp/configuration (its env takes ${VAR}); " + _DOCKER),
    Client("lm-studio", "LM Studio", (".lmstudio/mcp.json", ".cache/lm-studio/mcp.json"), (),
           "mcpServers", "json", "none", source=_DOCKER),
    Client("copilot-cli", "GitHub Copilot CLI", (".copilot/mcp-config.json",),
           (".github/mcp.json", ".mcp.json"), "mcpServers", "json", "project", COPILOT,
           variables="copilot", filled_in="env",
           source="docs.github.com/en/copilot/reference/copilot-cli-reference/"
           "cli-command-reference (MCP server loading: .mcp.json, .github/mcp.json; env "
           "takes $VAR, ${VAR}, ${VAR:-default}); " + _TOOLHIVE),
    Client("factory", "Factory (droid)", (".factory/mcp.json",), (".factory/mcp.json",),
           "mcpServers", "json", "project", source=_TOOLHIVE),
    Client("kimi", "Kimi CLI", (".kimi/mcp.json",), (), "mcpServers", "json", "project",
           source=_TOOLHIVE),
    Client("mistral-vibe", "Mistral Vibe", (".vibe/config.toml",), (".vibe/config.toml",),
           "mcp_servers", "json", "project", NAMED, listed=True,
           source="docs.mistral.ai/mistral-vibe/introduction/configuration; " + _TOOLHIVE),
    Client("qoder", "Qoder", (".qoder/mcp.json",), (), "mcpServers", "json", "none",
           source=_TOOLHIVE,
           elsewhere="Windows %APPDATA%\\Qoder\\SharedClientCache\\mcp.json"),
    Client("trae", "Trae", (f"{_app_support('Trae')}/User/mcp.json",), (".trae/mcp.json",),
           "mcpServers", "json", "none",
           source=_TOOLHIVE + "; docs.trae.ai MCP (a project's .trae/mcp.json, read when "
           "Project MCP is on)", elsewhere=_MAC_WIN.format("Trae\\User")),
    Client("xcode", "Xcode (GitHub Copilot for Xcode)",
           (".config/github-copilot/xcode/mcp.json",), (), "servers", "json", "none",
           source="github.com/github/CopilotForXcode (its MCP configuration)"),
    Client("amazon-q", "Amazon Q Developer",
           (".aws/amazonq/mcp.json", ".aws/amazonq/agents/default.json",
            ".aws/amazonq/cli-agents/*.json"),
           (".amazonq/mcp.json", ".amazonq/cli-agents/*.json"), "mcpServers", "json",
           "project", source="docs.aws.amazon.com/amazonq/latest/qdeveloper-ug/qdev-mcp.html"),
    Client("crush", "Crush", (".config/crush/crush.json",), (".crush.json", "crush.json"),
           "mcp", "json", "project", variables="shell",
           source="github.com/charmbracelet/crush docs/config; " + _DOCKER,
           unsupported=((".config/crush/crushrc",
                         "a shell script Crush runs at start (its `mcp add` lines are "
                         "commands, not data wrap can edit safely); wrap the servers by "
                         "hand: point each at `ironcurtain run --server NAME`"),)),
    Client("sema4", "Sema4.ai Studio", (".sema4ai/sema4ai-studio/mcp_servers.json",), (),
           "mcpServers", "json", "none", source=_DOCKER,
           elsewhere="Windows %LOCALAPPDATA%\\sema4ai\\sema4ai-studio\\mcp_servers.json"),
)  # fmt: skip
BY_NAME = {c.name: c for c in CLIENTS}

# A client's own variable for the project directory, which it expands in an entry's args:
# the moved definition says ${workspace} instead, and the client's entry of a project's
# file passes the directory to ironcurtain as --workspace.
PROJECT_VARIABLES = {c.name: "${workspaceFolder}" for c in CLIENTS if c.variables == "vscode"}


def syntax_of(client: Client, relative: str) -> str:
    """The format of one of the client's files: by its name, else the client's JSON."""
    if relative.endswith(".toml"):
        return "toml"
    if relative.endswith((".yaml", ".yml")):
        return "yaml"
    return client.syntax


def listed_in(client: Client, syntax: str) -> bool:
    """Whether the servers are a list of named entries in a file of this format."""
    return client.listed and syntax in ("toml", "yaml")
