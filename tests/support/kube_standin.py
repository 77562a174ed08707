#!/usr/bin/env python3
"""A stand-in for the part of the Kubernetes API server (core/v1) that sandboxd's kubernetes
backend uses, for machines where no kube-apiserver can run. It is a test double, so
its fidelity is checked by real clients, never by ours: tests/kubernetes drives it with kubectl
and with the official Python client (python3-kubernetes). Where a real client disagrees with
it, it is wrong.

What it keeps to, as the API server does:
  - discovery: /version, /api, /apis, /api/v1 (what kubectl asks before anything else);
  - discovery of networking.k8s.io/v1 too: /apis, /apis/networking.k8s.io,
    /apis/networking.k8s.io/v1 (issue 33: NetworkPolicies, validated as the API server does:
    spec.podSelector is required, policyTypes are Ingress or Egress);
  - pods, services and namespaces in core/v1, networkpolicies in networking.k8s.io/v1 (what a
    pod owns of them is collected with it): create (409 AlreadyExists), get, list, replace
    (409 Conflict on a stale metadata.resourceVersion), delete (the deleted object; 404
    NotFound) with uid, resourceVersion, creationTimestamp filled in;
  - lists: labelSelector (=, ==, !=, in, notin, key, !key), fieldSelector metadata.name,
    limit/continue paging with metadata.continue and remainingItemCount;
  - watches (?watch=true on a list): one JSON event per line, chunked (ADDED, MODIFIED, DELETED
    from a resourceVersion; the objects there now as ADDED without one; an ERROR event holding
    410 Expired for a version older than the 10,000 events kept), until timeoutSeconds.
    With --forbid-watch a watch is 403 Forbidden, as for a Role without the watch verb;
  - errors as Status objects with reason and code;
  - ownerReference garbage collection: the objects a pod owns go when the pod is gone;
  - graceful pod deletion (with --kubelet-stop-seconds S > 0): deleting a pod that is on a node
    and not finished marks it terminating (metadata.deletionTimestamp, now + its grace period,
    and deletionGracePeriodSeconds; the grace period is DeleteOptions.gracePeriodSeconds, else
    spec.terminationGracePeriodSeconds, else 30) and keeps it, its name taken (a create is 409
    AlreadyExists), its Ready condition as it was, for min(S, grace) seconds, as the API server
    keeps a pod until its kubelet has stopped the containers; a grace period of 0, an
    unscheduled pod and a finished one go at once, as does every pod with S = 0 (the default);
  - bearer tokens (`--token T`, repeatable); an unknown or expired one is 401.

What a test drives through /_standin/ (not part of the Kubernetes API):
  POST /_standin/pods/{ns}/{name}   {"phase": "Running", "ready": true} or
                                    {"waiting": "ImagePullBackOff", "message": "..."} or
                                    {"unschedulable": "0/1 nodes are available: ..."}
  POST /_standin/quota              {"pods": N}: creating pod N+1 is 403 (exceeded quota)
  POST /_standin/tokens/expire      {"token": "T"}: T is answered 401 from now on
  POST /_standin/tokens             {"token": "T"}: T is accepted from now on
  GET  /_standin/requests           the requests served so far (method, path, query)

With --serve-pods, a NodePort service is backed by a real process: `busybox httpd` on
127.0.0.1:{nodePort} answering GET /v1/sandbox, started when the service is created and stopped
when it is deleted (or collected with its pod), so a backend's readiness probe and its users
reach something real through the node port, as they would on a one-node cluster.

Not served: OpenAPI documents (kubectl runs with --validate=false) and tables (kubectl then
prints NAME and AGE only).

Usage: kube_standin.py [--port N] [--token T]... [--pods-start ready|pending] [--tls-dir DIR]
                       [--serve-pods DIR] [--kubelet-stop-seconds S] [--forbid-watch]
With --tls-dir it serves HTTPS with a certificate for 127.0.0.1 signed by DIR/ca.crt (made
there with openssl when missing): clients send bearer tokens only over TLS.
Prints one line `listening http(s)://127.0.0.1:PORT` once it serves.
"""

from __future__ import annotations

import argparse
import base64
import copy
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

