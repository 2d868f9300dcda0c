"""The servers of the compatibility matrix (scripts/server_matrix.py), as installed by
scripts/install_matrix.sh: how each is started, what its workspace holds before a session,
and the ordinary calls made of it. In a command, argument or value, ``{ws}`` is the session's
workspace, ``{npm}`` the npm packages' node_modules, ``{py}`` and ``{py1}`` the PyPI
servers' bin directories (the ``mcp`` SDK's 2.x and 1.x lines) and ``{node}`` Node.js."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Call = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class Server:
    """One row of the matrix."""

    name: str
    package: str  # as pinned in scripts/install_matrix.sh
    command: list[str]
    calls: list[Call]
    env: dict[str, str] = field(default_factory=dict)
    fixture: str = ""  # "repo": a git repository at {ws}/repo with one commit; "db": matrix.db
    data_in_workspace: bool = False  # keeps its own data file there: allowWrite it


def _npm(package: str, entry: str) -> list[str]:
    return ["{node}", "{npm}/" + package + "/" + entry]


GIT_ENV = {
    "GIT_AUTHOR_NAME": "Matrix",
    "GIT_AUTHOR_EMAIL": "matrix@example.invalid",
    "GIT_COMMITTER_NAME": "Matrix",
    "GIT_COMMITTER_EMAIL": "matrix@example.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
    # As the bundled config's git server: a repository owned by another uid (ironcurtain run
    # by root starts servers as nobody) is still opened.
    "GIT_CONFIG_COUNT": "1",
    "GIT_CONFIG_KEY_0": "safe.directory",
    "GIT_CONFIG_VALUE_0": "*",
}

SERVERS = [
    Server(
        "filesystem",
        "@modelcontextprotocol/server-filesystem@2026.8.31",
        [*_npm("@modelcontextprotocol/server-filesystem", "dist/index.js"), "{ws}"],
        [
            ("list_allowed_directories", {}),
            ("write_file", {"path": "{ws}/notes.txt", "content": "one\ntwo\n"}),
            ("read_text_file", {"path": "{ws}/notes.txt"}),
            (
                "edit_file",
                {
                    "path": "{ws}/notes.txt",
                    "dryRun": True,
                    "edits": [{"oldText": "two", "newText": "three"}],
                },
            ),
            ("create_directory", {"path": "{ws}/sub"}),
            ("list_directory", {"path": "{ws}"}),
            ("search_files", {"path": "{ws}", "pattern": "*.txt"}),
            ("directory_tree", {"path": "{ws}"}),
        ],
    ),
    Server(
        "memory",
        "@modelcontextprotocol/server-memory@2026.8.31",
        _npm("@modelcontextprotocol/server-memory", "dist/index.js"),
        [
            (
                "create_entities",
                {
                    "entities": [
                        {
                            "name": "Ada",
                            "entityType": "person",
                            "observations": ["writes programs"],
                        },
                        {"name": "Engine", "entityType": "machine", "observations": ["computes"]},
                    ]
                },
            ),
            (
                "create_relations",
                {"relations": [{"from": "Ada", "to": "Engine", "relationType": "programs"}]},
            ),
            (
                "add_observations",
                {"observations": [{"entityName": "Ada", "contents": ["born 1815"]}]},
            ),
            ("search_nodes", {"query": "Ada"}),
            ("open_nodes", {"names": ["Engine"]}),
            ("read_graph", {}),
        ],
        env={"MEMORY_FILE_PATH": "{ws}/memory.jsonl"},
        data_in_workspace=True,
    ),
    Server(
        "sequential-thinking",
        "@modelcontextprotocol/server-sequential-thinking@2026.8.31",
        _npm("@modelcontextprotocol/server-sequential-thinking", "dist/index.js"),
        [
            (
                "sequentialthinking",
                {
                    "thought": "First, list the parts.",
                    "thoughtNumber": 1,
                    "totalThoughts": 2,
                    "nextThoughtNeeded": True,
                },
            ),
            (
                "sequentialthinking",
                {
                    "thought": "Then, join them.",
                    "thoughtNumber": 2,
                    "totalThoughts": 2,
                    "nextThoughtNeeded": False,
                },
            ),
        ],
        env={"DISABLE_THOUGHT_LOGGING": "true"},
    ),
    Server(
        "everything",
        "@modelcontextprotocol/server-everything@2026.8.31",
        [*_npm("@modelcontextprotocol/server-everything", "dist/index.js"), "stdio"],
        [
            ("echo", {"message": "hello, matrix"}),
            ("get-sum", {"a": 2, "b": 40}),
            ("get-annotated-message", {"messageType": "success", "includeImage": False}),
        ],
    ),
    Server(
        "git (cyanheads)",
        "@cyanheads/git-mcp-server@2.15.3",
        _npm("@cyanheads/git-mcp-server", "dist/index.js"),
        [
            ("git_status", {"path": "{ws}/repo"}),
            ("git_log", {"path": "{ws}/repo", "maxCount": 5}),
            ("git_branch", {"path": "{ws}/repo", "mode": "list"}),
        ],
        env={**GIT_ENV, "MCP_TRANSPORT_TYPE": "stdio", "MCP_LOG_LEVEL": "error"},
        fixture="repo",
    ),
    Server(
        "taskmanager",
        "@kazuph/mcp-taskmanager@1.1.1",
        _npm("@kazuph/mcp-taskmanager", "dist/index.js"),
        [
            (
                "request_planning",
                {
                    "originalRequest": "Bake bread",
                    "tasks": [
                        {"title": "Knead", "description": "Knead the dough"},
                        {"title": "Bake", "description": "Bake for 40 minutes"},
                    ],
                },
            ),
            ("list_requests", {}),
            ("get_next_task", {"requestId": "req-1"}),
        ],
        env={"TASK_MANAGER_FILE_PATH": "{ws}/tasks.json"},
        data_in_workspace=True,
    ),
    Server(
        "git (reference)",
        "mcp-server-git==2026.10.19",
        ["{py}/mcp-server-git"],
        [
            ("git_status", {"repo_path": "{ws}/repo"}),
            ("git_log", {"repo_path": "{ws}/repo", "max_count": 5}),
            ("git_branch", {"repo_path": "{ws}/repo", "branch_type": "local"}),
            ("git_show", {"repo_path": "{ws}/repo", "revision": "HEAD"}),
        ],
        env=GIT_ENV,
        fixture="repo",
    ),
    Server(
        "time",
        "mcp-server-time==2026.10.19",
        ["{py}/mcp-server-time", "--local-timezone", "UTC"],
        [
            ("get_current_time", {"timezone": "Europe/Paris"}),
            (
                "convert_time",
                {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"},
            ),
        ],
    ),
    Server(
        "fetch",
        "mcp-server-fetch==2026.10.24",
        ["{py}/mcp-server-fetch"],
        [],
    ),
    Server(
        "sqlite",
        "mcp-server-sqlite==2025.4.25",
        ["{py1}/mcp-server-sqlite", "--db-path", "{ws}/matrix.db"],
        [
            ("create_table", {"query": "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)"}),
            ("write_query", {"query": "INSERT INTO notes (body) VALUES ('one'), ('two')"}),
            ("read_query", {"query": "SELECT id, body FROM notes ORDER BY id"}),
            ("list_tables", {}),
            ("describe_table", {"table_name": "notes"}),
        ],
        fixture="db",
        data_in_workspace=True,
    ),
    Server(
        "calculator",
        "mcp-server-calculator==0.2.1",
        ["{py1}/mcp-server-calculator"],
        [("calculate", {"expression": "2 * (3 + 4) / 7"})],
    ),
    Server(
        "excel",
        "excel-mcp-server==2.2.2",
        ["{py}/excel-mcp-server", "stdio"],
        [
            ("create_workbook", {"path": "{ws}/book.xlsx"}),
            ("describe_workbook", {"path": "{ws}/book.xlsx"}),
            (
                "write_range",
                {
                    "path": "{ws}/book.xlsx",
                    "sheet": "Sheet1",
                    "at": "A1",
                    "rows": [["name", "n"], ["a", 1], ["b", 2]],
                },
            ),
            ("read_range", {"path": "{ws}/book.xlsx", "sheet": "Sheet1", "range": "A1:B3"}),
        ],
        env={"EXCEL_FILES_PATH": "{ws}"},
    ),
]
