"""Kubernetes API objects (as JSON, the way the API server and kube-scheduler marshal them) to what
the engine reads: a v1.Pod to a ``PodSpec``, a resource.Quantity string to a number.

A pod's request of each resource is what kube-scheduler's NodeResourcesFit counts: the sum over its
containers, or the largest init container's if larger, plus ``spec.overhead``. QoS is
``status.qosClass`` when the API server has set it, else derived as Kubernetes does (Guaranteed:
every container has CPU and memory limits equal to its requests; BestEffort: no requests or limits
at all; Burstable otherwise).
"""

from __future__ import annotations

import math
import re

from td3sched.engine.decision import QOS_NAMES, PodSpec

_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$")
_SUFFIX = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
           "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50, "Ei": 2.0**60}
MIB = 2.0**20
GIB = 2.0**30
GPU_RESOURCE = "nvidia.com/gpu"


def parse_quantity(value, where: str) -> float:
    """A resource.Quantity ("500m", "2Gi", "1e3", 4) in base units; ValueError naming ``where``."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"{where}: {value!r}: expected a Kubernetes quantity such as '500m' or '2Gi'")
    if isinstance(value, (int, float)):
        number = float(value)
    else:
        m = _QUANTITY.match(value.strip())
        if not m:
            raise ValueError(f"{where}: {value!r}: expected a Kubernetes quantity such as '500m' or '2Gi'")
        number = float(m.group(1)) * (10.0 ** int(m.group(2)[1:]) if m.group(2) else _SUFFIX[m.group(3) or ""])
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{where}: {value!r}: expected a finite non-negative quantity")
    return number


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
        out.append({k: parse_quantity(v, f"{where}.resources.{kind}.{k}") for k, v in raw.items()})
    requests, limits = out
    for k, v in limits.items():  # Kubernetes defaults a missing request to its limit
        requests.setdefault(k, v)
    return requests, limits


def _qos(containers: list[tuple[dict, dict]]) -> int:
    if all(not r and not lim for r, lim in containers):
        return QOS_NAMES.index("BestEffort")
    guaranteed = all(all(k in lim and r.get(k) == lim[k] for k in ("cpu", "memory")) for r, lim in containers)
    return QOS_NAMES.index("Guaranteed" if guaranteed else "Burstable")


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
    overhead = {k: parse_quantity(v, f"{where}.spec.overhead.{k}")
                for k, v in _obj(spec.get("overhead"), f"{where}.spec.overhead").items()}

    def total(kind: int, key: str) -> float:
        if kind == 1 and any(key not in c[1] for c in containers):
            return math.inf  # a container without that limit: the pod has none
        s = sum(c[kind].get(key, 0.0) for c in containers)
        return max([s] + [c[kind].get(key, 0.0) for c in inits]) + (overhead.get(key, 0.0) if kind == 0 else 0.0)

    status = _obj(pod.get("status"), f"{where}.status")
    qos_class = status.get("qosClass")
    if qos_class is not None and qos_class not in QOS_NAMES:
        raise ValueError(f"{where}.status.qosClass: {qos_class!r}: expected one of {', '.join(QOS_NAMES)}")
    qos = QOS_NAMES.index(qos_class) if qos_class else _qos(containers)
    gpus = total(0, GPU_RESOURCE)
    if gpus != int(gpus):
        raise ValueError(f"{where}: {GPU_RESOURCE} request {gpus!r}: expected whole GPUs")
    namespace = meta.get("namespace") or ""
    return PodSpec(name, cpu_milli=total(0, "cpu") * 1000.0, mem_mib=total(0, "memory") / MIB,
                   disk_gib=total(0, "ephemeral-storage") / GIB, gpu_count=int(gpus),
                   gpu_milli=1000 if gpus else 0, qos=qos, cpu_limit_milli=total(1, "cpu") * 1000.0,
                   mem_limit_mib=total(1, "memory") / MIB, namespace=namespace if isinstance(namespace, str) else "")


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
