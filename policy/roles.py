"""The argument-role registry: the one place that knows what a role means.

Every other module asks this registry; nothing else spells role names out in lists.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Literal, TypeGuard, get_args

from policy.gitremotes import resolve_default_remote, resolve_git_remote
from policy.gitrepo import git_locations
from policy.paths import canonical_path
from policy.urls import (
    extract_domain,
    extract_git_domain,
    normalize_git_url,
    normalize_url,
)
from sandbox_profiles.records import frozen

RoleCategory = Literal["path", "url", "opaque"]
ArgumentRole = Literal[
    "read-path",
    "write-path",
    "delete-path",
    "fetch-url",
    "git-remote-url",
    "branch-name",
    "commit-message",
    "none",
]

# canonicalise(value, cwd, home) -> canonical value; pure in intent, never raises.
Canonicalise = Callable[[str, str | None, str | None], str]
# (value, the call's arguments, cwd, the tool's name) -> every value the call really reaches.
ResolveForPolicy = Callable[[str, Mapping[str, object], str | None, str], tuple[str, ...]]
# (the call's arguments, cwd, the tool's name) -> what an argument left out stands for.
ResolveAbsent = Callable[[Mapping[str, object], str | None, str], tuple[str, ...]]
# canonical value -> the other canonical paths a tool that runs git reaches through it;
# raises ``policy.paths.UnknownLocationError`` when they cannot be known.
GitLocations = Callable[[str], tuple[str, ...]]


@frozen(slots=True)
class RoleDefinition:
    """What an argument role means: how its values are canonicalised and judged, and how
    an annotator is told to recognise it."""

    description: str
    is_resource_identifier: bool
    category: RoleCategory
    canonicalize: Canonicalise
    annotation_guidance: str
    # The policy's view of a canonical value (a URL's domain), where it differs.
    prepare_for_policy: Callable[[str], str] | None = None
    # Context-aware resolution using sibling arguments and the tool (a named git remote ->
    # every URL git would contact for that operation); each is judged.
    resolve_for_policy: ResolveForPolicy | None = None
    # What the argument stands for when a call leaves it out (no remote named: the remote
    # git picks), judged as if given.
    resolve_absent: ResolveAbsent | None = None
    # For a tool that runs git (:func:`is_git_tool`): every place git really reads and
    # writes for the value (a repository's git directory, common directory, working tree),
    # checked by the policy as if the argument named them too.
    git_locations: GitLocations | None = None


def _identity(value: str, cwd: str | None = None, home: str | None = None) -> str:
    return value


def _url(value: str, cwd: str | None = None, home: str | None = None) -> str:
    return normalize_url(value)


def _git_url(value: str, cwd: str | None = None, home: str | None = None) -> str:
    return normalize_git_url(value)


_PATH_GUIDANCE = (
    "Path roles apply to every argument that names a file or directory, absolute or "
    "relative, including each element of an array of paths."
)

ARGUMENT_ROLE_REGISTRY: Mapping[ArgumentRole, RoleDefinition] = {
    "read-path": RoleDefinition(
        description="Filesystem path that will be read (contents, listing or metadata)",
        is_resource_identifier=True,
        category="path",
        canonicalize=canonical_path,
        git_locations=git_locations,
        annotation_guidance="Assign to paths whose contents or metadata the tool reads. "
        + _PATH_GUIDANCE,
    ),
    "write-path": RoleDefinition(
        description="Filesystem path that will be created or written to",
        is_resource_identifier=True,
        category="path",
        canonicalize=canonical_path,
        git_locations=git_locations,
        annotation_guidance="Assign to paths the tool creates or modifies (a repository "
        "a commit is written to counts). " + _PATH_GUIDANCE,
    ),
    "delete-path": RoleDefinition(
        description="Filesystem path that will be deleted (a move deletes its source)",
        is_resource_identifier=True,
        category="path",
        canonicalize=canonical_path,
        git_locations=git_locations,
        annotation_guidance="Assign to paths the tool removes; the source of a move is "
        "both read-path and delete-path. " + _PATH_GUIDANCE,
    ),
    "fetch-url": RoleDefinition(
        description="URL that will be fetched via HTTP(S)",
        is_resource_identifier=True,
        category="url",
        canonicalize=_url,
        prepare_for_policy=extract_domain,
        annotation_guidance="Assign to arguments that are HTTP(S) URLs the tool will fetch. "
        "Typically applies to web-fetch server tools.",
    ),
    "git-remote-url": RoleDefinition(
        description="Git remote URL or named remote for network operations",
        is_resource_identifier=True,
        category="url",
        canonicalize=_git_url,
        prepare_for_policy=extract_git_domain,
        resolve_for_policy=resolve_git_remote,
        resolve_absent=resolve_default_remote,
        annotation_guidance="Assign to arguments that identify a git remote (URL or named "
        'remote like "origin"): clone, push, pull, fetch, remote.',
    ),
    "branch-name": RoleDefinition(
        description="Git branch name",
        is_resource_identifier=False,
        category="opaque",
        canonicalize=_identity,
        annotation_guidance="Assign to arguments that are git branch or revision names.",
    ),
    "commit-message": RoleDefinition(
        description="Git commit message text",
        is_resource_identifier=False,
        category="opaque",
        canonicalize=_identity,
        annotation_guidance="Assign to arguments that are git commit messages.",
    ),
    "none": RoleDefinition(
        description="Argument carries no resource-identifier semantics",
        is_resource_identifier=False,
        category="opaque",
        canonicalize=_identity,
        annotation_guidance="Assign to everything else (content, counts, flags, patterns).",
    ),
}

_ROLE_VALUES: tuple[ArgumentRole, ...] = get_args(ArgumentRole)
# Import-time completeness check: every role in the Literal has a definition, and no more.
if set(_ROLE_VALUES) != set(ARGUMENT_ROLE_REGISTRY):  # pragma: no cover - a build error
    raise RuntimeError("ArgumentRole and ARGUMENT_ROLE_REGISTRY disagree")


def get_role_definition(role: ArgumentRole) -> RoleDefinition:
    """The definition of ``role``; ``KeyError`` for an unregistered name.

    >>> get_role_definition("read-path").category
    'path'
    """
    return ARGUMENT_ROLE_REGISTRY[role]


def is_argument_role(value: object) -> TypeGuard[ArgumentRole]:
    return isinstance(value, str) and value in ARGUMENT_ROLE_REGISTRY


def get_argument_role_values() -> tuple[ArgumentRole, ...]:
    return _ROLE_VALUES


def get_resource_roles() -> tuple[ArgumentRole, ...]:
    return tuple(r for r, d in ARGUMENT_ROLE_REGISTRY.items() if d.is_resource_identifier)


def get_roles_by_category(category: RoleCategory) -> tuple[ArgumentRole, ...]:
    return tuple(r for r, d in ARGUMENT_ROLE_REGISTRY.items() if d.category == category)


def get_path_roles() -> tuple[ArgumentRole, ...]:
    """Path-category roles: the only ones fed to path canonicalisation and containment."""
    return get_roles_by_category("path")


def get_url_roles() -> tuple[ArgumentRole, ...]:
    return get_roles_by_category("url")


def is_git_tool(server: str, tool: str) -> bool:
    """A tool that runs git, by its server's or its own name: a path it is given may be a
    repository whose git directory lies elsewhere (the path roles' ``git_locations``).
    Generous on purpose: a tool wrongly taken for one is only checked more.

    >>> is_git_tool("git", "git_status"), is_git_tool("filesystem", "read_file")
    (True, False)
    """
    return "git" in server.lower() or "git" in tool.lower()


def build_role_descriptions() -> str:
    """Role list for the annotation prompt, generated so a new role teaches the annotator."""
    return "\n".join(
        f'- "{role}" -- {d.description}. {d.annotation_guidance}'
        for role, d in ARGUMENT_ROLE_REGISTRY.items()
    )