RESOURCES = {"pods": "Pod", "services": "Service", "networkpolicies": "NetworkPolicy"}
API_VERSIONS = {"pods": "v1", "services": "v1", "networkpolicies": "networking.k8s.io/v1"}
# Where each resource lives: core/v1 under /api/v1, the others under /apis/GROUP/VERSION.
API_PREFIXES = {"pods": "/api/v1", "services": "/api/v1",
                "networkpolicies": "/apis/networking.k8s.io/v1"}
GIT_VERSION = "v1.28.0-sandboxd-standin"


def now(after_seconds: float = 0) -> str:
    moment = datetime.now(timezone.utc) + timedelta(seconds=after_seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def status(code: int, reason: str, message: str, name: str | None = None,
           kind: str | None = None, group: str | None = None,
           causes: list[dict] | None = None) -> dict:
    answer = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
              "message": message, "reason": reason, "code": code}
    if name is not None or kind is not None:
        answer["details"] = {k: v for k, v in (("name", name), ("group", group), ("kind", kind),
                                               ("causes", causes)) if v is not None}
    return answer


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, name: str | None = None,
                 kind: str | None = None, group: str | None = None,
                 causes: list[dict] | None = None) -> None:
        super().__init__(message)
        self.body = status(code, reason, message, name, kind, group, causes)
        self.code = code


# ── label selectors (k8s.io/apimachinery/pkg/labels) ─────────────────────────────────────────

_REQUIREMENT = re.compile(
    r"\s*(?P<neg>!)?\s*(?P<key>[A-Za-z0-9._/-]+)\s*"
    r"(?:(?P<op>==|=|!=)\s*(?P<value>[A-Za-z0-9._-]*)"
    r"|\s+(?P<setop>in|notin)\s*\((?P<values>[^)]*)\))?\s*$")


def _split_requirements(selector: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current)
    return parts


def label_matcher(selector: str):
    tests = []
    for text in _split_requirements(selector):
        m = _REQUIREMENT.match(text)
        if not m or (m.group("neg") and (m.group("op") or m.group("setop"))):
            raise ApiError(400, "BadRequest", f"unable to parse requirement: {text.strip()!r}")
        key = m.group("key")
        if m.group("neg"):
            tests.append(lambda labels, key=key: key not in labels)
        elif m.group("op") in ("=", "=="):
            tests.append(lambda labels, key=key, v=m.group("value"): labels.get(key) == v)
        elif m.group("op") == "!=":
            tests.append(lambda labels, key=key, v=m.group("value"): labels.get(key) != v)
        elif m.group("setop"):
            values = {v.strip() for v in m.group("values").split(",") if v.strip()}
            if m.group("setop") == "in":
                tests.append(lambda labels, key=key, vs=values: labels.get(key) in vs)
            else:
                tests.append(lambda labels, key=key, vs=values: labels.get(key) not in vs)
        else:
            tests.append(lambda labels, key=key: key in labels)
    return lambda labels: all(test(labels) for test in tests)


def field_matcher(selector: str):
    tests = []
    for text in filter(None, (t.strip() for t in selector.split(","))):
        m = re.match(r"^([A-Za-z.]+)\s*(==|=|!=)\s*(.*)$", text)
        if not m or m.group(1) not in ("metadata.name", "metadata.namespace"):
            raise ApiError(400, "BadRequest", f"field label not supported: {text}")
        field = m.group(1).split(".")[1]
        want, negate = m.group(3), m.group(2) == "!="
        tests.append(lambda obj, f=field, w=want, n=negate:
                     (obj["metadata"].get(f) == w) != n)
    return lambda obj: all(test(obj) for test in tests)


# ── the objects ──────────────────────────────────────────────────────────────────────────────

