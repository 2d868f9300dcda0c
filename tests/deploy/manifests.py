"""The Kubernetes manifests under ``deploy/kubernetes``, read as the cluster would take them:
every document of the files ``kustomization.yaml`` lists (the example Secret aside, which
the operator makes with real values), and a container's arguments with ``$(VAR)`` expanded
from its environment as the kubelet does."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
KUSTOMIZATION = ROOT / "kustomization.yaml"
SECRET_EXAMPLE = ROOT / "secret.example.yaml"
# The versions the manifests are checked against: the oldest with every field they use
# (a pod's appArmorProfile), and the newest whose schemas the validator bundles.
VERSIONS = ("1.30.0", "1.37.0")

Doc = dict[str, Any]


def documents(path: Path) -> list[Doc]:
    """The YAML documents of ``path`` (empty ones dropped)."""
    loaded: list[Doc] = list(YAML(typ="safe", pure=True).load_all(path.read_text()))
    return [doc for doc in loaded if doc]


def kustomization() -> Doc:
    (doc,) = documents(KUSTOMIZATION)
    return doc


def resources() -> list[Doc]:
    """Every document of the files kustomization.yaml lists, in its order."""
    return [doc for name in kustomization()["resources"] for doc in documents(ROOT / name)]


def find(docs: list[Doc], kind: str, name: str) -> Doc:
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def container(deployment: Doc, name: str) -> Doc:
    found: Doc
    (found,) = [
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == name
    ]
    return found


def env_of(spec: Doc, configmap: Mapping[str, str], secret: Mapping[str, str]) -> dict[str, str]:
    """A container's environment, its references to the ConfigMap and Secret looked up."""
    env: dict[str, str] = {}
    for var in spec.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
            continue
        source = var["valueFrom"]
        if "configMapKeyRef" in source:
            env[var["name"]] = configmap[source["configMapKeyRef"]["key"]]
        else:
            env[var["name"]] = secret[source["secretKeyRef"]["key"]]
    return env


_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def expand(argument: str, env: Mapping[str, str], missing: Callable[[str], str]) -> str:
    """``argument`` with each ``$(NAME)`` replaced by ``env[NAME]``; a name the environment
    lacks is handed to ``missing`` (the kubelet would leave it as written)."""
    return _REFERENCE.sub(
        lambda m: env[m.group(1)] if m.group(1) in env else missing(m.group(1)), argument
    )


def unresolved(argument: str, names: Collection[str]) -> list[str]:
    """The ``$(NAME)`` references of ``argument`` to names not in ``names``."""
    return [name for name in _REFERENCE.findall(argument) if name not in names]
