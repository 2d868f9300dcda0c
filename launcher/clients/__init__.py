"""The MCP clients on this machine: where each keeps its servers, and wrap/unwrap of their
files.
"""
