"""Fixtures of the end-to-end tests: the binaries (built once, cached under build/k8s/<version>), one
control plane with fake nodes and a real Prometheus scraping node_exporter metrics for them, and the
decision engine as a process (``td3sched serve``) per test."""

from __future__ import annotations

import re
import sys
import time

import pytest

pytest.importorskip("grpc")

from tests.engine.prometheus_harness import (NodeExporterStub, PrometheusServer, SimulatedNode,  # noqa: E402
                                             ensure_prometheus)
from tests.k8s.control_plane import (REPO, ControlPlane, Engine, Processes, Scheduler, build_binaries,  # noqa: E402
                                     go_available, wait_rates_settled)

HOT_NODE = "node-3"
# name, cores, observed CPU share, memory GiB, observed memory share; node-3 is over the 90% safety threshold
NODES = [("node-0", 4, 0.30, 16, 0.40), ("node-1", 8, 0.50, 32, 0.20), ("node-2", 16, 0.20, 64, 0.60),
         (HOT_NODE, 16, 0.97, 64, 0.30), ("node-4", 4, 0.60, 16, 0.10), ("node-5", 16, 0.40, 64, 0.50),
         ("node-6", 8, 0.10, 32, 0.70), ("node-7", 32, 0.80, 128, 0.30)]


@pytest.fixture(scope="session")
def k8s_bins():
    if go_available() is None:
        pytest.skip("go is not installed: the Kubernetes end-to-end tests build kube-apiserver, etcd and the "
                    "schedulers from Go modules (install Go 1.26, then `make k8s-bin`)")
    folder, seconds = build_binaries()
    print(f"\nk8s binaries in {folder.relative_to(REPO)} ({seconds:.0f} s, make k8s-bin)", file=sys.stderr)
    return folder


@pytest.fixture(scope="session")
def processes():
    p = Processes()
    yield p
    p.stop_all()


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory):
    binary = ensure_prometheus()
    exporter = NodeExporterStub([SimulatedNode(name, cores, busy, mem, used) for name, cores, busy, mem, used in NODES])
    prom = PrometheusServer(binary, tmp_path_factory.mktemp("prometheus"), f"127.0.0.1:{exporter.port}")
    prom.start()
    wait_rates_settled(prom, exporter.nodes)
    yield prom
    prom.stop()
    exporter.stop()


@pytest.fixture(scope="session")
def cluster(k8s_bins, processes, tmp_path_factory):
    plane = ControlPlane(tmp_path_factory.mktemp("control-plane"), k8s_bins, processes)
    plane.start()
    for name, cores, _, mem_gib, _ in NODES:
        plane.create_node(name, cores * 1000, mem_gib * 1024)
    return plane


@pytest.fixture
def engine(tmp_path, prometheus, processes):
    e = Engine(tmp_path / "engine", prometheus, processes)
    e.wait_fresh([n[0] for n in NODES])
    yield e
    e.stop()


@pytest.fixture
def namespace(cluster, request):
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[:40].strip("-")
    name = f"t{int(time.time() * 1000) % 10**9}-{slug}"
    cluster.create_namespace(name)
    yield name
    cluster.delete_pods(name)


@pytest.fixture
def start_scheduler(cluster, k8s_bins, processes):
    started = []

    def start(kind: str, config: dict) -> Scheduler:
        binary = k8s_bins / ("td3-scheduler" if kind == "plugin" else "kube-scheduler")
        s = Scheduler(f"{kind}-scheduler-{len(started)}", binary, config, cluster, processes)
        started.append(s)
        return s
    yield start
    for s in started:
        s.stop()
