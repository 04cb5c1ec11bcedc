"""Kubernetes API objects (as JSON, the way the API server and kube-scheduler marshal them) to what
the engine reads: a v1.Pod to a ``PodSpec``, a resource.Quantity string to a number.

A pod's request of each resource is what kube-scheduler's NodeResourcesFit counts: the sum over its
containers, or the largest init container's if larger, plus ``spec.overhead``. QoS is
``status.qosClass`` when the API server has set it, else derived as Kubernetes does (Guaranteed:
every container has CPU and memory limits equal to its requests; BestEffort: no requests or limits
at all; Burstable otherwise).

Quantities are read exactly (as Kubernetes' own ``resource.Quantity`` does), summed exactly and
rounded once, to the engine's unit: ``"1500m"`` is 1500 milli-CPUs and ``"576.3Mi"`` 576.3 MiB to
the last bit, so a pod read from its v1.Pod asks the same question as the pod itself (the digital
twin, ``engine.twin``, holds the extender to that).
"""

from __future__ import annotations

import datetime
import math
import re
import uuid
from fractions import Fraction
from pathlib import Path

import numpy as np

from td3sched.engine.decision import QOS_NAMES, PodSpec

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
"""Where Kubernetes mounts a pod's service account token and the cluster's CA."""

_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$")
_SUFFIX = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": Fraction(1),
           "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
           "P": Fraction(10**15), "E": Fraction(10**18), "Ki": Fraction(2**10), "Mi": Fraction(2**20),
           "Gi": Fraction(2**30), "Ti": Fraction(2**40), "Pi": Fraction(2**50), "Ei": Fraction(2**60)}
MAX_EXPONENT = 30
"""A decimal exponent beyond this (``1e999``) is refused rather than expanded exactly."""
MAX_QUANTITY = Fraction(10**30)
"""Larger quantities (in base units) are refused: they are typing errors, and would overflow a float."""
MIB = 2**20
GIB = 2**30
GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_POOL_LABEL = "td3sched.io/pool"
"""The node label whose value names a node's pool (the engine's ``kubernetes.pool_label``)."""
RDMA_RESOURCE = "koordinator.sh/rdma"
"""The RDMA extended resource, in percent of one device (Koordinator's device-share convention), as
the simulator's ``rdma_pct``."""


