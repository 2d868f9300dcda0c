"""The machine: its platform and whether it can sandbox, launching a sandbox, OS calls, ACLs,
no-follow walks, process trees.
"""
