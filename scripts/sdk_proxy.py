#!/usr/bin/env python3
"""The peer ``bench.py peers`` measures ironcurtain against: the smallest MCP proxy one
would write on the ``mcp`` SDK's own classes. It serves stdio with the SDK's low-level
``Server`` and forwards ``tools/list`` and ``tools/call`` through the SDK's
``ClientSession`` to one server it starts; no policy, no sandbox, no audit.

Usage: sdk_proxy.py COMMAND [ARG ...]
"""

from __future__ import annotations

import sys

import anyio
import mcp_types as types
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server


async def main(argv: list[str]) -> None:
    params = StdioServerParameters(command=argv[0], args=argv[1:])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as upstream:
        await upstream.initialize()

        async def list_tools(
            ctx: object, params: types.PaginatedRequestParams | None
        ) -> types.ListToolsResult:
            return await upstream.list_tools()

        async def call_tool(
            ctx: object, params: types.CallToolRequestParams
        ) -> types.CallToolResult:
            return await upstream.call_tool(params.name, params.arguments or {})

        server: Server[object] = Server(
            "sdk-proxy",
            on_list_tools=list_tools,
            on_call_tool=call_tool,
        )
        async with stdio_server() as (server_read, server_write):
            await server.run(server_read, server_write, server.create_initialization_options())


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    anyio.run(main, sys.argv[1:])