class Store:
    def __init__(self, pods_start: str) -> None:
        self.lock = threading.Lock()
        self.objects: dict[tuple[str, str, str], dict] = {}  # (resource, namespace, name)
        self.version = 1000
        self.pods_start = pods_start
        self.pod_quota: int | None = None
        self.next_ip = 10
        self.next_node_port = 30000 + os.getpid() % 2000  # apart from a concurrent stand-in
        self.serve_pods: str | None = None  # a directory: NodePort services get a real httpd
        self.httpds: dict[tuple[str, str], subprocess.Popen] = {}
        self.kubelet_stop_seconds = 0.0  # how long a gracefully deleted pod stays terminating
        self.events: deque = deque(maxlen=10000)  # (version, type, resource, namespace, object)
        self.changed = threading.Condition(self.lock)  # an event was recorded

    def bump(self) -> str:
        self.version += 1
        return str(self.version)

    def create(self, resource: str, namespace: str, body: dict) -> dict:
        kind = RESOURCES[resource]
        if not isinstance(body, dict) or body.get("kind", kind) != kind:
            raise ApiError(400, "BadRequest", f"the body is not a {kind}")
        meta = body.setdefault("metadata", {})
        name = meta.get("name")
        if not name and meta.get("generateName"):
            name = meta["generateName"] + uuid.uuid4().hex[:5]
            meta["name"] = name
        if not name or not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name) or len(name) > 253:
            raise ApiError(422, "Invalid", f'{kind} "{name}" is invalid: metadata.name: Invalid '
                           "value: a lowercase RFC 1123 subdomain must consist of lower case "
                           "alphanumeric characters, '-' or '.'", name, resource)
        with self.lock:
            if (resource, namespace, name) in self.objects:
                raise ApiError(409, "AlreadyExists", f'{resource} "{name}" already exists',
                               name, resource)
            if resource == "pods" and self.pod_quota is not None:
                used = sum(1 for (r, ns, _) in self.objects if r == "pods" and ns == namespace)
                if used >= self.pod_quota:
                    raise ApiError(
                        403, "Forbidden",
                        f'pods "{name}" is forbidden: exceeded quota: sandbox-quota, requested: '
                        f"pods=1, used: pods={used}, limited: pods={self.pod_quota}",
                        name, resource)
            body["apiVersion"] = API_VERSIONS[resource]
            body["kind"] = kind
            if resource == "networkpolicies":
                self._validate_network_policy(body)
            meta.update(namespace=namespace, uid=str(uuid.uuid4()),
                        resourceVersion=self.bump(), creationTimestamp=now())
            meta.setdefault("labels", {})
            if resource == "pods":
                self._initial_pod_status(body)
            elif resource == "services":
                self._allocate_service(body)
                self._start_httpd(namespace, body)
            self.objects[(resource, namespace, name)] = body
            self._record("ADDED", resource, namespace, body)
            return copy.deepcopy(body)

    @staticmethod
    def _validate_network_policy(policy: dict) -> None:
        name = policy["metadata"]["name"]
        spec = policy.get("spec")
        if not isinstance(spec, dict) or not isinstance(spec.get("podSelector"), dict):
            raise ApiError(422, "Invalid", f'NetworkPolicy.networking.k8s.io "{name}" is invalid: '
                           "spec.podSelector: Required value", name, "NetworkPolicy",
                           "networking.k8s.io", [{"reason": "FieldValueRequired",
                                                  "message": "Required value",
                                                  "field": "spec.podSelector"}])
        for kind in spec.get("policyTypes") or []:
            if kind not in ("Ingress", "Egress"):
                raise ApiError(422, "Invalid", f'NetworkPolicy.networking.k8s.io "{name}" is '
                               f'invalid: spec.policyTypes: Unsupported value: "{kind}": supported '
                               'values: "Egress", "Ingress"', name, "NetworkPolicy",
                               "networking.k8s.io",
                               [{"reason": "FieldValueNotSupported",
                                 "message": f'Unsupported value: "{kind}": supported values: '
                                            '"Egress", "Ingress"',
                                 "field": "spec.policyTypes"}])

    def _initial_pod_status(self, pod: dict) -> None:
        spec = pod.setdefault("spec", {})
        if not spec.get("containers"):
            raise ApiError(422, "Invalid", f'Pod "{pod["metadata"]["name"]}" is invalid: '
                           "spec.containers: Required value", pod["metadata"]["name"], "pods")
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("nodeName", "standin-node")
        self.next_ip += 1
        pod["status"] = {"phase": "Pending", "qosClass": "Burstable",
                         "hostIP": "192.0.2.1", "podIP": f"192.0.2.{self.next_ip % 250 + 2}"}
        self._set_pod_state(pod, {"phase": "Running", "ready": True}
                            if self.pods_start == "ready" else {"phase": "Pending"})

    def _set_pod_state(self, pod: dict, state: dict) -> None:
        st = pod["status"]
        ready = bool(state.get("ready"))
        st["phase"] = state.get("phase", st.get("phase", "Pending"))
        st["startTime"] = st.get("startTime") or now()
        conditions = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": now()}]
        if state.get("unschedulable"):
            st["phase"] = "Pending"
            pod["spec"].pop("nodeName", None)
            conditions = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                           "message": state["unschedulable"], "lastTransitionTime": now()}]
        for kind in ("Initialized", "ContainersReady", "Ready"):
            conditions.append({"type": kind, "status": "True" if ready or kind == "Initialized"
                               else "False", "lastTransitionTime": now()})
        st["conditions"] = conditions if not state.get("unschedulable") else conditions[:1]
        statuses = []
        for container in pod["spec"]["containers"]:
            entry = {"name": container.get("name", ""), "image": container.get("image", ""),
                     "imageID": "", "ready": ready, "restartCount": int(state.get("restarts", 0)),
                     "started": ready}
            if state.get("waiting"):
                entry["state"] = {"waiting": {"reason": state["waiting"],
                                              "message": state.get("message", "")}}
            elif st["phase"] == "Running":
                entry["state"] = {"running": {"startedAt": now()}}
                entry["imageID"] = "docker-pullable://" + container.get("image", "")
            else:
                entry["state"] = {"waiting": {"reason": "ContainerCreating"}}
            statuses.append(entry)
        if not state.get("unschedulable"):
            st["containerStatuses"] = statuses
        else:
            st.pop("containerStatuses", None)

    def _allocate_service(self, service: dict) -> None:
        spec = service.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        self.next_ip += 1
        spec.setdefault("clusterIP", f"198.51.100.{self.next_ip % 250 + 2}")
        spec["clusterIPs"] = [spec["clusterIP"]]
        for port in spec.get("ports", []):
            if "port" not in port:
                raise ApiError(422, "Invalid", "spec.ports[].port: Required value")
            port.setdefault("protocol", "TCP")
            port.setdefault("targetPort", port["port"])
            if spec["type"] == "NodePort" and "nodePort" not in port:
                port["nodePort"] = self._free_node_port()
        service["status"] = {"loadBalancer": {}}

    def _free_node_port(self) -> int:
        for _ in range(2768):
            self.next_node_port = 30000 + (self.next_node_port - 30000 + 1) % 2768
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", self.next_node_port))
                except OSError:
                    continue
            return self.next_node_port
        raise ApiError(500, "InternalError", "no free node port in 30000-32767")

    def _start_httpd(self, namespace: str, service: dict) -> None:
        ports = service["spec"].get("ports", [])
        if not self.serve_pods or service["spec"]["type"] != "NodePort" or not ports:
            return
        root = os.path.join(self.serve_pods, "www")
        os.makedirs(os.path.join(root, "v1"), exist_ok=True)
        with open(os.path.join(root, "v1", "sandbox"), "w") as f:
            f.write('{"standin": true}\n')
        self.httpds[(namespace, service["metadata"]["name"])] = subprocess.Popen(
            ["busybox", "httpd", "-f", "-p", f"127.0.0.1:{ports[0]['nodePort']}", "-h", root])

    def _stop_httpd(self, namespace: str, name: str) -> None:
        process = self.httpds.pop((namespace, name), None)
        if process is not None:
            process.terminate()
            process.wait(timeout=10)

    def stop_all(self) -> None:
        for key in list(self.httpds):
            self._stop_httpd(*key)

    def get(self, resource: str, namespace: str, name: str) -> dict:
        with self.lock:
            obj = self.objects.get((resource, namespace, name))
            if obj is None:
                raise ApiError(404, "NotFound", f'{resource} "{name}" not found', name, resource)
            return copy.deepcopy(obj)

    def replace(self, resource: str, namespace: str, name: str, body: dict) -> dict:
        with self.lock:
            current = self.objects.get((resource, namespace, name))
            if current is None:
                raise ApiError(404, "NotFound", f'{resource} "{name}" not found', name, resource)
            given = body.get("metadata", {}).get("resourceVersion")
            if given and given != current["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict",
                               f'Operation cannot be fulfilled on {resource} "{name}": the object '
                               "has been modified; please apply your changes to the latest "
                               "version and try again", name, resource)
            meta = body.setdefault("metadata", {})
            for key in ("uid", "creationTimestamp", "namespace", "name"):
                meta[key] = current["metadata"][key]
            meta["resourceVersion"] = self.bump()
            body["status"] = current.get("status", {})
            body["apiVersion"], body["kind"] = API_VERSIONS[resource], RESOURCES[resource]
            self.objects[(resource, namespace, name)] = body
            self._record("MODIFIED", resource, namespace, body)
            return copy.deepcopy(body)

    def delete(self, resource: str, namespace: str, name: str, options: dict) -> dict:
        with self.lock:
            obj = self.objects.get((resource, namespace, name))
            if obj is None:
                raise ApiError(404, "NotFound", f'{resource} "{name}" not found', name, resource)
            if resource == "pods":
                meta = obj["metadata"]
                if meta.get("deletionTimestamp"):
                    return copy.deepcopy(obj)  # already terminating: answered as it is
                grace = options.get("gracePeriodSeconds")
                if grace is None:
                    grace = obj["spec"].get("terminationGracePeriodSeconds", 30)
                grace = int(grace)
                on_node = bool(obj["spec"].get("nodeName"))
                finished = obj["status"].get("phase") in ("Succeeded", "Failed")
                if grace > 0 and on_node and not finished and self.kubelet_stop_seconds > 0:
                    meta["deletionTimestamp"] = now(grace)
                    meta["deletionGracePeriodSeconds"] = grace
                    meta["resourceVersion"] = self.bump()
                    self._record("MODIFIED", resource, namespace, obj)
                    kubelet = threading.Timer(min(grace, self.kubelet_stop_seconds),
                                              self._kubelet_stopped,
                                              (namespace, name, meta["uid"]))
                    kubelet.daemon = True
                    kubelet.start()
                    return copy.deepcopy(obj)
            return self._remove(resource, namespace, name)

    def _kubelet_stopped(self, namespace: str, name: str, uid: str) -> None:
        with self.lock:
            pod = self.objects.get(("pods", namespace, name))
            if pod is not None and pod["metadata"]["uid"] == uid:
                self._remove("pods", namespace, name)

    def _remove(self, resource: str, namespace: str, name: str) -> dict:
        """Drops the object, and what it owns (background propagation); the lock is held."""
        obj = self.objects.pop((resource, namespace, name))
        if resource == "services":
            self._stop_httpd(namespace, name)
        obj["metadata"].setdefault("deletionTimestamp", now())
        obj["metadata"]["resourceVersion"] = self.bump()
        self._record("DELETED", resource, namespace, obj)
        uid = obj["metadata"]["uid"]
        for key, other in list(self.objects.items()):
            owners = other["metadata"].get("ownerReferences") or []
            if any(o.get("uid") == uid for o in owners):
                del self.objects[key]
                if key[0] == "services":
                    self._stop_httpd(key[1], key[2])
                other["metadata"]["resourceVersion"] = self.bump()
                self._record("DELETED", key[0], key[1], other)
        return obj

    def _record(self, kind: str, resource: str, namespace: str, obj: dict) -> None:
        """One watch event, at the object's new resourceVersion; the lock is held."""
        self.events.append((int(obj["metadata"]["resourceVersion"]), kind, resource, namespace,
                            copy.deepcopy(obj)))
        self.changed.notify_all()

    def watch(self, resource: str, namespace: str | None, query: dict, send) -> None:
        """Streams events (`send(event)`) for `resource` in `namespace` (None: all) matching the
        query's selectors, from its resourceVersion (none or "0": the objects there now, as
        ADDED, then what happens), until timeoutSeconds (default 1800) pass. A version older
        than the events kept is answered with an ERROR event holding 410 Expired, as the API
        server does, and the stream ends."""
        labels = label_matcher(query.get("labelSelector", [""])[0])
        fields = field_matcher(query.get("fieldSelector", [""])[0])
        timeout = float(query.get("timeoutSeconds", ["1800"])[0] or 1800)
        deadline = time.monotonic() + timeout
        start = query.get("resourceVersion", [""])[0]

        def matches(r: str, ns: str, obj: dict) -> bool:
            return (r == resource and (namespace is None or ns == namespace)
                    and labels(obj["metadata"].get("labels", {})) and fields(obj))

        with self.lock:
            if start in ("", "0"):
                since = self.version
                first = [{"type": "ADDED", "object": copy.deepcopy(obj)}
                         for (r, ns, _), obj in sorted(self.objects.items())
                         if matches(r, ns, obj)]
            else:
                since = int(start)  # the handler checked it is a number
                oldest = self.events[0][0] if self.events else self.version + 1
                if since < oldest - 1:
                    send({"type": "ERROR", "object": status(
                        410, "Expired", f"too old resource version: {since} ({oldest - 1})")})
                    return
                first = []
        for event in first:
            send(event)
        while True:
            with self.lock:
                left = deadline - time.monotonic()
                if left > 0 and self.version <= since:
                    self.changed.wait(left)
                batch = [{"type": kind, "object": copy.deepcopy(obj)}
                         for version, kind, r, ns, obj in self.events
                         if version > since and matches(r, ns, obj)]
                since = self.version
            for event in batch:
                send(event)
            if time.monotonic() >= deadline:
                return

    def list(self, resource: str, namespace: str | None, query: dict) -> dict:
        labels = label_matcher(query.get("labelSelector", [""])[0])
        fields = field_matcher(query.get("fieldSelector", [""])[0])
        start = query.get("continue", [""])[0]
        after = None
        if start:
            try:
                after = json.loads(base64.urlsafe_b64decode(start.encode()).decode())
            except ValueError:
                raise ApiError(400, "BadRequest", "continue key is not valid") from None
        limit = int(query.get("limit", ["0"])[0] or 0)
        with self.lock:  # filter first and copy only the page: 10,000 pods list in pages
            keys = sorted((ns, name) for (r, ns, name), obj in self.objects.items()
                          if r == resource and (namespace is None or ns == namespace)
                          and (after is None or [ns, name] > after)
                          and labels(obj["metadata"].get("labels", {})) and fields(obj))
            meta = {"resourceVersion": str(self.version)}
            if limit > 0 and len(keys) > limit:
                last = keys[limit - 1]
                meta["continue"] = base64.urlsafe_b64encode(json.dumps(list(last)).encode()).decode()
                meta["remainingItemCount"] = len(keys) - limit
                keys = keys[:limit]
            items = [copy.deepcopy(self.objects[(resource, ns, name)]) for ns, name in keys]
        return {"kind": RESOURCES[resource] + "List", "apiVersion": API_VERSIONS[resource],
                "metadata": meta,
                "items": items}

    def drive_pod(self, namespace: str, name: str, state: dict) -> dict:
        with self.lock:
            pod = self.objects.get(("pods", namespace, name))
            if pod is None:
                raise ApiError(404, "NotFound", f'pods "{name}" not found', name, "pods")
            self._set_pod_state(pod, state)
            pod["metadata"]["resourceVersion"] = self.bump()
            self._record("MODIFIED", "pods", namespace, pod)
            return copy.deepcopy(pod)


