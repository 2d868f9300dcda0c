"""deploy/kubernetes checked offline: every manifest against the Kubernetes JSON schemas the
``kubernetes-validate`` wheel bundles (strict: a field the API does not know is an error),
then what the schemas cannot see: that the pieces name each other correctly (selectors,
ports, ConfigMap and Secret keys, ``$(VAR)`` references, the flags the gateway is given) and
that the pods keep the promises of the deployment (no root, nothing privileged, a read-only
root, secrets never in a file a sandbox could be shown). Each check is also shown failing on
a manifest broken the way it guards against."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

import kubernetes_validate
import pytest
from ruamel.yaml import YAML

from launcher.cli.run_flags import BY_FLAG
from tests.deploy.manifests import (
    KUSTOMIZATION,
    ROOT,
    SECRET_EXAMPLE,
    VERSIONS,
    Doc,
    container,
    documents,
    find,
    kustomization,
    resources,
    unresolved,
)

SANDBOXED = ("ironcurtain", "gateway")  # the Deployment and container that start bwrap
# ... and its init container that checks the node can sandbox (it starts bwrap too)
CHECKS = ("ironcurtain", "doctor")


def _schema_problems(docs: list[Doc]) -> list[str]:
    problems = []
    for doc in docs:
        for version in VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                where = "/".join(str(p) for p in exc.path)
                problems.append(
                    f"{doc['kind']} {doc['metadata']['name']} ({version}) {where}: {exc.message}"
                )
    return problems


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_is_valid_against_the_kubernetes_schemas(version: str) -> None:
    docs = [*resources(), *documents(SECRET_EXAMPLE)]
    assert {d["kind"] for d in docs} >= {"Deployment", "Service", "ConfigMap", "Secret"}
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)


BROKEN: dict[str, Callable[[Doc], None]] = {
    "misspelled-field": lambda d: _gateway(d).__setitem__(
        "securityContex", _gateway(d).pop("securityContext")
    ),
    "replicas-not-a-number": lambda d: d["spec"].__setitem__("replicas", "three"),
    "port-not-a-number": lambda d: _gateway(d)["ports"][0].__setitem__("containerPort", "http"),
    "no-selector": lambda d: d["spec"].pop("selector"),
}


def _gateway(deployment: Doc) -> Doc:
    return container(deployment, "gateway")


def _broken_gateway(breaking: Callable[[Doc], None]) -> Doc:
    deployment = copy.deepcopy(find(resources(), "Deployment", SANDBOXED[0]))
    breaking(deployment)
    return deployment


@pytest.mark.parametrize("breaking", BROKEN.values(), ids=list(BROKEN))
def test_a_broken_manifest_is_refused(breaking: Callable[[Doc], None]) -> None:
    assert _schema_problems([_broken_gateway(breaking)])
    assert not _schema_problems([find(resources(), "Deployment", SANDBOXED[0])])


def test_the_kustomization_lists_every_manifest_but_the_example_secret() -> None:
    listed = set(kustomization()["resources"])
    shipped = {p.name for p in ROOT.glob("*.yaml")} - {KUSTOMIZATION.name, SECRET_EXAMPLE.name}
    assert listed == shipped
    images = {i["name"] for i in kustomization()["images"]}
    used = {
        c["image"]
        for d in resources()
        if d["kind"] == "Deployment"
        for c in d["spec"]["template"]["spec"]["containers"]
    }
    assert "ironcurtain" in used and images == {"ironcurtain"}


# What the schemas cannot see: the pieces naming each other.


def _pods(docs: list[Doc]) -> dict[str, Doc]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}


def _selects(selector: dict[str, str], deployment: Doc) -> bool:
    labels: dict[str, str] = deployment["spec"]["template"]["metadata"]["labels"]
    return selector.items() <= labels.items()


def _ports(deployment: Doc) -> dict[str, int]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    return {p["name"]: p["containerPort"] for c in containers for p in c.get("ports", [])}


def _selection_problems(docs: list[Doc]) -> list[str]:
    pods, problems = _pods(docs), []
    for name, deployment in pods.items():
        if not _selects(deployment["spec"]["selector"]["matchLabels"], deployment):
            problems.append(f"Deployment {name}: its selector misses its own pods")
    for doc in docs:
        kind, name = doc["kind"], doc["metadata"]["name"]
        if kind == "Service":
            chosen = [d for d in pods.values() if _selects(doc["spec"]["selector"], d)]
            if len(chosen) != 1:
                problems.append(f"Service {name}: selects {len(chosen)} Deployments")
            for port in doc["spec"]["ports"]:
                if chosen and port["targetPort"] not in _ports(chosen[0]):
                    problems.append(f"Service {name}: no port {port['targetPort']!r}")
        if kind in ("PodDisruptionBudget", "NetworkPolicy"):
            key = "selector" if kind == "PodDisruptionBudget" else "podSelector"
            wanted = doc["spec"][key]["matchLabels"]
            if not any(_selects(wanted, d) for d in pods.values()):
                problems.append(f"{kind} {name}: selects no pods")
    return problems


def _reference_problems(docs: list[Doc], secret: Doc) -> list[str]:
    """ConfigMap and Secret keys, ``$(VAR)`` references and probe ports that do not exist."""
    maps = {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "ConfigMap"}
    secrets = {secret["metadata"]["name"]: secret["stringData"]}
    problems = []
    for name, deployment in _pods(docs).items():
        spec = deployment["spec"]["template"]["spec"]
        for volume in spec.get("volumes", []):
            if "configMap" in volume:
                data = maps.get(volume["configMap"]["name"], {})
                for item in volume["configMap"].get("items", []):
                    if item["key"] not in data:
                        problems.append(f"{name}: volume {volume['name']}: no key {item['key']}")
        for c in (*spec.get("initContainers", []), *spec["containers"]):
            env = {v["name"] for v in c.get("env", [])}
            for var in c.get("env", []):
                for kind, store in (("configMapKeyRef", maps), ("secretKeyRef", secrets)):
                    ref = var.get("valueFrom", {}).get(kind)
                    if ref and ref["key"] not in store.get(ref["name"], {}):
                        problems.append(f"{name}/{c['name']}: {kind} {ref['name']}/{ref['key']}")
            for argument in (*c.get("command", []), *c.get("args", [])):
                for var in unresolved(argument, env):
                    problems.append(f"{name}/{c['name']}: $({var}) is not in its environment")
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                port = c.get(probe, {}).get("httpGet", {}).get("port")
                if port is not None and port not in _ports(deployment):
                    problems.append(f"{name}/{c['name']}: {probe} on no port {port!r}")
    return problems


def _argument_after(arguments: list[str], flag: str) -> str:
    return arguments[arguments.index(flag) + 1]


def _gateway_problems(docs: list[Doc], secret: Doc) -> list[str]:
    """The port the pod declares (the Service's and the probes') is the one the gateway
    listens on, on every interface; the state URL names the Redis Service, its port and
    the password Redis is given."""
    from urllib.parse import urlsplit

    problems = []
    deployment = find(docs, "Deployment", SANDBOXED[0])
    arguments = _gateway(deployment)["args"]
    port = _argument_after(arguments, "--http")
    if str(_ports(deployment).get("http")) != port:
        problems.append(f"the pod's port http is {_ports(deployment).get('http')}, not {port}")
    if "--http-bind" not in arguments or _argument_after(arguments, "--http-bind") != "0.0.0.0":
        problems.append("the gateway does not listen where the Service reaches it")
    state = urlsplit(secret["stringData"]["state-url"])
    redis = find(docs, "Service", state.hostname or "")
    if state.port not in [p["port"] for p in redis["spec"]["ports"]]:
        problems.append(f"the state URL's port {state.port} is not the Redis Service's")
    if state.password != secret["stringData"]["redis-password"]:
        problems.append("the state URL's password is not the one Redis is given")
    return problems


def _wiring_problems(docs: list[Doc], secret: Doc) -> list[str]:
    return [
        *_selection_problems(docs),
        *_reference_problems(docs, secret),
        *_gateway_problems(docs, secret),
    ]


def test_the_manifests_name_each_other_correctly() -> None:
    (secret,) = documents(SECRET_EXAMPLE)
    assert _wiring_problems(resources(), secret) == []


def _in(kind: str, name: str, change: Callable[[Doc], None]) -> Callable[[list[Doc]], None]:
    return lambda docs: change(find(docs, kind, name))


MISWIRED: dict[str, Callable[[list[Doc]], None]] = {
    "service-selects-nothing": _in(
        "Service",
        "ironcurtain",
        lambda d: d["spec"]["selector"].update({"app.kubernetes.io/component": "gateways"}),
    ),
    "service-port-unknown": _in(
        "Service", "ironcurtain", lambda d: d["spec"]["ports"][0].update(targetPort="https")
    ),
    "pdb-selects-nothing": _in(
        "PodDisruptionBudget",
        "ironcurtain",
        lambda d: d["spec"]["selector"]["matchLabels"].update(app="x"),
    ),
    "configmap-key-missing": _in(
        "ConfigMap", "ironcurtain", lambda d: d["data"].pop("oidc-require")
    ),
    "volume-item-missing": _in(
        "ConfigMap", "ironcurtain", lambda d: d["data"].pop("mcp-servers.json")
    ),
    "argument-unexpanded": _in("Deployment", "ironcurtain", lambda d: _gateway(d)["env"].pop(0)),
    "pod-port-not-the-gateways": _in(
        "Deployment", "ironcurtain", lambda d: _gateway(d)["ports"][0].update(containerPort=8766)
    ),
    "gateway-on-loopback": _in(
        "Deployment",
        "ironcurtain",
        lambda d: _gateway(d)["args"].__setitem__(_gateway(d)["args"].index("0.0.0.0"), "::1"),
    ),
    "probe-on-no-port": _in(
        "Deployment",
        "ironcurtain",
        lambda d: _gateway(d)["livenessProbe"]["httpGet"].update(port="health"),
    ),
    "state-url-elsewhere": _in(
        "Service", "ironcurtain-redis", lambda d: d["spec"]["ports"][0].update(port=6380)
    ),
}


@pytest.mark.parametrize("miswiring", MISWIRED.values(), ids=list(MISWIRED))
def test_a_miswired_manifest_is_caught(miswiring: Callable[[list[Doc]], None]) -> None:
    docs = copy.deepcopy(resources())
    (secret,) = documents(SECRET_EXAMPLE)
    miswiring(docs)
    assert _wiring_problems(docs, secret)


def test_the_gateway_is_given_only_options_it_knows() -> None:
    arguments = _gateway(find(resources(), "Deployment", SANDBOXED[0]))["args"]
    assert arguments[0] == "run"
    flags = [a for a in arguments if a.startswith("--")]
    assert [f for f in flags if f not in BY_FLAG] == []
    assert "--oidc-issuer" in flags and "--oidc-require" in flags
    # Listening beyond loopback, only with the public URL the Host is checked against.
    assert "--http-bind" in flags and "--public-url" in flags


# The promises of the pods: no root, nothing privileged, nothing written outside the volumes,
# and the weakening bubblewrap needs given to the one container that starts it.

RUNTIME_DEFAULT = {"type": "RuntimeDefault"}


def _container_problems(where: str, pod: Doc, c: Doc, sandboxed: bool) -> list[str]:
    context, problems = c.get("securityContext", {}), []
    user = {**pod.get("securityContext", {}), **context}
    if user.get("runAsNonRoot") is not True or user.get("runAsUser", 0) == 0:
        problems.append(f"{where}: may run as root")
    if context.get("privileged") is not False:
        problems.append(f"{where}: not said unprivileged")
    if context.get("allowPrivilegeEscalation") is not False:
        problems.append(f"{where}: may gain privileges (setuid)")
    if context.get("readOnlyRootFilesystem") is not True:
        problems.append(f"{where}: may write its root file system")
    capabilities = context.get("capabilities", {})
    if capabilities.get("drop") != ["ALL"] or capabilities.get("add"):
        problems.append(f"{where}: keeps capabilities")
    seccomp = context.get("seccompProfile", pod.get("securityContext", {}).get("seccompProfile"))
    weakened = {
        "seccomp": seccomp != RUNTIME_DEFAULT,
        "AppArmor": "appArmorProfile" in context
        or "appArmorProfile" in pod.get("securityContext", {}),
        "/proc": context.get("procMount", "Default") != "Default",
    }
    for what, weaker in weakened.items():
        if weaker and not sandboxed:
            problems.append(f"{where}: {what} weakened, yet it starts no sandbox")
    if context.get("procMount") == "Unmasked" and pod.get("hostUsers") is not False:
        problems.append(f"{where}: an unmasked /proc outside a user namespace")
    return problems


def _promise_problems(docs: list[Doc]) -> list[str]:
    problems = []
    for name, deployment in _pods(docs).items():
        pod = deployment["spec"]["template"]["spec"]
        for shared in ("hostNetwork", "hostPID", "hostIPC"):
            if pod.get(shared):
                problems.append(f"{name}: shares the node's {shared[4:]}")
        if pod.get("automountServiceAccountToken") is not False:
            problems.append(f"{name}: the service account's token is mounted")
        for volume in pod.get("volumes", []):
            kinds = set(volume) - {"name"}
            if kinds - {"configMap", "emptyDir"}:
                # A sandbox is shown /etc and the system's trees read-only: a secret is
                # given in the environment, which no server inherits, never as a file.
                problems.append(f"{name}: a {'/'.join(sorted(kinds))} volume ({volume['name']})")
        for c in (*pod.get("initContainers", []), *pod["containers"]):
            sandboxed = (name, c["name"]) in (SANDBOXED, CHECKS)
            problems += _container_problems(f"{name}/{c['name']}", pod, c, sandboxed)
    return problems


def test_the_pods_keep_their_promises() -> None:
    assert _promise_problems(resources()) == []


def _sandboxed_context(d: list[Doc]) -> Doc:
    context: Doc = _gateway(find(d, "Deployment", SANDBOXED[0]))["securityContext"]
    return context


def _pod_of(name: str) -> Callable[[list[Doc]], Doc]:
    return lambda d: find(d, "Deployment", name)["spec"]["template"]["spec"]


_GATEWAY_POD, _REDIS_POD = _pod_of("ironcurtain"), _pod_of("ironcurtain-redis")
WEAKENED: dict[str, Callable[[list[Doc]], Any]] = {
    "privileged": lambda d: _sandboxed_context(d).update(privileged=True),
    "privilege-escalation": lambda d: _sandboxed_context(d).update(allowPrivilegeEscalation=True),
    "writable-root": lambda d: _sandboxed_context(d).pop("readOnlyRootFilesystem"),
    "sys-admin": lambda d: _sandboxed_context(d)["capabilities"].update(add=["SYS_ADMIN"]),
    "root": lambda d: _REDIS_POD(d)["securityContext"].update(runAsUser=0),
    "not-said-non-root": lambda d: _GATEWAY_POD(d)["securityContext"].pop("runAsNonRoot"),
    "host-pid": lambda d: _GATEWAY_POD(d).update(hostPID=True),
    "host-users": lambda d: _GATEWAY_POD(d).pop("hostUsers"),
    "token-mounted": lambda d: _GATEWAY_POD(d).pop("automountServiceAccountToken"),
    "secret-as-file": lambda d: _GATEWAY_POD(d)["volumes"].append(
        {"name": "s", "secret": {"secretName": "ironcurtain"}}
    ),
    "host-path": lambda d: _GATEWAY_POD(d)["volumes"].append(
        {"name": "h", "hostPath": {"path": "/var/run"}}
    ),
    "redis-seccomp-unconfined": lambda d: _REDIS_POD(d)["securityContext"].update(
        seccompProfile={"type": "Unconfined"}
    ),
}


@pytest.mark.parametrize("weakening", WEAKENED.values(), ids=list(WEAKENED))
def test_a_weakened_pod_is_caught(weakening: Callable[[list[Doc]], Any]) -> None:
    docs = copy.deepcopy(resources())
    weakening(docs)
    assert _promise_problems(docs)


def test_only_the_gateway_container_has_its_sandbox_weakenings() -> None:
    """The exceptions bubblewrap needs are where it runs, spelled out there."""
    context = _sandboxed_context(resources())
    assert context["procMount"] == "Unmasked"
    assert context["seccompProfile"] == {"type": "Unconfined"}
    assert context["appArmorProfile"] == {"type": "Unconfined"}
    assert _GATEWAY_POD(resources())["hostUsers"] is False
    (doctor,) = _GATEWAY_POD(resources())["initContainers"]
    assert doctor["args"] == ["doctor"] and doctor["securityContext"] == context


# The image and the pods agree: the user, the home the volume covers, the programs run.

CONTAINERFILE = ROOT.parent / "Containerfile"


def _image_problems(containerfile: str, docs: list[Doc]) -> list[str]:
    problems = []
    user = re.search(r"^USER (\d+):(\d+)$", containerfile, re.MULTILINE)
    home = re.search(r"HOME=(\S+)", containerfile)
    extras = re.search(r"/opt/ironcurtain/src\[([a-z,]+)\]", containerfile)
    packages = re.search(r"--no-install-recommends \\\n((?:.*\\\n)*.*)\n", containerfile)
    deployment = find(docs, "Deployment", SANDBOXED[0])
    pod = deployment["spec"]["template"]["spec"]
    context = pod["securityContext"]
    if not user or (int(user[1]), int(user[2])) != (context["runAsUser"], context["runAsGroup"]):
        problems.append("the image's USER is not the pod's runAsUser:runAsGroup")
    mounts = {m["mountPath"] for m in _gateway(deployment)["volumeMounts"]}
    if not home or home[1] not in mounts:
        problems.append("the image's HOME is not a volume of the gateway (a read-only root)")
    installed = set(packages[1].replace("\\", " ").split()) if packages else set()
    if "bubblewrap" not in installed:
        problems.append("bubblewrap, which the gateway sandboxes with, is not in the image")
    needed = {"http"} | ({"redis"} if "--state" in _gateway(deployment)["args"] else set())
    if not extras or needed - set(extras[1].split(",")):
        problems.append(f"the image lacks the extras {sorted(needed)} the gateway's options need")
    return problems


def test_the_image_is_what_the_pods_expect() -> None:
    assert _image_problems(CONTAINERFILE.read_text(), resources()) == []


DRIFTED = {
    "another-user": ("USER 10001:10001", "USER 1000:1000"),
    "home-elsewhere": ("HOME=/home/ironcurtain", "HOME=/var/lib/ironcurtain"),
    "no-bubblewrap": ("      bubblewrap ", "      "),
    "no-redis-extra": ("telemetry,redis]", "telemetry]"),
}


@pytest.mark.parametrize("drift", DRIFTED.values(), ids=list(DRIFTED))
def test_an_image_that_drifted_from_the_pods_is_caught(drift: tuple[str, str]) -> None:
    text = CONTAINERFILE.read_text()
    assert drift[0] in text
    assert _image_problems(text.replace(drift[0], drift[1]), resources())


@pytest.mark.skipif(not shutil.which("kubectl"), reason="needs kubectl (its built-in kustomize)")
def test_what_kustomize_renders_is_what_is_checked_here() -> None:
    """``kubectl kustomize`` (offline) renders the same objects, with the image named in
    kustomization.yaml, and they are valid too."""
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(ROOT)], capture_output=True, text=True, timeout=120
    )
    assert rendered.returncode == 0, rendered.stderr
    docs = [d for d in YAML(typ="safe", pure=True).load_all(rendered.stdout) if d]
    assert sorted((d["kind"], d["metadata"]["name"]) for d in docs) == sorted(
        (d["kind"], d["metadata"]["name"]) for d in resources()
    )
    assert _schema_problems(docs) == []
    (image,) = kustomization()["images"]
    wanted = f"{image['newName']}:{image['newTag']}"
    gateway = find(docs, "Deployment", SANDBOXED[0])["spec"]["template"]["spec"]
    assert {c["image"] for c in (*gateway["initContainers"], *gateway["containers"])} == {wanted}
