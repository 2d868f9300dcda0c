"""How a human answers escalations from outside a session: the unix socket each session
serves, the client that attaches to every session of the user, and the web page and webhook
built on that client."""