# ── discovery ────────────────────────────────────────────────────────────────────────────────

def api_resources() -> dict:
    verbs = ["create", "delete", "get", "list", "update", "watch"]
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1", "resources": [
        {"name": "namespaces", "singularName": "", "namespaced": False, "kind": "Namespace",
         "verbs": ["get", "list"], "shortNames": ["ns"]},
        {"name": "pods", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": verbs,
         "shortNames": ["po"], "categories": ["all"]},
        {"name": "pods/status", "singularName": "", "namespaced": True, "kind": "Pod",
         "verbs": ["get"]},
        {"name": "services", "singularName": "", "namespaced": True, "kind": "Service",
         "verbs": verbs, "shortNames": ["svc"], "categories": ["all"]},
    ]}


def networking_resources() -> dict:
    verbs = ["create", "delete", "get", "list", "update", "watch"]
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "networking.k8s.io/v1",
            "resources": [{"name": "networkpolicies", "singularName": "", "namespaced": True,
                           "kind": "NetworkPolicy", "verbs": verbs, "shortNames": ["netpol"]}]}


NETWORKING_GROUP = {"kind": "APIGroup", "apiVersion": "v1", "name": "networking.k8s.io",
                    "versions": [{"groupVersion": "networking.k8s.io/v1", "version": "v1"}],
                    "preferredVersion": {"groupVersion": "networking.k8s.io/v1", "version": "v1"}}


