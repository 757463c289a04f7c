"""A small Kubernetes API server for tests: real HTTP, just what ``KubernetesJob`` calls.

It serves the official ``kubernetes`` client (pointed at it by a kubeconfig this module
writes) the calls ``KubernetesJob`` makes: pods (create, list with a label selector, read),
secrets and services (create, replace, delete) and StatefulSets (create, replace, delete).
Objects live in memory, keyed by kind, namespace and name; a second create answers 409, a
missing object 404, as the real API server does.

It also stands in for the controllers and the kubelet, so that pods really run: a
StatefulSet gets its pods ``NAME-0..N-1`` (labels from its template), and every pod's first
container is started as a local process with the pod's environment (``$(VAR)`` expanded,
``fieldRef`` to ``status.podIP``/``metadata.name`` and ``secretKeyRef`` to a stored Secret
resolved). Each pod gets its own loopback address (``127.0.0.2``, ``127.0.0.3``...) as its
IP; since pods would each have a network namespace, a command that binds ``0.0.0.0`` binds
the pod's IP instead. A pod is ``Running`` once its process started; deleting the pod (or its
StatefulSet) stops the process (SIGTERM, then SIGKILL). An image named ``never-ready`` makes
pods that stay ``Pending``.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import signal
import subprocess
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

_CORE = re.compile(r"^/api/v1/namespaces/([^/]+)/(pods|secrets|services)(?:/([^/]+))?$")
_APPS = re.compile(r"^/apis/apps/v1/namespaces/([^/]+)/(statefulsets)(?:/([^/]+))?$")
_KINDS = {"pods": "Pod", "secrets": "Secret", "services": "Service",
          "statefulsets": "StatefulSet"}


def selector_matches(selector: str, labels: dict[str, str]) -> bool:
    """Whether ``labels`` satisfy a label selector (``k=v``, ``k==v``, ``k!=v``, ``k``)."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key.strip()) != value.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


