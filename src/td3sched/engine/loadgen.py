"""Load on a served engine, from another process, as a scheduler gives it: what the benchmark
(``benchmarks/bench_engine.py``: latency against a no-op, throughput, the 10-minute soak) and the
tests' 30-second soak run.

    ServedEngine(nodes, model)   a child process serving, on 127.0.0.1, the engine on a synthetic
                                 cluster (``synthetic_snapshot``) whose metrics a background
                                 refresher republishes every second with new values, as a
                                 Prometheus source does
    ServedEngine(noop=True)      a child process serving a no-op of the same kind: the same gRPC
                                 server, the reply built by the same code, neutral scores, no
                                 decision (its own process: no shared interpreter lock or garbage
                                 collector with the engine)
    run_load(target, rate, s)    ScoreNodes on a fixed schedule (open loop: a slow answer does not
                                 delay the next call), every ``bind_every``-th followed by
                                 ReportBinding; per second: calls, errors by status code, latency,
                                 the server's resident memory

Both sides bind and dial loopback only.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import numpy as np

from td3sched.engine.client import MAX_MESSAGE_BYTES
from td3sched.engine.decision import DecisionEngine, ModelSlot
from td3sched.engine.grpc_server import GrpcFrontDoor, score_nodes_reply
from td3sched.engine.service import EngineService, freeze_startup_heap
from td3sched.engine.state import Allocation, NodeSnapshot, ShadowState
from td3sched.engine.v1 import engine_pb2, engine_pb2_grpc

REFRESH_S = 1.0


def synthetic_snapshot(n: int, seed: int = 0, now: float | None = None, allocation: bool = False) -> NodeSnapshot:
    """``n`` nodes of 64 cores, 256 GiB, observed utilisation drawn in [5%, 85%], scraped ``now``. With
    ``allocation``: every other node of pool "gpu" with 8 GPUs, the rest of pool "cpu" without, each
    with 5% to 95% of its allocatable and of its GPUs' milli left free (the pools of the tiny scenario)."""
    rng = np.random.default_rng(seed)
    alloc = np.tile([64000.0, 262144.0, 1000.0, 100.0], (n, 1))
    cap = np.tile([64000.0, 262144.0, 1.0, 25000.0], (n, 1))
    observed = rng.uniform(0.05, 0.85, size=(n, 4)) * cap
    now = time.time() if now is None else now
    held = None
    if allocation:
        gpu = np.arange(n) % 2 == 1
        gpu_free = np.where(gpu[:, None], rng.choice([0, 250, 500, 1000], size=(n, 8)), 0)
        held = Allocation(alloc * rng.uniform(0.05, 0.95, size=(n, 1)), gpu_free, np.where(gpu, "gpu", "cpu"))
    return NodeSnapshot(tuple(f"node-{i:05d}" for i in range(n)), alloc, cap, observed, np.full(n, now),
                        taken_at_s=now, allocation=held)


class NoOpServicer(engine_pb2_grpc.DecisionEngineServicer):
    """ScoreNodes answered with a reply of the engine's shape and size, built by the engine's own
    ``score_nodes_reply``, with no decision behind it."""

    ACTION = engine_pb2.Action(pre_activations=[0.0] * 5, weights=[0.25] * 4, tau=0.0, action_mode="full")
    NO_STALE = np.zeros(0, dtype=bool)

    def ScoreNodes(self, request, context):
        names = list(request.candidates)
        return score_nodes_reply(names, [50] * len(names), self.NO_STALE, self.NO_STALE, self.ACTION, "noop", "",
                                 False, "noop")

    def ReportBinding(self, request, context):
        return engine_pb2.ReportBindingResponse()


