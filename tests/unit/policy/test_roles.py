from __future__ import annotations

import pytest

from policy import roles, schema
from policy.models import ToolAnnotation


def test_every_role_is_registered_with_all_fields() -> None:
    for role in roles.get_argument_role_values():
        d = roles.get_role_definition(role)
        assert d.description and d.annotation_guidance
        assert d.category in ("path", "url", "opaque")
        assert d.canonicalize("x", "/", "/h") is not None


def test_categories() -> None:
    assert roles.get_path_roles() == ("read-path", "write-path", "delete-path")
    assert roles.get_url_roles() == ("fetch-url", "git-remote-url")
    assert set(roles.get_resource_roles()) == {*roles.get_path_roles(), *roles.get_url_roles()}
    assert "none" not in roles.get_resource_roles()


def test_is_argument_role() -> None:
    assert roles.is_argument_role("read-path")
    assert not roles.is_argument_role("read_path")
    assert not roles.is_argument_role(3)


def test_unknown_role_is_rejected_by_the_annotation_model() -> None:
    with pytest.raises(ValueError, match="read-path"):
        schema.validate(
            ToolAnnotation,
            {
                "toolName": "t",
                "serverName": "s",
                "effect": "read",
                "sideEffects": True,
                "args": {"p": ["reed-path"]},
            },
        )


def test_role_descriptions_for_the_annotator_cover_every_role() -> None:
    text = roles.build_role_descriptions()
    for role in roles.get_argument_role_values():
        assert f'"{role}"' in text


def test_none_is_identity_and_url_is_normalised() -> None:
    assert roles.get_role_definition("none").canonicalize("/etc/../x", None, None) == "/etc/../x"
    assert roles.get_role_definition("fetch-url").canonicalize("HTTP://A.COM./x", None, None) == (
        "http://a.com/x"
    )
