"""The MCP clients on this machine: their files reached and edited (:mod:`.files`), which
clients there are and what each keeps (:mod:`.catalogue`), and wrap/unwrap of their
servers (:mod:`.wrap`).
"""
