"""How clients reach the session: stdio, streamable HTTP (:mod:`.http`, with gateway mode's
callers), the approvals socket.
"""
