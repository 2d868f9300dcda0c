"""Policy decisions: roles, canonical paths and URLs, policy files, the engine.

Import what you need from its module (``policy.engine``, ``policy.loader``...): this package
imports nothing, so loading one small module loads only what that module needs.
"""