# ── HTTP ─────────────────────────────────────────────────────────────────────────────────────

class Handler(BaseHTTPRequestHandler):
    server_version = "sandboxd-kube-standin"
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *args) -> None:  # quiet; /_standin/requests has them
        pass

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in two writes: without this, Nagle's algorithm holds the body
        # until the client's delayed ACK, 40 ms per answer on a kept-alive connection.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        if length > 4 * 1024 * 1024:
            raise ApiError(413, "RequestEntityTooLarge", "request body too large")
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return {}
        try:
            return json.loads(raw)
        except ValueError:
            raise ApiError(400, "BadRequest", "the body is not JSON") from None

    def _authorized(self, path: str) -> bool:
        if path.startswith("/_standin/"):
            return True
        tokens = self.server.tokens  # type: ignore[attr-defined]
        if not tokens:
            return True
        auth = self.headers.get("Authorization", "")
        return auth.startswith("Bearer ") and tokens.get(auth[7:]) is True

    def _handle(self, method: str) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        path = url.path.rstrip("/") or "/"
        self.server.requests.append(  # type: ignore[attr-defined]
            {"method": method, "path": path, "query": url.query})
        try:
            if not self._authorized(path):
                raise ApiError(401, "Unauthorized", "Unauthorized")
            body = self._body()  # read whatever came (a DELETE's DeleteOptions) to stay in step
            # Parsed as Go's strconv.ParseBool does: the Python client sends "True".
            if method == "GET" and query.get("watch", ["false"])[0] in ("1", "t", "T", "true",
                                                                       "TRUE", "True"):
                self._watch(path, query)
                return
            if method == "DELETE":  # DeleteOptions, in the body or the query
                body = dict(body or {})
                if "gracePeriodSeconds" in query:
                    body["gracePeriodSeconds"] = query["gracePeriodSeconds"][0]
            elif method not in ("POST", "PUT"):
                body = None
            self._send(*self._route(method, path, query, body))
        except ApiError as e:
            self._send(e.code, e.body)

    def _route(self, method: str, path: str, query: dict, body: dict | None) -> tuple[int, dict]:
        store: Store = self.server.store  # type: ignore[attr-defined]
        if path.startswith("/_standin/"):
            return self._control(method, path, body or {})
        if method == "GET" and path == "/version":
            return 200, {"major": "1", "minor": "28", "gitVersion": GIT_VERSION,
                         "platform": "linux/amd64"}
        if method == "GET" and path == "/api":
            return 200, {"kind": "APIVersions", "versions": ["v1"],
                         "serverAddressByClientCIDRs": [
                             {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}
        if method == "GET" and path == "/apis":
            return 200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": [NETWORKING_GROUP]}
        if method == "GET" and path == "/apis/networking.k8s.io":
            return 200, NETWORKING_GROUP
        if method == "GET" and path == "/apis/networking.k8s.io/v1":
            return 200, networking_resources()
        m = re.fullmatch(r"/apis/networking.k8s.io/v1/networkpolicies", path)
        if m and method == "GET":
            return 200, store.list("networkpolicies", None, query)
        m = re.fullmatch(r"/apis/networking.k8s.io/v1/namespaces/([^/]+)/(networkpolicies)"
                         r"(?:/([^/]+))?", path)
        if m:
            return self._object_route(store, method, path, query, body, *m.groups(), None)
        if method == "GET" and path == "/api/v1":
            return 200, api_resources()
        m = re.fullmatch(r"/api/v1/(pods|services)", path)
        if m and method == "GET":
            return 200, store.list(m.group(1), None, query)
        m = re.fullmatch(r"/api/v1/namespaces/([^/]+)", path)
        if m and method == "GET":
            return 200, {"kind": "Namespace", "apiVersion": "v1",
                         "metadata": {"name": m.group(1), "uid": "ns-" + m.group(1)},
                         "status": {"phase": "Active"}}
        m = re.fullmatch(r"/api/v1/namespaces/([^/]+)/(pods|services)(?:/([^/]+))?(/status)?",
                         path)
        if not m:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return self._object_route(store, method, path, query, body, *m.groups())

    @staticmethod
    def _object_route(store, method: str, path: str, query: dict, body: dict | None,
                      namespace: str, resource: str, name: str | None,
                      sub: str | None) -> tuple[int, dict]:
        if name is None:
            if method == "GET":
                return 200, store.list(resource, namespace, query)
            if method == "POST":
                return 201, store.create(resource, namespace, body or {})
        elif sub is None or method == "GET":
            if method == "GET":
                return 200, store.get(resource, namespace, name)
            if method == "PUT":
                return 200, store.replace(resource, namespace, name, body or {})
            if method == "DELETE":
                return 200, store.delete(resource, namespace, name, body or {})
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {path}")

    def _watch(self, path: str, query: dict) -> None:
        """A watch: 200 at once (clients wait for it before they go on), then one JSON event per
        line, chunked, as the API server streams them."""
        m = re.fullmatch(r"/api/v1(?:/namespaces/([^/]+))?/(pods|services)", path)
        if not m:
            raise ApiError(405, "MethodNotAllowed", f"watch is not supported on {path}")
        start = query.get("resourceVersion", [""])[0]
        if start and not start.isdigit():
            raise ApiError(400, "BadRequest", f"invalid resource version: {start}")
        label_matcher(query.get("labelSelector", [""])[0])  # a bad selector is 400, not a stream
        field_matcher(query.get("fieldSelector", [""])[0])
        if self.server.forbid_watch:  # type: ignore[attr-defined]
            raise ApiError(403, "Forbidden",
                           f'{m.group(2)} is forbidden: User "system:serviceaccount:sandboxes:'
                           f'sandboxd" cannot watch resource "{m.group(2)}" in API group "" in '
                           f'the namespace "{m.group(1)}"', kind=m.group(2))
        store: Store = self.server.store  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()

        def send(event: dict) -> None:
            data = json.dumps(event).encode() + b"\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        try:
            store.watch(m.group(2), m.group(1), query, send)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self.close_connection = True  # the client went away

    def _control(self, method: str, path: str, body: dict) -> tuple[int, dict]:
        store: Store = self.server.store  # type: ignore[attr-defined]
        if method == "GET" and path == "/_standin/requests":
            return 200, {"requests": list(self.server.requests)}  # type: ignore[attr-defined]
        m = re.fullmatch(r"/_standin/pods/([^/]+)/([^/]+)", path)
        if method == "POST" and m:
            return 200, store.drive_pod(m.group(1), m.group(2), body)
        if method == "POST" and path == "/_standin/quota":
            with store.lock:
                store.pod_quota = body.get("pods")
            return 200, {"pods": store.pod_quota}
        if method == "POST" and path in ("/_standin/tokens", "/_standin/tokens/expire"):
            self.server.tokens[body["token"]] = path.endswith("/tokens")  # type: ignore
            return 200, {}
        raise ApiError(404, "NotFound", f"no stand-in control at {method} {path}")

    def do_GET(self) -> None:  # noqa: N802
        self._handle("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._handle("POST")

    def do_PUT(self) -> None:  # noqa: N802
        self._handle("PUT")

    def do_DELETE(self) -> None:  # noqa: N802
        self._handle("DELETE")


def make_certificates(directory: str) -> tuple[str, str]:
    """A CA and a server certificate for 127.0.0.1 and localhost, made once per directory."""
    os.makedirs(directory, exist_ok=True)
    ca, key, cert = (os.path.join(directory, n) for n in ("ca.crt", "server.key", "server.crt"))
    if not all(os.path.exists(p) for p in (ca, key, cert)):
        ca_key, csr, ext = (os.path.join(directory, n) for n in ("ca.key", "server.csr", "san.ext"))
        with open(ext, "w") as f:
            f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        for command in (
            ["openssl", "req", "-x509", *ec, "-keyout", ca_key, "-out", ca, "-days", "7",
             "-subj", "/CN=sandboxd-kube-standin-ca"],
            ["openssl", "req", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=127.0.0.1"],
            ["openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key,
             "-CAcreateserial", "-out", cert, "-days", "7", "-extfile", ext],
        ):
            subprocess.run(command, check=True, capture_output=True)
    return cert, key


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", action="append", default=[])
    parser.add_argument("--pods-start", choices=("ready", "pending"), default="ready")
    parser.add_argument("--tls-dir")
    parser.add_argument("--serve-pods")
    parser.add_argument("--kubelet-stop-seconds", type=float, default=0.0)
    parser.add_argument("--forbid-watch", action="store_true")
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    scheme = "http"
    if args.tls_dir:
        cert, key = make_certificates(args.tls_dir)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        scheme = "https"
    server.daemon_threads = True
    server.store = Store(args.pods_start)  # type: ignore[attr-defined]
    server.store.serve_pods = args.serve_pods
    server.store.kubelet_stop_seconds = args.kubelet_stop_seconds
    server.tokens = {t: True for t in args.token}  # type: ignore[attr-defined]
    server.requests = []  # type: ignore[attr-defined]
    server.forbid_watch = args.forbid_watch  # type: ignore[attr-defined]
    print(f"listening {scheme}://127.0.0.1:{server.server_address[1]}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.store.stop_all()  # type: ignore[attr-defined]
    return 0


if __name__ == "__main__":
    sys.exit(main())
