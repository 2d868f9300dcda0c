"""OS isolation: one profile model and its renderings."""

from sandbox_profiles.bwrap import render as render_bwrap
from sandbox_profiles.model import Mount, SandboxProfile
from sandbox_profiles.profile import ProfileRequest, build_profile, write_runtime_files

__all__ = [
    "Mount",
    "ProfileRequest",
    "SandboxProfile",
    "build_profile",
    "render_bwrap",
    "write_runtime_files",
]
