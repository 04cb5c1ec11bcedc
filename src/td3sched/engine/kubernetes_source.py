"""The API server's view, through the official Kubernetes Python client: a watch on pods feeds the
assign cache with each binding, a watch on nodes gives the shadow state its node set and each node's
allocatable. Both run in background threads; a decision never waits on them.

Pods (``field_selector`` ``spec.nodeName!=``, finished pods left out): a pod that appears bound to a
node (the ADDED or MODIFIED event where ``spec.nodeName`` is first set) is reported through
``EngineService.report_binding``, the call ``ReportBinding`` makes, so a binding reported by both
counts once. A pod deleted or finished (it leaves the selection: DELETED) is forgotten, so a pod of
that name bound later is a new binding; its estimate stays in the assign cache until a scrape of its
node sees it gone (``policy.assign_cache``). The first list only learns which pods are bound: those
bindings predate the engine and its metrics. A list after a reconnection reports the bindings made
while the watch was away and forgets the pods that went.

The same watch keeps each node's requests: the non-zero CPU and memory requests of the pods bound
there (kube-scheduler's defaults for an empty request) and the requests themselves, GPUs included
(``state.REQUESTED_COLUMNS``), set from every list and changed by each binding and departure
(``ShadowState.set_requested``, ``add_requested``): what a model with a requests share scores by, and,
with the node inventory, the allocation a model with a fragmentation share scores by. A pod whose spec
cannot be read counts nothing.

And each bound pod's OOM kills: its containers' restart counts when first seen bound, then at each
event (and relist) the kills since (``kubernetes_objects.oom_kills_since``: a container that restarted
once since, its last termination ``OOMKilled``), reported to the decision log
(``EngineService.report_kills``; more than one restart between two looks: kills unknown).

Nodes: ``status.allocatable`` (``status.capacity`` for a resource it lacks), read with the extender's
quantity code (``kubernetes_objects.quantity``): CPU in milli-cores, memory in MiB, ephemeral storage
in GiB, ``koordinator.sh/rdma`` in percent, ``nvidia.com/gpu`` whole GPUs. A node without CPU and
memory (a kubelet that has not reported yet) is not known until it has them; disk and RDMA default to
the metrics source's assumptions. A node's pool is the value of its ``pool_label`` label (default
``td3sched.io/pool``; "" without one): the pool whose typical pods its fragmentation is measured with,
named as the model's training scenario names its pools. Every change of the set, of a node's
allocatable or of its pool is published (``ShadowState.set_inventory``).

Each watch lists (keeping the list's ``resourceVersion``), then watches from it with bookmarks; when
the API server ends a watch (``watch_timeout_s``) it is resumed from the last resourceVersion seen.
410 Gone (the resourceVersion was compacted away) re-lists at once; any other error (the API server
down, a refused connection, a 5xx) waits ``backoff_initial_s``, doubled per failure up to
``backoff_max_s``, then resumes. Restarts are counted by reason; each watch's last event age and
whether it has listed once are metrics (``engine.metrics``).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Callable

import numpy as np

from td3sched.engine.decision import PodSpec
from td3sched.engine.kubernetes_objects import (DEFAULT_POOL_LABEL, GIB, GPU_RESOURCE, MIB, RDMA_RESOURCE,
                                                SERVICE_ACCOUNT_DIR,
                                                created_s, oom_kills_since, pod_from_k8s, quantity, restart_counts)
from td3sched.engine.metrics import EngineMetrics
from td3sched.engine.service import EngineService
from td3sched.engine.state import REQUESTED_COLUMNS, NodeInventory, NotReady, requested_row

try:
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.incluster_config import (SERVICE_HOST_ENV_NAME, SERVICE_PORT_ENV_NAME,
                                                    InClusterConfigLoader)
except ImportError as exc:  # pragma: no cover - an install without the engine extra
    raise ImportError(f"the Kubernetes source needs the official client ({exc}): "
                      "pip install 'td3sched[engine]'") from None

log = logging.getLogger("td3sched.engine.kubernetes")
POD_SELECTOR = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
"""Bound pods that still run: a pod leaves the selection (DELETED) when it finishes."""


class Gone(RuntimeError):
    """410: the watch's resourceVersion is too old; re-list."""