def _serve(conn, nodes: int, model: str | None, max_workers: int, log_dir: str | None, noop: bool) -> None:
    """The child process: the engine (or the no-op) until "stop", then the engine's counters."""
    from td3sched.engine.decision_log import DecisionLog
    from td3sched.rl.onnx_actor import load_actor

    if noop:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="grpc"),
                             options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)])
        engine_pb2_grpc.add_DecisionEngineServicer_to_server(NoOpServicer(), server)
        freeze_startup_heap()  # as the engine's process below and `td3sched serve` do
        conn.send(server.add_insecure_port("127.0.0.1:0"))
        server.start()
        while conn.recv() != "stop":
            pass
        server.stop(0)
        conn.send({})
        return
    state = ShadowState()
    state.publish(synthetic_snapshot(nodes, 0))
    log = DecisionLog(Path(log_dir) / "decisions.jsonl", max_bytes=16 << 20, keep=2) if log_dir else None
    engine = DecisionEngine(state, ModelSlot(load_actor(model) if model else None))
    engine.warm_up()
    service = EngineService(engine, log=log)
    freeze_startup_heap()  # as `td3sched serve` does
    front = GrpcFrontDoor(service, "127.0.0.1", 0, max_workers=max_workers)
    stop = threading.Event()

    def refresh() -> None:  # new metrics every second, like a Prometheus source
        seed = 1
        while not stop.wait(REFRESH_S):
            state.publish(synthetic_snapshot(nodes, seed))
            seed += 1

    refresher = threading.Thread(target=refresh, name="refresher", daemon=True)
    refresher.start()
    conn.send(front.port)
    while conn.recv() != "stop":
        pass
    stop.set()
    front.stop(1.0)
    if log is not None:
        log.close()
    m = service.metrics
    conn.send({"rejected": sum(s.value for metric in m.rejected.collect() for s in metric.samples
                               if s.name.endswith("_total")),
               "score_nodes_p99_le_s": histogram_p99(m.latency.labels("score_nodes")),
               "decisions": sum(s.value for metric in m.decisions.collect() for s in metric.samples
                                if s.name.endswith("_total"))})


def histogram_p99(child) -> float:
    """The upper bound of the bucket holding the 99th percentile of a prometheus_client histogram."""
    buckets = {float(s.labels["le"]): s.value for m in child.collect() for s in m.samples if s.name.endswith("_bucket")}
    total = buckets[float("inf")]
    for le in sorted(buckets):
        if total and buckets[le] >= 0.99 * total:
            return le
    return float("nan")


class ServedEngine:
    """The engine, or the no-op, served by a child process (``with ServedEngine(...) as s``; ``s.port``)."""

    def __init__(self, nodes: int = 5000, model: str | None = None, max_workers: int = 8,
                 log_dir: str | None = None, noop: bool = False):
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, nodes, model, max_workers, log_dir, noop), daemon=True)
        self.process.start()
        if not self._conn.poll(120):
            self.process.kill()
            raise RuntimeError("the served engine did not start within 120 s")
        self.port = self._conn.recv()
        self.counters: dict = {}

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> dict:
        """Stop the servers; the engine's counters (rejected calls, decisions, p99 bucket)."""
        if self.process.is_alive():
            self._conn.send("stop")
            if self._conn.poll(30):
                self.counters = self._conn.recv()
            self.process.join(30)
            if self.process.is_alive():
                self.process.kill()
        return self.counters

    def __enter__(self) -> "ServedEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def rss_bytes(pid: int) -> int:
    """Resident memory of a process (Linux /proc)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process has used (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def requests(names: tuple[str, ...], candidates: int, count: int = 16, seed: int = 0) -> list:
    """``count`` ScoreNodes requests, pods of different sizes over different candidate sets."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        chosen = rng.choice(len(names), size=min(candidates, len(names)), replace=False)
        pod = engine_pb2.Pod(name=f"load-{i}", namespace="load", cpu_milli=float(rng.integers(100, 8000)),
                             mem_mib=float(rng.integers(128, 32768)), qos=engine_pb2.QOS_CLASS_BURSTABLE)
        out.append(engine_pb2.ScoreNodesRequest(pod=pod, candidates=[names[j] for j in chosen]))
    return out


