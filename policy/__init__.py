"""Policy decisions: roles, canonical paths and URLs, policy files, the engine."""

from policy.decision import Decision, StructuralConfig
from policy.engine import PolicyEngine
from policy.errors import PolicyFileError
from policy.loader import PolicyFiles, bundled_policy_dir, load_policy_dir
from policy.models import CompiledPolicyFile, ToolAnnotation, ToolAnnotationsFile
from policy.prepare import prepare_tool_args

__all__ = [
    "CompiledPolicyFile",
    "Decision",
    "PolicyEngine",
    "PolicyFileError",
    "PolicyFiles",
    "StructuralConfig",
    "ToolAnnotation",
    "ToolAnnotationsFile",
    "bundled_policy_dir",
    "load_policy_dir",
    "prepare_tool_args",
]
