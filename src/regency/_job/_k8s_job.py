"""``KubernetesJob``: worker pods through the official Kubernetes Python client.

Each mesh is either *attached* (pods that already run ``regency worker``, found by a label
selector) or *provisioned* (``image_spec`` given: a Secret with the job secret, a headless
Service and a StatefulSet, as :func:`kubernetes_objects` writes them, created or replaced).
``apply()`` then waits until the mesh's pods run and have an IP; the workers are
``tcp://POD_IP:PORT``, ordered by the ``pod_rank_label`` label when pods have it, else by the
StatefulSet ordinal in the pod name. Reattaching checks that the same pods (by uid) still
run. ``kill()`` deletes what the job provisioned and leaves attached pods alone.

Needs the ``kubernetes`` package (``pip install 'regency[kubernetes]'``) and a kubeconfig
(``kubeconfig=``, ``$KUBECONFIG``, ``~/.kube/config``) or an in-cluster service account.
"""

from __future__ import annotations

import importlib
import os
import re
import time
from collections.abc import Mapping
from typing import Any

from ._base import JobError, JobTrait, env_secret
from ._k8s import kubernetes_objects

__all__ = ["KubernetesJob"]

_ORDINAL = re.compile(r"-(\d+)$")
RANK_LABEL = "regency.dev/rank"


def _client(kubeconfig: str | None) -> Any:
    """The ``kubernetes.client`` module with a configuration loaded, or a JobError."""
    try:
        k8s = importlib.import_module("kubernetes")
    except ImportError:
        raise JobError("KubernetesJob needs the kubernetes package: "
                       "pip install 'regency[kubernetes]'") from None
    where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    if kubeconfig is not None and not os.path.isfile(os.path.expanduser(kubeconfig)):
        raise JobError(f"KubernetesJob: kubeconfig {kubeconfig!r} is not a file")
    try:
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            k8s.config.load_incluster_config()
        else:
            k8s.config.load_kube_config(config_file=kubeconfig)
    except Exception as exc:
        raise JobError(f"KubernetesJob: cannot load the kubeconfig {where}: {exc}. Pass "
                       "kubeconfig=PATH or set KUBECONFIG to a working one") from None
    return k8s.client


def _server(client: Any) -> str:
    try:
        return str(client.Configuration.get_default_copy().host)
    except Exception:  # noqa: BLE001 - only for a message
        return "(unknown)"


