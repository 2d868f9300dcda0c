"""Everything a session needs, decided before anything starts: the config, each server's plan,
policy and sandboxes checked against each other.
"""
