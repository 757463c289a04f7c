"""Kubernetes: manifests for a StatefulSet of ``regency worker`` pods, and their addresses.

A headless Service (``clusterIP: None``) gives each pod of a StatefulSet a stable DNS name,
``NAME-I.NAME.NAMESPACE.svc``; the controller attaches to those names::

    kubectl create secret generic NAME-secret --from-literal=secret="$(openssl rand -hex 32)"
    python -c 'from regency.job import kubernetes_manifests as m; print(m("w", 4, "img"))' \\
        | kubectl apply -f -

    # in the controller (a pod of the cluster, with REGENCY_SECRET from the same Secret):
    hosts = attach_to_workers(kubernetes_worker_addresses("w", 4))

Each pod runs ``regency worker --listen tcp://0.0.0.0:PORT --advertise $(POD_IP)``: the
worker's procs listen on the pod IP (on ephemeral ports), which the controller must reach.
``publishNotReadyAddresses`` makes the DNS names resolve as soon as the pods run. The secret
comes from a Kubernetes Secret through the environment, never the command line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["kubernetes_manifests", "kubernetes_objects", "kubernetes_worker_addresses"]

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,50}[a-z0-9])?$")


def _check(name: str, namespace: str) -> None:
    for what, value in (("name", name), ("namespace", namespace)):
        if not _DNS_LABEL.match(value):
            raise ValueError(f"kubernetes {what} {value!r} must be a DNS label: lower-case "
                             "letters, digits and '-', at most 52 characters")


def kubernetes_worker_addresses(name: str, replicas: int, namespace: str = "default",
                                port: int = 26600, cluster_domain: str | None = None
                                ) -> list[str]:
    """The stable addresses of the worker pods: ``tcp://NAME-I.NAME.NAMESPACE.svc:PORT``.

    ``cluster_domain`` (e.g. ``"cluster.local"``) is appended when given.
    """
    _check(name, namespace)
    suffix = f".{cluster_domain}" if cluster_domain else ""
    return [f"tcp://{name}-{i}.{name}.{namespace}.svc{suffix}:{port}" for i in range(replicas)]


def kubernetes_manifests(name: str, replicas: int, image: str, port: int = 26600, *,
                         namespace: str = "default", python: str = "python",
                         secret_name: str | None = None, secret_key: str = "secret",
                         secret_value: str | None = None,
                         resources: Mapping[str, Any] | None = None,
                         env: Mapping[str, str] | None = None,
                         labels: Mapping[str, str] | None = None,
                         node_selector: Mapping[str, str] | None = None,
                         tolerations: Sequence[Mapping[str, Any]] | None = None) -> str:
    """YAML for a headless Service and a StatefulSet of ``replicas`` worker pods.

    Args:
        name: names the Service, the StatefulSet and (``NAME-I``) the pods.
        replicas: how many worker hosts.
        image: a container image with Python and regency installed.
        port: the port workers listen on.
        namespace: the Kubernetes namespace.
        python: the interpreter in the image.
        secret_name: the Secret holding the job secret (default ``NAME-secret``), read from
            its key ``secret_key`` into ``REGENCY_SECRET``.
        secret_value: when given, a Secret manifest with this value is emitted too
            (convenient for a test cluster; prefer ``kubectl create secret``).
        resources: the container's ``resources`` (e.g. ``{"limits": {"nvidia.com/gpu": 8}}``).
        env: more environment variables for the workers.
        labels: more labels for the pods.
        node_selector, tolerations: passed to the pod spec.

    Returns:
        Several YAML documents separated by ``---``, for ``kubectl apply -f -``.
    """
    docs = kubernetes_objects(name, replicas, image, port, namespace=namespace, python=python,
                              secret_name=secret_name, secret_key=secret_key,
                              secret_value=secret_value, resources=resources, env=env,
                              labels=labels, node_selector=node_selector,
                              tolerations=tolerations)
    return "---\n".join(to_yaml(d) for d in docs)


def to_yaml(value: Any, indent: int = 0) -> str:
    """Block-style YAML for JSON-like data (strings double-quoted, so never misread)."""
    return "".join(_emit(value, indent)) or "{}\n"


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    return json.dumps(str(value))  # a JSON string is a valid YAML double-quoted scalar


def _emit(value: Any, indent: int) -> list[str]:
    pad = " " * indent
    out: list[str] = []
    if isinstance(value, Mapping):
        for key, item in value.items():
            k = _scalar(str(key)) if not re.match(r"^[A-Za-z_][A-Za-z0-9_./-]*$", str(key)) \
                else str(key)
            if _is_block(item):
                out.append(f"{pad}{k}:\n")
                out += _emit(item, indent + 2)
            else:
                out.append(f"{pad}{k}: {_inline(item)}\n")
    elif isinstance(value, (list, tuple)):
        for item in value:
            if _is_block(item):
                lines = _emit(item, indent + 2)
                first = lines[0]
                out.append(f"{pad}- {first[indent + 2:]}")
                out += lines[1:]
            else:
                out.append(f"{pad}- {_inline(item)}\n")
    else:
        out.append(f"{pad}{_scalar(value)}\n")
    return out


def _is_block(item: Any) -> bool:
    return isinstance(item, (Mapping, list, tuple)) and len(item) > 0


def _inline(item: Any) -> str:
    if isinstance(item, Mapping):
        return "{}"
    if isinstance(item, (list, tuple)):
        return "[]"
    return _scalar(item)


def kubernetes_objects(name: str, replicas: int, image: str, port: int = 26600, *,
                       namespace: str = "default", python: str = "python",
                       secret_name: str | None = None, secret_key: str = "secret",
                       secret_value: str | None = None,
                       resources: Mapping[str, Any] | None = None,
                       env: Mapping[str, str] | None = None,
                       labels: Mapping[str, str] | None = None,
                       node_selector: Mapping[str, str] | None = None,
                       tolerations: Sequence[Mapping[str, Any]] | None = None,
                       annotations: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """The objects of :func:`kubernetes_manifests` as dicts (Secret?, Service, StatefulSet)."""
    _check(name, namespace)
    if replicas < 1:
        raise ValueError("replicas must be at least 1")
    secret_name = secret_name or f"{name}-secret"
    match = {"app.kubernetes.io/name": "regency-worker", "app.kubernetes.io/instance": name}
    pod_labels = {**match, **(labels or {})}
    docs: list[dict[str, Any]] = []
    if secret_value is not None:
        docs.append({"apiVersion": "v1", "kind": "Secret",
                     "metadata": {"name": secret_name, "namespace": namespace, "labels": match},
                     "type": "Opaque", "stringData": {secret_key: secret_value}})
    docs.append({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": match},
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": match,
                 "ports": [{"name": "regency", "port": port, "targetPort": port,
                            "protocol": "TCP"}]},
    })
    container: dict[str, Any] = {
        "name": "worker", "image": image,
        "command": [python, "-m", "regency", "worker", "--listen", f"tcp://0.0.0.0:{port}",
                    "--advertise", "$(POD_IP)"],
        "ports": [{"name": "regency", "containerPort": port, "protocol": "TCP"}],
        "env": [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "REGENCY_SECRET",
             "valueFrom": {"secretKeyRef": {"name": secret_name, "key": secret_key}}},
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            *({"name": k, "value": str(v)} for k, v in (env or {}).items()),
        ],
    }
    if resources:
        container["resources"] = dict(resources)
    pod_spec: dict[str, Any] = {"terminationGracePeriodSeconds": 10, "containers": [container]}
    if node_selector:
        pod_spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        pod_spec["tolerations"] = [dict(t) for t in tolerations]
    pod_meta: dict[str, Any] = {"labels": pod_labels}
    if annotations:
        pod_meta["annotations"] = dict(annotations)
    docs.append({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": namespace, "labels": match},
        "spec": {"serviceName": name, "replicas": replicas, "podManagementPolicy": "Parallel",
                 "selector": {"matchLabels": match},
                 "template": {"metadata": pod_meta, "spec": pod_spec}},
    })
    return docs