def _call(job: str, client: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``; a failure to reach the API server becomes a JobError."""
    try:
        return fn(*args, **kwargs)
    except client.exceptions.ApiException:
        raise
    except Exception as exc:
        raise JobError(f"KubernetesJob {job}: cannot reach the Kubernetes API server at "
                       f"{_server(client)}: {type(exc).__name__}: {exc}. Check the server "
                       "of your kubeconfig and that it is reachable from here") from None


class KubernetesJob(JobTrait):
    """Worker hosts as Kubernetes pods (Monarch's KubernetesJob).

    Example::

        from regency.job import KubernetesJob

        job = KubernetesJob(namespace="training")
        job.add_mesh("trainers", 4, image_spec="ghcr.io/me/regency:latest")  # provisioned
        job.add_mesh("judges", 2, label_selector="app=judge")                 # attached
        state = job.state()
        procs = state.trainers.spawn_procs(per_host={"gpus": 8})

    Args:
        namespace: the namespace of every mesh.
        timeout: seconds to wait for the pods to run (default 300).
        kubeconfig: the kubeconfig file (default ``$KUBECONFIG``, ``~/.kube/config`` or the
            in-cluster service account).
        attach_to: not supported (Monarch's gateway through a worker); must be None.
        name: the job's name in the job cache; also prefixes provisioned objects.
    """

    kind = "kubernetes"

    def __init__(self, namespace: str = "default", timeout: float | None = None,
                 kubeconfig: str | None = None, attach_to: str | None = None, *,
                 name: str = "kubernetes", cache_dir: str | os.PathLike[str] | None = None
                 ) -> None:
        if attach_to is not None:
            raise ValueError("KubernetesJob(attach_to=...): regency has no gateway worker; "
                             "run the controller where it reaches the pod IPs (in the "
                             "cluster, or through a VPN)")
        super().__init__(name=name, cache_dir=cache_dir)
        self.namespace = namespace
        self.timeout = 300.0 if timeout is None else float(timeout)
        self.kubeconfig = kubeconfig
        self.meshes: dict[str, dict[str, Any]] = {}

    def add_mesh(self, name: str, num_replicas: int, label_selector: str | None = None,
                 pod_rank_label: str = RANK_LABEL,
                 image_spec: str | Mapping[str, Any] | None = None,
                 pod_template: Any = None, port: int = 26600,
                 labels: Mapping[str, str] | None = None,
                 annotations: Mapping[str, str] | None = None) -> None:
        """Add a mesh of ``num_replicas`` pods: attached by ``label_selector`` or provisioned
        from ``image_spec`` (an image name, or ``{"image": ..., "resources": {...},
        "env": {...}, "python": ...}``)."""
        if not name.isidentifier():
            raise ValueError(f"mesh name {name!r} must be a Python identifier")
        if num_replicas < 1:
            raise ValueError(f"mesh {name!r}: num_replicas must be at least 1")
        if pod_template is not None:
            raise ValueError(f"mesh {name!r}: pod_template is not supported; give image_spec, "
                             "or create the pods yourself and attach with label_selector")
        if (label_selector is None) == (image_spec is None):
            raise ValueError(f"mesh {name!r}: give exactly one of label_selector (attach to "
                             "running pods) and image_spec (create them)")
        image = {"image": image_spec} if isinstance(image_spec, str) else \
            dict(image_spec) if image_spec is not None else None
        obj = f"{self.name}-{name}".lower().replace("_", "-").replace(".", "-")
        self.meshes[name] = {"replicas": int(num_replicas), "selector": label_selector,
                             "rank_label": pod_rank_label, "image": image, "port": int(port),
                             "labels": dict(labels or {}), "annotations": dict(annotations or {}),
                             "object": obj}
        if self.mesh_name not in self.meshes:
            self.mesh_name = next(iter(self.meshes))

    def _spec(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "kubeconfig": self.kubeconfig,
                "meshes": self.meshes}

    def _mesh_names(self) -> list[str]:
        return list(self.meshes)

    def _preflight(self) -> None:
        if not self.meshes:
            raise JobError(f"KubernetesJob {self.name}: no meshes; call add_mesh() first")
        attached = [n for n, m in self.meshes.items() if m["image"] is None]
        if attached and env_secret() is None:
            raise JobError(f"KubernetesJob {self.name}: the pods of mesh(es) {attached} run "
                           "already, so they must share the job secret: set REGENCY_SECRET "
                           "(or REGENCY_SECRET_FILE) to the secret their workers have")
        _client(self.kubeconfig)

    def _launch(self, env: dict[str, str], secret: str) -> dict[str, Any]:
        self._preflight()
        client = _client(self.kubeconfig)
        for mesh, m in self.meshes.items():
            if m["image"] is not None:
                self._provision(client, mesh, m, secret)
        deadline = time.monotonic() + self.timeout
        workers: list[dict[str, Any]] = []
        for mesh, m in self.meshes.items():
            workers += self._await_pods(client, mesh, m, deadline)
        return {"workers": workers, "namespace": self.namespace, "kubeconfig": self.kubeconfig,
                "provisioned": [m["object"] for m in self.meshes.values() if m["image"]]}

    def _provision(self, client: Any, mesh: str, m: dict[str, Any], secret: str) -> None:
        image = m["image"]
        if "image" not in image:
            raise ValueError(f"mesh {mesh!r}: image_spec needs an 'image'")
        objs = kubernetes_objects(m["object"], m["replicas"], image["image"], m["port"],
                                  namespace=self.namespace, python=image.get("python", "python"),
                                  secret_value=secret, resources=image.get("resources"),
                                  env=image.get("env"), labels=m["labels"],
                                  annotations=m["annotations"])
        core, apps = client.CoreV1Api(), client.AppsV1Api()
        for obj in objs:
            api, what = (apps, "stateful_set") if obj["kind"] == "StatefulSet" else (
                core, obj["kind"].lower())
            name = obj["metadata"]["name"]
            try:
                _call(self.name, client, getattr(api, f"create_namespaced_{what}"),
                      self.namespace, obj)
            except client.exceptions.ApiException as exc:
                if exc.status != 409:
                    raise JobError(f"KubernetesJob {self.name}: cannot create {obj['kind']} "
                                   f"{self.namespace}/{name}: {exc.status} {exc.reason}"
                                   ) from None
                _call(self.name, client, getattr(api, f"replace_namespaced_{what}"), name,
                      self.namespace, obj)

    def _await_pods(self, client: Any, mesh: str, m: dict[str, Any],
                    deadline: float) -> list[dict[str, Any]]:
        selector = m["selector"] or (f"app.kubernetes.io/name=regency-worker,"
                                     f"app.kubernetes.io/instance={m['object']}")
        core = client.CoreV1Api()
        delay, seen = 0.5, 0
        while True:
            try:
                pods = _call(self.name, client, core.list_namespaced_pod, self.namespace,
                             label_selector=selector).items
            except client.exceptions.ApiException as exc:
                raise JobError(f"KubernetesJob {self.name}: cannot list the pods of mesh "
                               f"{mesh!r} ({selector!r} in namespace {self.namespace!r}): "
                               f"{exc.status} {exc.reason}") from None
            ready = [p for p in pods if p.status.phase == "Running" and p.status.pod_ip]
            seen = len(pods)
            if len(ready) >= m["replicas"]:
                ready.sort(key=lambda p: _rank(p, m["rank_label"]))
                return [{"addr": f"tcp://{p.status.pod_ip}:{m['port']}", "mesh": mesh,
                         "pod": p.metadata.name, "uid": p.metadata.uid}
                        for p in ready[:m["replicas"]]]
            if time.monotonic() > deadline:
                raise JobError(f"KubernetesJob {self.name}: mesh {mesh!r} wants "
                               f"{m['replicas']} running pods matching {selector!r} in "
                               f"namespace {self.namespace!r}; after {self.timeout:.0f}s "
                               f"{len(ready)} run (of {seen} found)")
            time.sleep(delay)
            delay = min(delay * 2, 5.0)

    @classmethod
    def _alive(cls, recorded: dict[str, Any]) -> bool:
        core = _client(recorded.get("kubeconfig")).CoreV1Api()
        for w in recorded["workers"]:
            try:
                pod = core.read_namespaced_pod(w["pod"], recorded["namespace"])
            except Exception:  # noqa: BLE001 - a pod we cannot read is not alive to us
                return False
            if pod.metadata.uid != w["uid"] or pod.status.phase != "Running":
                return False
        return True

    @classmethod
    def _kill(cls, recorded: dict[str, Any]) -> None:
        provisioned = recorded.get("provisioned") or []
        if not provisioned:
            return
        client = _client(recorded.get("kubeconfig"))
        core, apps, ns = client.CoreV1Api(), client.AppsV1Api(), recorded["namespace"]
        for obj in provisioned:
            for delete, what in ((apps.delete_namespaced_stateful_set, obj),
                                 (core.delete_namespaced_service, obj),
                                 (core.delete_namespaced_secret, f"{obj}-secret")):
                try:
                    delete(what, ns)
                except client.exceptions.ApiException as exc:
                    if exc.status != 404:
                        raise JobError(f"cannot delete {ns}/{obj}: {exc.status} {exc.reason}"
                                       ) from None


def _rank(pod: Any, label: str) -> tuple[int, str]:
    labels = pod.metadata.labels or {}
    if str(labels.get(label, "")).isdigit():
        return int(labels[label]), pod.metadata.name
    m = _ORDINAL.search(pod.metadata.name or "")
    return (int(m.group(1)) if m else 1 << 30), pod.metadata.name
