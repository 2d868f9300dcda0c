"""A realistic config file for each client ironcurtain knows, at its real place under a
temporary home or project: the servers each holds (stdio ones to wrap, remote ones to list),
the secret each keeps, and the lines (comments, other settings) wrap must leave alone."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from tests.support.paths import TESTS

DATA = TESTS / "data" / "clients"


@dataclass(frozen=True)
class ClientFile:
    client: str
    scope: str  # user or project
    relative: str  # where the client reads it, from the home or the project root
    fixture: str  # under tests/data/clients
    wrapped: tuple[str, ...]  # its stdio servers
    remote: tuple[str, ...] = ()  # its remote servers
    secret: str = ""  # a secret value in a wrapped entry's env

    @property
    def id(self) -> str:
        return f"{self.client}-{self.scope}-{Path(self.relative).name}"

    def place(self, home: Path, project: Path) -> Path:
        path = (home if self.scope == "user" else project) / self.relative
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(DATA / self.fixture, path)
        return path


CODE = ".config/Code/User/globalStorage"
FILES = (
    ClientFile("vscode-insiders", "user", ".config/Code - Insiders/User/mcp.json",
               "more/vscode-insiders.mcp.json", ("insiders-clock",), ("insiders-github",),
               "ghp-insiders-not-a-real-token"),
    ClientFile("vscode-server", "user", ".vscode-server/data/User/mcp.json",
               "more/vscode-server.mcp.json", ("remote-fetch",), ("remote-docs",),
               "fetch-key-not-a-real-one"),
    ClientFile("windsurf-jetbrains", "user", ".codeium/mcp_config.json",
               "more/windsurf-jetbrains.mcp_config.json", ("jb-clock",), ("jb-remote",),
               "jb-not-a-real-token"),
    ClientFile("antigravity", "user", ".gemini/antigravity/mcp_config.json",
               "more/antigravity.mcp_config.json", ("ag-clock",), ("ag-maps",),
               "ag-not-a-real-secret"),
    ClientFile("qwen-code", "user", ".qwen/settings.json", "more/qwen-code.settings.json",
               ("qwen-clock",), ("qwen-docs",), "qwen-not-a-real-key"),
    ClientFile("cline", "user", ".cline/data/settings/cline_mcp_settings.json",
               "more/cline.shared.cline_mcp_settings.json", ("cline-shared-clock",),
               ("cline-shared-remote",), "cline-shared-not-a-real-token"),
    ClientFile("cline", "user",
               f"{CODE}/saoudrizwan.claude-dev/settings/cline_mcp_settings.json",
               "more/cline.cline_mcp_settings.json", ("cline-fetch",), ("cline-remote",),
               "brave-not-a-real-key"),
    ClientFile("roo-code", "user",
               f"{CODE}/rooveterinaryinc.roo-cline/settings/mcp_settings.json",
               "more/roo.mcp_settings.json", ("roo-clock",), ("roo-remote",),
               "roo-not-a-real-token"),
    ClientFile("roo-code", "project", ".roo/mcp.json", "more/roo.project.mcp.json",
               ("roo-project-clock",), (), "roo-project-not-a-real-token"),
    ClientFile("continue", "user", ".continue/config.yaml", "more/continue.config.yaml",
               ("continue-clock",), ("continue-docs",), "continue-not-a-real-token"),
    ClientFile("continue", "user", ".continue/mcpServers/clock.json",
               "more/continue.block.json", ("continue-json-clock",), (),
               "json-block-not-a-real-token"),
    ClientFile("continue", "project", ".continue/mcpServers/fetch.yaml",
               "more/continue.block.yaml", ("continue-project-fetch",), (),
               "continue-project-not-a-real-token"),
    ClientFile("goose", "user", ".config/goose/config.yaml", "more/goose.config.yaml",
               ("goose-github",), ("goose-remote",), "ghp-goose-not-a-real-token"),
    ClientFile("amp", "user", ".config/amp/settings.json", "more/amp.settings.json",
               ("amp-clock",), ("amp-remote",), "amp-not-a-real-key"),
    ClientFile("amp", "project", ".amp/settings.json", "more/amp.project.settings.json",
               ("amp-project-fetch",), (), "amp-project-not-a-real-token"),
    ClientFile("opencode", "user", ".config/opencode/opencode.json", "more/opencode.json",
               ("opencode-clock",), ("opencode-jira",), "opencode-not-a-real-token"),
    ClientFile("opencode", "project", "opencode.jsonc", "more/opencode.project.jsonc",
               ("opencode-project-fetch",), (), "opencode-project-not-a-real-token"),
    ClientFile("kiro", "user", ".kiro/settings/mcp.json", "more/kiro.mcp.json",
               ("kiro-clock",), ("kiro-remote",), "kiro-not-a-real-token"),
    ClientFile("kiro", "project", ".kiro/settings/mcp.json", "more/kiro.project.mcp.json",
               ("kiro-project-fetch",), (), "kiro-project-not-a-real-token"),
    ClientFile("lm-studio", "user", ".lmstudio/mcp.json", "more/lm-studio.mcp.json",
               ("lms-clock",), ("lms-hf",), "lms-not-a-real-token"),
    ClientFile("copilot-cli", "user", ".copilot/mcp-config.json",
               "more/copilot-cli.mcp-config.json", ("copilot-clock",), ("copilot-github",),
               "copilot-not-a-real-token"),
    ClientFile("copilot-cli", "project", ".github/mcp.json",
               "more/copilot-cli.github.mcp.json", ("copilot-project-fetch",),
               ("copilot-project-docs",), "copilot-project-not-a-real-token"),
    ClientFile("factory", "user", ".factory/mcp.json", "more/factory.mcp.json",
               ("droid-clock",), ("droid-linear",), "droid-not-a-real-key"),
    ClientFile("factory", "project", ".factory/mcp.json", "more/factory.project.mcp.json",
               ("droid-project-fetch",), (), "droid-project-not-a-real-token"),
    ClientFile("kimi", "user", ".kimi/mcp.json", "more/kimi.mcp.json", ("kimi-clock",),
               ("kimi-context7",), "kimi-not-a-real-key"),
    ClientFile("mistral-vibe", "user", ".vibe/config.toml", "more/mistral-vibe.config.toml",
               ("vibe-clock",), ("vibe-remote",), "vibe-not-a-real-token"),
    ClientFile("mistral-vibe", "project", ".vibe/config.toml",
               "more/mistral-vibe.project.config.toml", ("vibe-project-fetch",), (),
               "vibe-project-not-a-real-token"),
    ClientFile("qoder", "user", ".qoder/mcp.json", "more/qoder.mcp.json", ("qoder-clock",),
               ("qoder-remote",), "qoder-not-a-real-token"),
    ClientFile("trae", "user", ".config/Trae/User/mcp.json", "more/trae.mcp.json",
               ("trae-fetch",), ("trae-remote",), "trae-not-a-real-key"),
    ClientFile("trae", "project", ".trae/mcp.json", "more/trae.project.mcp.json",
               ("trae-project-clock",), ("trae-project-remote",),
               "trae-project-not-a-real-token"),
    ClientFile("xcode", "user", ".config/github-copilot/xcode/mcp.json", "more/xcode.mcp.json",
               ("xcode-clock",), ("xcode-context7",), "xcode-not-a-real-token"),
    ClientFile("amazon-q", "user", ".aws/amazonq/mcp.json", "more/amazon-q.mcp.json",
               ("q-clock",), (), "q-not-a-real-token"),
    ClientFile("amazon-q", "user", ".aws/amazonq/cli-agents/dev.json",
               "more/amazon-q.agent.json", ("q-agent-fetch",), ("q-agent-remote",),
               "q-agent-not-a-real-token"),
    ClientFile("amazon-q", "project", ".amazonq/mcp.json", "more/amazon-q.project.mcp.json",
               ("q-project-clock",), (), "q-project-not-a-real-token"),
    ClientFile("crush", "user", ".config/crush/crush.json", "more/crush.json",
               ("crush-clock",), ("crush-github",), "crush-not-a-real-token"),
    ClientFile("crush", "project", ".crush.json", "more/crush.project.json",
               ("crush-project-fetch",), (), "crush-project-not-a-real-token"),
    ClientFile("sema4", "user", ".sema4ai/sema4ai-studio/mcp_servers.json",
               "more/sema4.mcp_servers.json", ("sema4-clock",), ("sema4-remote",),
               "sema4-not-a-real-key"),
    # The eight clients known before, at their places.
    ClientFile("claude-desktop", "user", ".config/Claude/claude_desktop_config.json",
               "claude_desktop_config.json", ("time",)),
    ClientFile("claude-code", "project", ".mcp.json", "claude-code.mcp.json",
               ("filesystem", "git"), ("docs",), "ghp_not-a-real-token"),
    ClientFile("cursor", "project", ".cursor/mcp.json", "cursor.mcp.json", ("notes",)),
    ClientFile("vscode", "project", ".vscode/mcp.json", "vscode.mcp.json", ("files",),
               ("remote",)),
    ClientFile("windsurf", "user", ".codeium/windsurf/mcp_config.json",
               "windsurf.mcp_config.json", ("paris-clock",)),
    ClientFile("gemini", "user", ".gemini/settings.json", "gemini.settings.json",
               ("gclock",)),
    ClientFile("codex", "user", ".codex/config.toml", "codex.config.toml", ("clock",), (),
               "not-a-real-token"),
    ClientFile("zed", "project", ".zed/settings.json", "zed.settings.json",
               ("time", "legacy")),
)  # fmt: skip
NEW = tuple(f for f in FILES if (DATA / f.fixture).parent.name == "more")
