"""The vocabulary every layer shares: JSON-RPC messages and framing, user errors, where things
are kept, text made safe to show.
"""