@dataclass
class LoadReport:
    rate_per_s: float
    seconds: float
    sent: int = 0
    ok: int = 0
    errors: dict = field(default_factory=dict)
    """status code name -> count (ScoreNodes and ReportBinding)."""
    latency_s: list = field(default_factory=list)
    """[second of the run] -> latencies (s) of the ScoreNodes calls sent in it that succeeded."""
    rss: list = field(default_factory=list)
    """(second of the run, resident bytes of the server) sampled each second."""
    elapsed_s: float = 0.0
    server_cpu_s: float = float("nan")
    """CPU time the server used during the run (with ``pid``)."""

    @property
    def achieved_per_s(self) -> float:
        return self.ok / self.elapsed_s if self.elapsed_s else 0.0

    @property
    def server_cpu_per_call_s(self) -> float:
        """Server CPU per ScoreNodes answered (its ReportBinding calls included)."""
        return self.server_cpu_s / self.ok if self.ok else float("nan")

    def p99_s(self, first_s: float = 0.0, last_s: float = float("inf")) -> float:
        window = [x for s, lat in enumerate(self.latency_s) if first_s <= s < last_s for x in lat]
        return float(np.quantile(window, 0.99)) if window else float("nan")

    def rss_growth(self, warmup_s: float) -> float:
        """(last RSS - RSS at ``warmup_s``) / RSS at ``warmup_s``."""
        after = [b for s, b in self.rss if s >= warmup_s] or [b for _, b in self.rss]
        return (after[-1] - after[0]) / after[0]


def run_load(target: str, rate_per_s: float, seconds: float, reqs: list, pid: int | None = None,
             bind_every: int = 10, timeout_s: float = 5.0) -> LoadReport:
    """ScoreNodes at ``rate_per_s`` for ``seconds`` on ``target``, open loop; see the module doc."""
    report = LoadReport(rate_per_s, seconds, latency_s=[[] for _ in range(int(np.ceil(seconds)) + 1)])
    lock = threading.Condition()
    in_flight = [0]

    def done(fut, t0: float, second: int, binding: bool) -> None:
        latency = time.perf_counter() - t0
        code = fut.code()
        with lock:
            if code == grpc.StatusCode.OK:
                if not binding:
                    report.ok += 1
                    report.latency_s[second].append(latency)
            else:
                report.errors[code.name] = report.errors.get(code.name, 0) + 1
            in_flight[0] -= 1
            lock.notify_all()

    options = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]
    with grpc.insecure_channel(target, options) as channel:
        stub = engine_pb2_grpc.DecisionEngineStub(channel)
        grpc.channel_ready_future(channel).result(timeout=30)
        total = int(rate_per_s * seconds)
        cpu0 = cpu_seconds(pid) if pid is not None else float("nan")
        start = time.perf_counter()
        next_rss = 0
        for i in range(total):
            due = start + i / rate_per_s
            now = time.perf_counter()
            if due > now:
                time.sleep(due - now)
            second = int((time.perf_counter() - start))
            if pid is not None and second >= next_rss:
                report.rss.append((second, rss_bytes(pid)))
                next_rss = second + 1
            request = reqs[i % len(reqs)]
            calls = [(stub.ScoreNodes, request, False)]
            if bind_every and i % bind_every == 0:
                calls.append((stub.ReportBinding, engine_pb2.ReportBindingRequest(
                    pod=request.pod, node=request.candidates[i % len(request.candidates)]), True))
            for method, message, binding in calls:
                with lock:
                    in_flight[0] += 1
                t0 = time.perf_counter()
                fut = method.future(message, timeout=timeout_s)
                fut.add_done_callback(lambda f, t0=t0, s=min(second, len(report.latency_s) - 1), b=binding:
                                      done(f, t0, s, b))
                report.sent += not binding
        with lock:
            lock.wait_for(lambda: in_flight[0] == 0, timeout=timeout_s + 5)
        report.elapsed_s = time.perf_counter() - start
        if pid is not None:
            report.rss.append((int(report.elapsed_s), rss_bytes(pid)))
            report.server_cpu_s = cpu_seconds(pid) - cpu0
    return report