def quantity(value, where: str) -> Fraction:
    """A resource.Quantity ("500m", "2Gi", "1e3", 4), exactly, in base units; ValueError naming ``where``."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"{where}: {value!r}: expected a Kubernetes quantity such as '500m' or '2Gi'")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where}: {value!r}: expected a finite non-negative quantity")
    if isinstance(value, (int, float)):
        number = Fraction(value)
    else:
        m = _QUANTITY.match(value.strip())
        exponent = int(m.group(2)[1:]) if m and m.group(2) else 0
        if not m or abs(exponent) > MAX_EXPONENT:
            raise ValueError(f"{where}: {value!r}: expected a Kubernetes quantity such as '500m' or '2Gi'")
        number = Fraction(m.group(1)) * (Fraction(10) ** exponent if m.group(2) else _SUFFIX[m.group(3) or ""])
    if not 0 <= number <= MAX_QUANTITY:
        raise ValueError(f"{where}: {value!r}: expected a finite non-negative quantity (at most 1e30 base units)")
    return number


def parse_quantity(value, where: str) -> float:
    """``quantity`` rounded to a float."""
    return float(quantity(value, where))


def format_quantity(value: float, unit: str = "") -> str:
    """A float as a quantity string in ``unit`` (a suffix: "m", "Mi", "Gi", ...) that ``quantity``
    reads back to exactly ``value`` of that unit: the shortest decimal that rounds to it, written
    without an exponent (a quantity has an exponent or a suffix, not both)."""
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"quantity {value!r}: expected a finite non-negative number")
    return np.format_float_positional(float(value), unique=True, trim="-") + unit


def _obj(value, where: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def _list(value, where: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{where}: expected a list, got {type(value).__name__}")
    return value


def _resources(container: dict, where: str) -> tuple[dict, dict]:
    res = _obj(container.get("resources"), f"{where}.resources")
    out = []
    for kind in ("requests", "limits"):
        raw = _obj(res.get(kind), f"{where}.resources.{kind}")
        out.append({k: quantity(v, f"{where}.resources.{kind}.{k}") for k, v in raw.items()})
    requests, limits = out
    for k, v in limits.items():  # Kubernetes defaults a missing request to its limit
        requests.setdefault(k, v)
    return requests, limits


def _qos(containers: list[tuple[dict, dict]]) -> int:
    if all(not r and not lim for r, lim in containers):
        return QOS_NAMES.index("BestEffort")
    guaranteed = all(all(k in lim and r.get(k) == lim[k] for k in ("cpu", "memory")) for r, lim in containers)
    return QOS_NAMES.index("Guaranteed" if guaranteed else "Burstable")


def controller_of(meta: dict, namespace: str, where: str) -> str:
    """``namespace/Kind/name`` of the owner reference marked ``controller`` (the ReplicaSet, StatefulSet,
    Job... that made the pod: its other pods are the pod's siblings), "" when none is; ValueError naming a
    malformed reference."""
    for i, ref in enumerate(_list(meta.get("ownerReferences"), f"{where}.metadata.ownerReferences")):
        ref = _obj(ref, f"{where}.metadata.ownerReferences[{i}]")
        if ref.get("controller") is True:
            kind, name = ref.get("kind"), ref.get("name")
            if not (isinstance(kind, str) and kind and isinstance(name, str) and name):
                raise ValueError(f"{where}.metadata.ownerReferences[{i}]: kind {kind!r}, name {name!r}: expected "
                                 "the controller's kind and name")
            return f"{namespace or 'default'}/{kind}/{name}"
    return ""


def pod_from_k8s(pod, where: str = "Pod") -> PodSpec:
    """The ``PodSpec`` of a v1.Pod (JSON object); ValueError naming the path of a bad field."""
    pod = _obj(pod, where)
    if not pod:
        raise ValueError(f"{where}: missing: expected the v1.Pod being scheduled")
    meta = _obj(pod.get("metadata"), f"{where}.metadata")
    name = meta.get("name") or meta.get("generateName")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}.metadata.name: missing: expected the pod's name")
    spec = _obj(pod.get("spec"), f"{where}.spec")
    containers = [_resources(_obj(c, f"{where}.spec.containers[{i}]"), f"{where}.spec.containers[{i}]")
                  for i, c in enumerate(_list(spec.get("containers"), f"{where}.spec.containers"))]
    if not containers:
        raise ValueError(f"{where}.spec.containers: empty: expected at least one container")
    inits = [_resources(_obj(c, f"{where}.spec.initContainers[{i}]"), f"{where}.spec.initContainers[{i}]")
             for i, c in enumerate(_list(spec.get("initContainers"), f"{where}.spec.initContainers"))]
    overhead = {k: quantity(v, f"{where}.spec.overhead.{k}")
                for k, v in _obj(spec.get("overhead"), f"{where}.spec.overhead").items()}

    def total(kind: int, key: str, unit: Fraction = Fraction(1)) -> float:
        """Exact sum, then one rounding to a float in ``unit`` (units per base unit)."""
        if kind == 1 and any(key not in c[1] for c in containers):
            return math.inf  # a container without that limit: the pod has none
        s = sum(c[kind].get(key, 0) for c in containers)
        return float((max([s] + [c[kind].get(key, 0) for c in inits]) + (overhead.get(key, 0) if kind == 0 else 0))
                     * unit)

    status = _obj(pod.get("status"), f"{where}.status")
    qos_class = status.get("qosClass")
    if qos_class is not None and qos_class not in QOS_NAMES:
        raise ValueError(f"{where}.status.qosClass: {qos_class!r}: expected one of {', '.join(QOS_NAMES)}")
    qos = QOS_NAMES.index(qos_class) if qos_class else _qos(containers)
    gpus = total(0, GPU_RESOURCE)
    if gpus != int(gpus):
        raise ValueError(f"{where}: {GPU_RESOURCE} request {gpus!r}: expected whole GPUs")
    namespace = meta.get("namespace") or ""
    namespace = namespace if isinstance(namespace, str) else ""
    return PodSpec(name, cpu_milli=total(0, "cpu", Fraction(1000)), mem_mib=total(0, "memory", Fraction(1, MIB)),
                   disk_gib=total(0, "ephemeral-storage", Fraction(1, GIB)), rdma_pct=total(0, RDMA_RESOURCE),
                   gpu_count=int(gpus), gpu_milli=1000 if gpus else 0, qos=qos,
                   cpu_limit_milli=total(1, "cpu", Fraction(1000)), mem_limit_mib=total(1, "memory", Fraction(1, MIB)),
                   namespace=namespace, owner=controller_of(meta, namespace, where))


def pod_to_k8s(pod: PodSpec, uid: str = "") -> dict:
    """A v1.Pod (JSON object, as the API server serves it) asking what ``pod`` asks: one container
    with its requests (and limits, when finite), ``status.qosClass`` set, and an owner reference marked
    controller for ``pod.owner`` (of its namespace; the owner's uid made up from its name: no controller
    made it). ``pod_from_k8s`` reads it back to ``pod`` exactly (GPU shares of a device aside: a v1.Pod
    asks whole GPUs)."""
    requests = {"cpu": format_quantity(pod.cpu_milli, "m"), "memory": format_quantity(pod.mem_mib, "Mi")}
    if pod.disk_gib:
        requests["ephemeral-storage"] = format_quantity(pod.disk_gib, "Gi")
    if pod.rdma_pct:
        requests[RDMA_RESOURCE] = format_quantity(pod.rdma_pct)
    if pod.gpu_count:
        requests[GPU_RESOURCE] = str(int(pod.gpu_count))
    limits = {}
    if math.isfinite(pod.cpu_limit_milli):
        limits["cpu"] = format_quantity(pod.cpu_limit_milli, "m")
    if math.isfinite(pod.mem_limit_mib):
        limits["memory"] = format_quantity(pod.mem_limit_mib, "Mi")
    for key in (RDMA_RESOURCE, GPU_RESOURCE):  # extended resources: the API server wants limits equal to requests
        if key in requests:
            limits[key] = requests[key]
    resources = {"requests": requests, **({"limits": limits} if limits else {})}
    meta = {"name": pod.name, "namespace": pod.namespace or "default", "uid": uid}
    if pod.owner:
        parts = pod.owner.split("/", 2)
        if len(parts) != 3 or not all(parts):
            raise ValueError(f"pod.owner={pod.owner!r}: expected namespace/Kind/name")
        owner_ns, kind, owner = parts
        if owner_ns != meta["namespace"]:
            raise ValueError(f"pod.owner={pod.owner!r}: expected an owner in the pod's namespace {meta['namespace']!r}")
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": kind, "name": owner, "controller": True,
                                    "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, pod.owner))}]
    return {"kind": "Pod", "apiVersion": "v1",
            "metadata": meta,
            "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9", "resources": resources}],
                     "schedulerName": "default-scheduler"},
            "status": {"phase": "Pending", "qosClass": QOS_NAMES[pod.qos]}}


def node_names_from_list(node_list, where: str = "Nodes") -> list[str]:
    """The names of a v1.NodeList's items."""
    items = _list(_obj(node_list, where).get("items"), f"{where}.items")
    names = []
    for i, node in enumerate(items):
        name = _obj(_obj(node, f"{where}.items[{i}]").get("metadata"), f"{where}.items[{i}].metadata").get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"{where}.items[{i}].metadata.name: missing: expected the node's name")
        names.append(name)
    return names


