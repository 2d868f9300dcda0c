"""OS isolation: one profile model (``sandbox_profiles.model``) and its renderings.

Import what you need from its module (``sandbox_profiles.profile``, ``.bwrap``...): this
package imports nothing, so loading one small module loads only what that module needs.
"""