class FakeKubernetes:
    """The API server (``url``), its objects, and the pod processes it started."""

    def __init__(self, log_dir: Path) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.procs: dict[tuple[str, str], subprocess.Popen[bytes]] = {}
        self.log_dir = log_dir
        self.lock = threading.RLock()
        self.next_ip = 2
        self.requests: list[tuple[str, str]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    # -- the kubeconfig -------------------------------------------------------------------------
    def kubeconfig(self, path: Path, server: str | None = None) -> Path:
        """Write a kubeconfig for this server (or ``server``) at ``path``."""
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": server or self.url}}],
            "users": [{"name": "tester", "user": {"token": "fake-token"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tester"}}],
        }))
        return path

    # -- objects --------------------------------------------------------------------------------
    def create(self, kind: str, ns: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        name = body.get("metadata", {}).get("name")
        if not name:
            return 422, _status(422, "Invalid", "metadata.name is required")
        with self.lock:
            if (kind, ns, name) in self.objects:
                return 409, _status(409, "AlreadyExists", f'{kind} "{name}" already exists')
            obj = self._stored(kind, ns, body)
            self.objects[(kind, ns, name)] = obj
            if kind == "StatefulSet":
                self._reconcile(ns, obj)
            elif kind == "Pod":
                self._run_pod(ns, obj)
            return 201, copy.deepcopy(obj)

    def replace(self, kind: str, ns: str, name: str, body: dict[str, Any]
                ) -> tuple[int, dict[str, Any]]:
        with self.lock:
            if (kind, ns, name) not in self.objects:
                return 404, _status(404, "NotFound", f'{kind} "{name}" not found')
            obj = self._stored(kind, ns, body)
            self.objects[(kind, ns, name)] = obj
            if kind == "StatefulSet":
                self._reconcile(ns, obj)
            return 200, copy.deepcopy(obj)

    def delete(self, kind: str, ns: str, name: str) -> tuple[int, dict[str, Any]]:
        with self.lock:
            obj = self.objects.pop((kind, ns, name), None)
            if obj is None:
                return 404, _status(404, "NotFound", f'{kind} "{name}" not found')
            if kind == "StatefulSet":
                for pod in self._owned(ns, name):
                    self.delete("Pod", ns, pod)
            elif kind == "Pod":
                self._stop_pod(ns, name)
        if kind in ("Pod", "Service"):  # as the real API: the object deleted, else a Status
            return 200, copy.deepcopy(obj)
        return 200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}

    def get(self, kind: str, ns: str, name: str) -> tuple[int, dict[str, Any]]:
        with self.lock:
            obj = self.objects.get((kind, ns, name))
            if obj is None:
                return 404, _status(404, "NotFound", f'{kind} "{name}" not found')
            return 200, copy.deepcopy(obj)

    def list(self, kind: str, ns: str, selector: str) -> dict[str, Any]:
        with self.lock:
            items = [copy.deepcopy(o) for (k, n, _), o in sorted(self.objects.items())
                     if k == kind and n == ns and
                     selector_matches(selector, o["metadata"].get("labels") or {})]
        return {"apiVersion": "v1", "kind": f"{kind}List", "metadata": {"resourceVersion": "1"},
                "items": items}

    def _stored(self, kind: str, ns: str, body: dict[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(body)
        obj.setdefault("apiVersion", "apps/v1" if kind == "StatefulSet" else "v1")
        obj["kind"] = kind
        meta = obj.setdefault("metadata", {})
        meta["namespace"] = ns
        meta.setdefault("uid", str(uuid.uuid4()))
        if kind == "Secret" and "stringData" in obj:
            obj["data"] = {k: base64.b64encode(v.encode()).decode()
                           for k, v in obj.pop("stringData").items()}
        return obj

    def _owned(self, ns: str, sts: str) -> list[str]:
        return [name for (k, n, name), o in self.objects.items() if k == "Pod" and n == ns
                and o["metadata"].get("annotations", {}).get("fake/owner") == sts]

    def _reconcile(self, ns: str, sts: dict[str, Any]) -> None:
        """The StatefulSet controller: pods NAME-0..N-1 from the template."""
        name = sts["metadata"]["name"]
        spec = sts["spec"]
        for i in range(int(spec["replicas"])):
            pod_name = f"{name}-{i}"
            if ("Pod", ns, pod_name) in self.objects:
                continue
            template = copy.deepcopy(spec["template"])
            meta = template.get("metadata", {})
            annotations = {**meta.get("annotations", {}), "fake/owner": name}
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": pod_name, "labels": meta.get("labels", {}),
                                "annotations": annotations},
                   "spec": template["spec"]}
            self.create("Pod", ns, pod)

    # -- the kubelet ----------------------------------------------------------------------------
    def _run_pod(self, ns: str, pod: dict[str, Any]) -> None:
        container = pod["spec"]["containers"][0]
        pod["status"] = {"phase": "Pending"}
        if container.get("image") == "never-ready":
            return
        ip = f"127.0.0.{self.next_ip}"
        self.next_ip += 1
        env = {k: v for k, v in os.environ.items() if not k.startswith("REGENCY_")
               or k == "REGENCY_TEST_SESSION_TAG"}
        for item in container.get("env", []):
            env[item["name"]] = self._env_value(ns, pod, ip, item)
        argv = [_expand(a, env).replace("tcp://0.0.0.0:", f"tcp://{ip}:")
                for a in container.get("command", []) + container.get("args", [])]
        if argv and argv[0] == "python":
            argv[0] = sys.executable
        name = pod["metadata"]["name"]
        log = open(self.log_dir / f"{ns}-{name}.log", "wb")  # noqa: SIM115 - the pod's life
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.procs[(ns, name)] = proc
        pod["status"] = {"phase": "Running", "podIP": ip, "hostIP": "127.0.0.1"}

    def _env_value(self, ns: str, pod: dict[str, Any], ip: str, item: dict[str, Any]) -> str:
        if "value" in item:
            return str(item["value"])
        source = item.get("valueFrom", {})
        if "fieldRef" in source:
            field = source["fieldRef"]["fieldPath"]
            return {"status.podIP": ip, "metadata.name": pod["metadata"]["name"],
                    "metadata.namespace": ns}[field]
        ref = source["secretKeyRef"]
        secret = self.objects[("Secret", ns, ref["name"])]
        return base64.b64decode(secret["data"][ref["key"]]).decode()

    def _stop_pod(self, ns: str, name: str) -> None:
        proc = self.procs.pop((ns, name), None)
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def pod_pids(self) -> list[int]:
        """The pids of the pod processes started so far (running or not)."""
        return [p.pid for p in self.procs.values()]

    def close(self) -> None:
        """Stop every pod process and the server."""
        with self.lock:
            for ns, name in list(self.procs):
                self._stop_pod(ns, name)
        self.server.shutdown()
        self.server.server_close()


def _expand(text: str, env: dict[str, str]) -> str:
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)),
                  text)


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


def _handler(api: FakeKubernetes) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

        def _route(self) -> tuple[str, str, str | None, dict[str, list[str]]] | None:
            url = urlparse(self.path)
            m = _CORE.match(url.path) or _APPS.match(url.path)
            if m is None:
                return None
            return _KINDS[m.group(2)], m.group(1), m.group(3), parse_qs(url.query)

        def _send(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> dict[str, Any]:
            n = int(self.headers.get("Content-Length") or 0)
            return dict(json.loads(self.rfile.read(n) or b"{}"))

        def _serve(self, method: str) -> None:
            api.requests.append((method, self.path))
            if self.headers.get("Authorization") != "Bearer fake-token":
                self._send(401, _status(401, "Unauthorized", "no or wrong token"))
                return
            route = self._route()
            if route is None:
                self._send(404, _status(404, "NotFound", f"no route {self.path}"))
                return
            kind, ns, name, query = route
            if method == "GET" and name is None:
                self._send(200, api.list(kind, ns, query.get("labelSelector", [""])[0]))
            elif method == "GET":
                self._send(*api.get(kind, ns, name or ""))
            elif method == "POST" and name is None:
                self._send(*api.create(kind, ns, self._body()))
            elif method == "PUT" and name is not None:
                self._send(*api.replace(kind, ns, name, self._body()))
            elif method == "DELETE" and name is not None:
                self._send(*api.delete(kind, ns, name))
            else:
                self._send(405, _status(405, "MethodNotAllowed", f"{method} {self.path}"))

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_PUT(self) -> None:
            self._serve("PUT")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

    return Handler