def created_s(pod: dict) -> float | None:
    """The pod's ``metadata.creationTimestamp`` (RFC 3339, as the API server writes it) in Unix seconds;
    None when it has none or it cannot be read."""
    text = (pod.get("metadata") or {}).get("creationTimestamp")
    if not isinstance(text, str):
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def restart_counts(pod: dict) -> dict[str, int] | None:
    """Each container's ``restartCount`` from a v1.Pod's ``status.containerStatuses`` (name -> count);
    None when the pod has no statuses or a count is not a whole number >= 0."""
    statuses = (pod.get("status") or {}).get("containerStatuses")
    if not isinstance(statuses, list) or not statuses:
        return None
    out = {}
    for c in statuses:
        restarts = c.get("restartCount") if isinstance(c, dict) else None
        if not isinstance(restarts, int) or isinstance(restarts, bool) or restarts < 0:
            return None
        out[str(c.get("name"))] = restarts
    return out


def oom_kills_since(pod: dict, before: dict[str, int]) -> int | None:
    """OOM kills of a pod's containers since they had restarted ``before`` times (name -> count; a
    container not in it: 0), each followed by a restart, where the statuses pin them down: a container
    that did not restart since had none; one that restarted once since had one if its last termination
    (``lastState.terminated.reason``) was ``OOMKilled``, else none. A container that restarted more
    often since keeps only its last termination's reason (a count going down is a new pod), and a pod
    without statuses says nothing: None. With ``before`` empty these are the kills of the pod's life."""
    now = restart_counts(pod)
    if now is None:
        return None
    kills = 0
    for c in (pod.get("status") or {}).get("containerStatuses"):
        delta = now[str(c.get("name"))] - before.get(str(c.get("name")), 0)
        if delta not in (0, 1):
            return None
        last = ((c.get("lastState") or {}).get("terminated") or {}).get("reason")
        kills += int(delta == 1 and last == "OOMKilled")
    return kills
