"""Fixtures of the end-to-end tests: the binaries (built once, cached under build/k8s/<version>), one
control plane with fake nodes and a real Prometheus scraping node_exporter metrics for them, and the
decision engine as a process (``td3sched serve``) per test."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import pytest
import yaml

pytest.importorskip("grpc")

from td3sched.engine.prometheus_source import DEFAULT_QUERIES  # noqa: E402
from tests.engine.prometheus_harness import (NodeExporterStub, PrometheusServer, SimulatedNode,  # noqa: E402
                                             ensure_prometheus, wait_for)
from tests.k8s.control_plane import (REPO, ControlPlane, Processes, Scheduler, build_binaries,  # noqa: E402
                                     engine_env, go_available)

MODEL = REPO / "models" / "td3-dlrm"
QUERIES = {name: q.replace("[1m]", "[5s]") for name, q in DEFAULT_QUERIES.items()}
"""Rate windows that hold several of the tests' 1 s scrapes (docs/engine.md)."""
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
    wait_rates_settled(prom)
    yield prom
    prom.stop()
    exporter.stop()


def wait_rates_settled(prom, deadline_s: float = 60.0) -> None:
    """Until every node's busy CPU reads what the exporter publishes (within 1%): a rate over a window
    not yet full of scrapes is extrapolated and reads a busier node than there is."""
    import urllib.parse
    import urllib.request

    expected = {name: cores * busy for name, cores, busy, _, _ in NODES}

    def settled():
        url = f"{prom.url}/api/v1/query?" + urllib.parse.urlencode({"query": QUERIES["cpu_busy_cores"]})
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                result = json.loads(resp.read())["data"]["result"]
        except OSError:
            return False
        got = {r["metric"]["instance"].rsplit(":", 1)[0]: float(r["value"][1]) for r in result}
        return set(got) == set(expected) and all(abs(got[n] - v) <= 0.01 * v for n, v in expected.items())
    if not wait_for(settled, deadline_s=deadline_s, every_s=0.5):
        raise RuntimeError(f"Prometheus' CPU rates did not settle to the exporter's values within {deadline_s} s")


@pytest.fixture(scope="session")
def cluster(k8s_bins, processes, tmp_path_factory):
    plane = ControlPlane(tmp_path_factory.mktemp("control-plane"), k8s_bins, processes)
    plane.start()
    for name, cores, _, mem_gib, _ in NODES:
        plane.create_node(name, cores * 1000, mem_gib * 1024)
    return plane


class Engine:
    """``td3sched serve`` as a process: gRPC and extender ports, the decision log."""

    def __init__(self, folder: Path, prom, processes: Processes, **extra):
        folder.mkdir(parents=True, exist_ok=True)
        self.folder, self.processes = folder, processes
        self.log_path = folder / "decisions.jsonl"
        self.config = {"model": str(MODEL), "grpc": {"port": 0}, "http": {"port": 0},
                       "prometheus": {"url": prom.url, "interval_s": 1.0, "queries": QUERIES},
                       "decision_log": {"path": str(self.log_path), "fsync_interval_s": 0.1}, **extra}
        self.start()

    def start(self) -> None:
        path = self.folder / "engine.yaml"
        path.write_text(yaml.safe_dump(self.config))
        ready = self.folder / "ports.json"
        ready.unlink(missing_ok=True)
        self.process = self.processes.start("engine", [sys.executable, "-m", "td3sched.cli", "serve", "--config",
                                                       str(path), "--ready-file", str(ready)],
                                            self.folder / "engine.log", env=engine_env())
        ports = wait_for(lambda: not self.process.running or (ready.exists() and json.loads(ready.read_text())),
                         deadline_s=90, every_s=0.1)
        if not ports or not self.process.running:
            raise RuntimeError(f"engine did not start:\n{self.process.tail()}")
        self.grpc_port, self.http_port = ports["grpc"], ports["http"]
        self.config["grpc"]["port"], self.config["http"]["port"] = self.grpc_port, self.http_port  # same on restart

    def wait_fresh(self, node_names: list[str]) -> None:
        """Until the engine scores every node from fresh metrics (rates need their window filled)."""
        import grpc

        from td3sched.engine.v1 import engine_pb2, engine_pb2_grpc

        with grpc.insecure_channel(f"127.0.0.1:{self.grpc_port}") as channel:
            stub = engine_pb2_grpc.DecisionEngineStub(channel)

            def fresh():
                try:
                    reply = stub.ScoreNodes(engine_pb2.ScoreNodesRequest(
                        pod=engine_pb2.Pod(name="probe", cpu_milli=100, mem_mib=100), candidates=node_names), timeout=5)
                except grpc.RpcError:
                    return False
                return not reply.fallback and not any(s.stale for s in reply.scores)
            if not wait_for(fresh, deadline_s=90, every_s=0.5):
                raise RuntimeError(f"the engine never had fresh metrics for {node_names}:\n{self.process.tail()}")

    def records(self) -> list[dict]:
        from td3sched.engine.decision_log import read_log

        return read_log(self.log_path)[0] if self.log_path.exists() else []

    def stop(self) -> None:
        self.processes.stop(self.process)


@pytest.fixture
def engine(tmp_path, prometheus, processes):
    e = Engine(tmp_path / "engine", prometheus, processes)
    e.wait_fresh([n[0] for n in NODES])
    yield e
    e.stop()


def shipped_config(name: str) -> dict:
    return yaml.safe_load((REPO / "scheduler" / "config" / name).read_text())


def plugin_config(engine_address: str, prom, **args) -> dict:
    """scheduler/config/td3-scheduler.yaml with the test's addresses and 1 s metrics."""
    config = shipped_config("td3-scheduler.yaml")
    plugin_args = config["profiles"][0]["pluginConfig"][0]["args"]
    plugin_args.update(engineAddress=engine_address, prometheusURL=prom.url, metricsIntervalSeconds=1,
                       queries=QUERIES, **args)
    return config


def extender_config(extender_url: str) -> dict:
    """scheduler/config/extender-scheduler.yaml pointing at the test's engine."""
    config = shipped_config("extender-scheduler.yaml")
    config["extenders"][0]["urlPrefix"] = extender_url
    return config


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