def api_client(kubeconfig: Path | None, context: str | None = None, service_account_dir: Path = SERVICE_ACCOUNT_DIR,
               environ=os.environ):
    """The official client's ApiClient for ``kubeconfig``, or for the pod the engine runs in when it
    is None (``in_cluster_client``); a ValueError naming the file and what is wrong."""
    if kubeconfig is None:
        return in_cluster_client(service_account_dir, environ)
    where = f"kubernetes.kubeconfig: {kubeconfig}"
    try:
        return k8s_config.new_client_from_config(config_file=str(kubeconfig), context=context,
                                                 persist_config=False)
    except FileNotFoundError as exc:
        raise ValueError(f"{where}: {exc.strerror or 'no such file'}: {exc.filename or kubeconfig}") from None
    except (ConfigException, TypeError, KeyError, AttributeError) as exc:
        raise ValueError(f"{where}: not a usable kubeconfig ({type(exc).__name__}: {exc}): expected a kubeconfig with "
                         "a cluster, a user and a context" + (f" named {context!r}" if context else "")) from None
    except Exception as exc:  # noqa: BLE001  (yaml errors and whatever else the loader raises)
        raise ValueError(f"{where}: cannot be read ({type(exc).__name__}: {exc}): expected a kubeconfig file") from None


def in_cluster_client(service_account_dir: Path = SERVICE_ACCOUNT_DIR, environ=os.environ):
    """The ApiClient of a pod's service account (client-go's ``rest.InClusterConfig``): the API server
    at ``KUBERNETES_SERVICE_HOST``:``KUBERNETES_SERVICE_PORT`` of ``environ``, the bearer token in
    ``service_account_dir``/token (read again as it rotates) and the CA in ``ca.crt``. A ValueError
    names what is missing."""
    where = "kubernetes.in_cluster"
    for name in (SERVICE_HOST_ENV_NAME, SERVICE_PORT_ENV_NAME):
        if not environ.get(name):
            raise ValueError(f"{where}: the environment variable {name} is {'empty' if name in environ else 'not set'}:"
                             " expected the API server's address, as Kubernetes sets it in every pod")
    for name in ("token", "ca.crt"):
        f = Path(service_account_dir) / name
        if not f.is_file() or f.stat().st_size == 0:
            raise ValueError(f"{where}: {f}: {'empty' if f.is_file() else 'no such file'}: expected the service "
                             "account's token and CA (a pod with automountServiceAccountToken, or "
                             "kubernetes.service_account_dir)")
    configuration = k8s_client.Configuration()
    try:
        InClusterConfigLoader(token_filename=str(Path(service_account_dir) / "token"),
                              cert_filename=str(Path(service_account_dir) / "ca.crt"),
                              environ=environ).load_and_set(configuration)
    except ConfigException as exc:
        raise ValueError(f"{where}: {exc}") from None
    return k8s_client.ApiClient(configuration)


