"""The servers as the trusted process runs them: each connection, the fleet, egress, one-shot
widened calls.
"""
