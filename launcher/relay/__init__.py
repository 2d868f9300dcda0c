"""The relay core: every request that reaches a server, its gate, escalations and answers. It
knows no process, socket or file system.
"""