class ResourceWatch:
    """List, then watch one kind of object, forever, in a thread; every event goes to ``on_event``,
    each list to ``on_list`` (items, first list or not). Health: ``synced``, ``last_event_age_s``."""

    def __init__(self, resource: str, list_call: Callable, on_list: Callable, on_event: Callable,
                 metrics: EngineMetrics, watch_timeout_s: float = 300.0, request_timeout_s: float = 10.0,
                 backoff_initial_s: float = 0.5, backoff_max_s: float = 30.0, field_selector: str | None = None):
        self.resource = resource
        self.list_call, self.on_list, self.on_event = list_call, on_list, on_event
        self.metrics = metrics
        self.watch_timeout_s, self.request_timeout_s = watch_timeout_s, request_timeout_s
        self.backoff_initial_s, self.backoff_max_s = backoff_initial_s, backoff_max_s
        self.field_selector = field_selector
        self.resource_version: str | None = None
        """Where the next watch resumes; None: list first."""
        self.synced = False
        self.lists = 0
        self.last_error = ""
        self._last_event = time.monotonic()
        self._stop = threading.Event()
        self._response = None
        self._thread = threading.Thread(target=self._run, name=f"watch-{resource}", daemon=True)

    def last_event_age_s(self) -> float:
        return time.monotonic() - self._last_event

    def _selector(self) -> dict:
        return {"field_selector": self.field_selector} if self.field_selector else {}

    def list_once(self) -> None:
        resp = self.list_call(_preload_content=False, _request_timeout=self.request_timeout_s, **self._selector())
        body = json.loads(resp.data)
        first = self.lists == 0
        self.on_list(body.get("items") or [], first)
        self.lists += 1
        self.resource_version = body["metadata"]["resourceVersion"]
        self._last_event = time.monotonic()
        self.synced = True

    def watch_once(self) -> None:
        """One watch from ``resource_version`` until the API server ends it (``Gone``, ApiException or a
        connection error otherwise)."""
        resp = self.list_call(watch=True, resource_version=self.resource_version, allow_watch_bookmarks=True,
                              timeout_seconds=max(1, int(self.watch_timeout_s)), _preload_content=False,
                              _request_timeout=(self.request_timeout_s, self.watch_timeout_s + self.request_timeout_s),
                              **self._selector())
        self._response = resp
        try:
            buffer = b""
            for chunk in resp.stream(amt=None, decode_content=True):
                if self._stop.is_set():
                    return
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        self._event(json.loads(line))
        finally:
            self._response = None
            resp.release_conn()

    def _event(self, event: dict) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            code = obj.get("code")
            if code == 410:
                raise Gone(f"{obj.get('reason')}: {obj.get('message')}")
            raise ApiException(status=code or 0, reason=f"watch error: {obj.get('reason')}: {obj.get('message')}")
        self._last_event = time.monotonic()
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            self.on_event(kind, obj)
        if rv:
            self.resource_version = rv

    def _run(self) -> None:
        backoff = self.backoff_initial_s
        while not self._stop.is_set():
            try:
                if self.resource_version is None:
                    self.list_once()
                self.watch_once()
                backoff = self.backoff_initial_s  # a watch the server ended in time: resume from where it was
            except Gone as exc:
                self._restart("gone", exc)
                self.resource_version = None
            except ApiException as exc:
                if exc.status == 410:
                    self._restart("gone", exc)
                    self.resource_version = None
                    continue
                self._restart("error", exc)
                self._stop.wait(backoff)
                backoff = min(2 * backoff, self.backoff_max_s)
            except Exception as exc:  # noqa: BLE001  (connection errors, bad JSON: reconnect, never die)
                if self._stop.is_set():
                    break
                self._restart("error", exc)
                self._stop.wait(backoff)
                backoff = min(2 * backoff, self.backoff_max_s)

    def _restart(self, reason: str, exc: Exception) -> None:
        self.last_error = f"{type(exc).__name__}: {exc}"
        self.metrics.watch_restarts.labels(self.resource, reason).inc()
        log.warning("watch of %s restarted (%s): %s", self.resource, reason, self.last_error[:500])

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        resp = self._response
        if resp is not None:
            try:
                resp.shutdown()  # unblocks the thread's read
            except Exception:  # noqa: BLE001
                pass
        if self._thread.ident is not None:  # started
            self._thread.join(timeout_s)


def node_allocatable(node: dict, disk_gib: float, rdma_pct: float,
                     pool_label: str = DEFAULT_POOL_LABEL) -> tuple[str, np.ndarray, int, str] | None:
    """(name, [CPU milli, memory MiB, disk GiB, RDMA %], GPUs, pool) of a v1.Node (pool: the value of its
    ``pool_label`` label, "" without one), None without CPU and memory allocatable yet; ValueError naming
    the field of a bad quantity."""
    meta = node.get("metadata") or {}
    name = meta.get("name")
    status = node.get("status") or {}
    alloc, cap = status.get("allocatable") or {}, status.get("capacity") or {}
    where = f"Node {name}.status"

    def read(key: str):
        if key in alloc:
            return quantity(alloc[key], f"{where}.allocatable.{key}")
        if key in cap:
            return quantity(cap[key], f"{where}.capacity.{key}")
        return None

    cpu, mem = read("cpu"), read("memory")
    if not name or not cpu or not mem:
        return None
    disk, rdma, gpus = read("ephemeral-storage"), read(RDMA_RESOURCE), read(GPU_RESOURCE)
    labels = meta.get("labels") or {}
    pool = labels.get(pool_label, "") if isinstance(labels, dict) else ""
    return name, np.array([float(cpu * 1000), float(mem / MIB), float(disk / GIB) if disk else disk_gib,
                           float(rdma) if rdma is not None else rdma_pct]), int(gpus or 0), str(pool)


