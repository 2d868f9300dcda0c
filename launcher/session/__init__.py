"""The wiring of one session: what starts before the event loop, the session, each client's
servers, what it reports.
"""
