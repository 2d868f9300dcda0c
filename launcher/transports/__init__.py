"""How clients reach the session: stdio, streamable HTTP and its bounds and token, the
approvals socket.
"""