class KubernetesSource:
    """The pod and node watches of one API server, feeding ``service`` (its state and assign cache)."""

    def __init__(self, kubeconfig: Path | None, service: EngineService, context: str | None = None,
                 watch_timeout_s: float = 300.0, request_timeout_s: float = 10.0, backoff_initial_s: float = 0.5,
                 backoff_max_s: float = 30.0, disk_gib: float = 100.0, rdma_pct: float = 100.0,
                 service_account_dir: Path = SERVICE_ACCOUNT_DIR, environ=os.environ,
                 pool_label: str = DEFAULT_POOL_LABEL):
        """``kubeconfig`` None: the pod's service account (``in_cluster_client``)."""
        self.service = service
        self.state = service.engine.state
        self.metrics = service.metrics
        self.api = k8s_client.CoreV1Api(api_client(None if kubeconfig is None else Path(kubeconfig), context,
                                                   service_account_dir, environ))
        self.disk_gib, self.rdma_pct, self.pool_label = disk_gib, rdma_pct, pool_label
        self.nodes: dict[str, tuple[np.ndarray, int, str]] = {}
        """node -> (allocatable [4], GPUs, pool), as last listed or watched."""
        self.bound: dict[str, tuple[str, str, str, np.ndarray | None]] = {}
        """namespace/name -> (namespace, name, node, its row of ``REQUESTED_COLUMNS`` or None: unreadable)
        of the bound pods the watch knows."""
        self.restarts: dict[str, dict[str, int]] = {}
        """namespace/name -> its containers' restart counts when the watch last looked (bound pods)."""
        timing = dict(watch_timeout_s=watch_timeout_s, request_timeout_s=request_timeout_s,
                      backoff_initial_s=backoff_initial_s, backoff_max_s=backoff_max_s)
        self.node_watch = ResourceWatch("nodes", self.api.list_node, self._nodes_listed, self._node_event,
                                        self.metrics, **timing)
        self.pod_watch = ResourceWatch("pods", self.api.list_pod_for_all_namespaces, self._pods_listed,
                                       self._pod_event, self.metrics, field_selector=POD_SELECTOR, **timing)
        self.watches = (self.node_watch, self.pod_watch)
        self.metrics.watch_kubernetes(self.watches)

    # --- nodes ---------------------------------------------------------------------------------------
    def _read_node(self, node: dict) -> tuple[str, np.ndarray, int] | None:
        try:
            return node_allocatable(node, self.disk_gib, self.rdma_pct, self.pool_label)
        except ValueError as exc:
            log.warning("node left out: %s", exc)
            return None

    def _publish_nodes(self) -> None:
        names = tuple(sorted(self.nodes))
        if not names and self.state.inventory is None:
            return  # no node yet: the metrics source's nodes stay the state's
        alloc = np.array([self.nodes[n][0] for n in names], dtype=float).reshape(-1, 4)
        gpus = np.array([self.nodes[n][1] for n in names], dtype=np.int64)
        self.state.set_inventory(NodeInventory(names, alloc, gpus, tuple(self.nodes[n][2] for n in names)))

    def _nodes_listed(self, items: list, first: bool) -> None:
        nodes = {}
        for item in items:
            read = self._read_node(item)
            if read is not None:
                nodes[read[0]] = read[1:]
        self.nodes = nodes
        self._publish_nodes()

    def _node_event(self, kind: str, node: dict) -> None:
        name = (node.get("metadata") or {}).get("name")
        read = None if kind == "DELETED" else self._read_node(node)
        old = self.nodes.get(name)
        if read is None:
            if old is None:
                return
            del self.nodes[name]
        else:
            new = read[1:]
            if old is not None and np.array_equal(old[0], new[0]) and old[1:] == new[1:]:
                return  # a status heartbeat: nothing the state holds changed
            self.nodes[name] = new
        self._publish_nodes()

    # --- pods ----------------------------------------------------------------------------------------
    @staticmethod
    def _read(pod: dict) -> PodSpec | ValueError:
        """The pod's spec, or the error naming what cannot be read."""
        meta = pod.get("metadata") or {}
        try:
            return pod_from_k8s(pod, f"Pod {meta.get('namespace')}/{meta.get('name')}")
        except ValueError as exc:
            return exc

    @staticmethod
    def _requests(spec: PodSpec | ValueError) -> np.ndarray | None:
        """The pod's row of ``REQUESTED_COLUMNS``, None when its spec cannot be read."""
        return None if isinstance(spec, ValueError) else requested_row(spec.request(0.0))

    def _report(self, spec: PodSpec | ValueError, node: str, pod: dict) -> None:
        if isinstance(spec, ValueError):
            self.metrics.bindings.labels("pod_watch", "invalid_pod").inc()
            log.warning("binding not counted: %s", spec)
            return
        try:
            self.service.report_binding(spec, node, source="pod_watch", created_s=created_s(pod))
        except (KeyError, NotReady):
            self.metrics.bindings.labels("pod_watch", "unknown_node").inc()
            log.info("binding of Pod %s/%s to %s not counted: the state does not know the node", spec.namespace,
                     spec.name, node)

    @staticmethod
    def _key(pod: dict) -> tuple[str, str, str, str]:
        meta = pod.get("metadata") or {}
        namespace, name = meta.get("namespace") or "default", meta.get("name") or ""
        return f"{namespace}/{name}", namespace, name, (pod.get("spec") or {}).get("nodeName") or ""

    def _kills(self, key: str, pod: dict, node: str, fresh: bool) -> None:
        """Report the pod's OOM kills since the watch last looked (none the first time it sees it bound,
        ``fresh``: its restarts until then are its history, not this binding's)."""
        now = restart_counts(pod)
        if fresh:  # a pod without statuses yet (its kubelet has not reported) has not restarted
            self.restarts[key] = {} if now is None else now
            return
        before = self.restarts.get(key)
        if now is None or before is None or now == before:
            return
        self.restarts[key] = now
        kills = oom_kills_since(pod, before)
        if kills != 0:
            namespace, name = key.split("/", 1)
            self.service.report_kills(namespace, name, node, kills)

    def _pods_listed(self, items: list, first: bool) -> None:
        bound, owners = {}, {}
        for pod in items:
            key, namespace, name, node = self._key(pod)
            if not node:
                continue
            spec = self._read(pod)
            bound[key] = (namespace, name, node, self._requests(spec))
            owners[key] = ("" if isinstance(spec, ValueError) else spec.owner, node)
            held = self.bound.get(key)
            moved = held is None or held[2] != node
            if not first and moved:
                self._report(spec, node, pod)  # bound while the watch was away
            self._kills(key, pod, node, fresh=first or moved)
        for key in self.bound.keys() - bound.keys():
            namespace, name, node, _ = self.bound[key]
            self.service.forget_binding(namespace, name, node)  # gone while the watch was away
        self.bound = bound
        self.state.set_pods(owners)
        self.restarts = {k: v for k, v in self.restarts.items() if k in bound}
        requested: dict[str, np.ndarray] = {}
        for _, _, node, req in bound.values():
            if req is not None:
                requested[node] = requested.get(node, np.zeros(len(REQUESTED_COLUMNS))) + req
        self.state.set_requested(requested)

    def _pod_event(self, kind: str, pod: dict) -> None:
        key, namespace, name, node = self._key(pod)
        if kind == "DELETED" or not node:
            held = self.bound.pop(key, None)
            self.restarts.pop(key, None)
            if held is not None:
                if held[3] is not None:
                    self.state.add_requested(held[2], -held[3])
                self.service.forget_binding(namespace, name, held[2])
            return
        held = self.bound.get(key)
        if held is not None and held[2] == node:
            self._kills(key, pod, node, fresh=False)
            return
        self._kills(key, pod, node, fresh=True)
        if held is not None and held[3] is not None:  # the pod of that name was on another node
            self.state.add_requested(held[2], -held[3])
        spec = self._read(pod)
        req = self._requests(spec)
        self.bound[key] = (namespace, name, node, req)
        if req is not None:
            self.state.add_requested(node, req)
        self._report(spec, node, pod)

    def start(self) -> None:
        for w in self.watches:
            w.start()

    def stop(self) -> None:
        for w in self.watches:
            w.stop()
