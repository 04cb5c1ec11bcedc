"""Decision-engine speed, everything side by side in one run (issue: the decision engine, section 6).

1. ScoreNodes over loopback gRPC at 100 and 5,000 candidates: p50 / p99 of the engine against a
   no-op server of the same kind (same gRPC stack, same request, a reply of the same size with no
   decision behind it). Goal: engine p99 at most 1.3x the no-op's.
2. One decision's inference: ONNX Runtime (one intra-op thread) against torch eager (one thread),
   batch 1. Goal: ONNX at least 3x faster.
3. Decisions/s with 1, 4 and 16 concurrent clients (100 candidates), with each setting's p99, and
   the engine's own p99 (its latency histogram) with clients paced to 1,000 decisions/s.

    python benchmarks/bench_engine.py [--calls 2000] [--model models/td3-dlrm] [--pace-s 5]

Run on an otherwise idle machine; the figures below are what one run printed.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc
import numpy as np

from td3sched.engine.decision import DecisionEngine, ModelSlot
from td3sched.engine.grpc_server import GrpcFrontDoor
from td3sched.engine.service import EngineService
from td3sched.engine.state import NodeSnapshot, ShadowState
from td3sched.engine.v1 import engine_pb2, engine_pb2_grpc
from td3sched.rl.observation import OBSERVATION_SIZE
from td3sched.rl.onnx_actor import load_actor

REPO = Path(__file__).resolve().parents[1]
GOAL_P99_RATIO = 1.3
GOAL_ONNX_SPEEDUP = 3.0


def snapshot(n: int, seed: int = 0) -> NodeSnapshot:
    rng = np.random.default_rng(seed)
    alloc = np.tile([64000.0, 262144.0, 1000.0, 100.0], (n, 1))
    cap = np.tile([64000.0, 262144.0, 1.0, 25000.0], (n, 1))
    observed = rng.uniform(0.05, 0.85, size=(n, 4)) * cap
    now = time.time()
    return NodeSnapshot(tuple(f"node-{i:05d}" for i in range(n)), alloc, cap, observed, np.full(n, now + 3600.0),
                        taken_at_s=now)


class NoOp(engine_pb2_grpc.DecisionEngineServicer):
    """Answers ScoreNodes with a reply of the engine's shape and size, deciding nothing."""

    def ScoreNodes(self, request, context):
        reply = engine_pb2.ScoreNodesResponse(
            action=engine_pb2.Action(pre_activations=[0.0] * 5, weights=[0.25] * 4, tau=0.0, action_mode="full"),
            model_version="noop", decision_id="noop")
        add = reply.scores.add
        for n in request.candidates:
            add(node=n, score=50)
        return reply


def noop_server() -> tuple[grpc.Server, int]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    engine_pb2_grpc.add_DecisionEngineServicer_to_server(NoOp(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port


def latencies(port: int, request, calls: int) -> np.ndarray:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = engine_pb2_grpc.DecisionEngineStub(channel)
        for _ in range(min(50, calls)):
            stub.ScoreNodes(request, timeout=10)
        out = np.empty(calls)
        for i in range(calls):
            t0 = time.perf_counter()
            stub.ScoreNodes(request, timeout=10)
            out[i] = time.perf_counter() - t0
    return out


def throughput(port: int, request, clients: int, seconds: float, pace_per_s: float | None = None):
    """(decisions/s, client p99 s) of ``clients`` threads calling for ``seconds``."""
    lat: list[float] = []
    lock = threading.Lock()
    end = time.perf_counter() + seconds

    def client():
        mine = []
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = engine_pb2_grpc.DecisionEngineStub(channel)
            interval = clients / pace_per_s if pace_per_s else 0.0
            next_t = time.perf_counter()
            while time.perf_counter() < end:
                t0 = time.perf_counter()
                stub.ScoreNodes(request, timeout=10)
                mine.append(time.perf_counter() - t0)
                if interval:
                    next_t += interval
                    time.sleep(max(0.0, next_t - time.perf_counter()))
        with lock:
            lat.extend(mine)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(lat) / (time.perf_counter() - start), float(np.quantile(lat, 0.99))


def ms(x: float) -> str:
    return f"{1000 * x:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="ScoreNodes calls per latency measurement (100 nodes).")
    parser.add_argument("--model", default=str(REPO / "models" / "td3-dlrm"))
    parser.add_argument("--seconds", type=float, default=5.0, help="Length of each throughput run.")
    args = parser.parse_args()

    actor = load_actor(args.model)
    state = ShadowState()
    state.publish(snapshot(5000))
    service = EngineService(DecisionEngine(state, ModelSlot(actor)))
    engine = GrpcFrontDoor(service, "127.0.0.1", 0, max_workers=16)
    noop, noop_port = noop_server()
    pod = engine_pb2.Pod(name="bench", cpu_milli=500, mem_mib=1024)

    print(f"model {Path(args.model).name} ({actor.version}), one intra-op thread; loopback gRPC, sequential calls")
    print(f"{'candidates':>10} {'engine p50 ms':>14} {'engine p99 ms':>14} {'no-op p50 ms':>13} {'no-op p99 ms':>13} "
          f"{'p99 ratio':>9}  goal <= {GOAL_P99_RATIO}")
    for n in (100, 5000):
        request = engine_pb2.ScoreNodesRequest(pod=pod, candidates=list(state.snapshot.names[:n]))
        calls = args.calls if n <= 100 else max(200, args.calls // 10)
        e, z = latencies(engine.port, request, calls), latencies(noop_port, request, calls)
        ratio = np.quantile(e, 0.99) / np.quantile(z, 0.99)
        print(f"{n:>10} {ms(np.median(e)):>14} {ms(np.quantile(e, 0.99)):>14} {ms(np.median(z)):>13} "
              f"{ms(np.quantile(z, 0.99)):>13} {ratio:>9.2f}  {'met' if ratio <= GOAL_P99_RATIO else 'NOT met'}")

    obs = np.asarray(state.snapshot.observed[0].tolist() * 9, dtype=np.float32)[:OBSERVATION_SIZE]
    onnx_s = timed(lambda: actor.act(obs), 5000)
    try:
        import torch

        from td3sched.rl.model import load_model

        torch.set_num_threads(1)
        model = load_model(args.model)
        torch_s = timed(lambda: model.act(obs), 5000)
        speedup = torch_s / onnx_s
        print(f"\none decision's inference (batch 1, median of 5 x 1000): ONNX Runtime {1e6 * onnx_s:.1f} us, "
              f"torch eager {1e6 * torch_s:.1f} us: {speedup:.1f}x  goal >= {GOAL_ONNX_SPEEDUP}x "
              f"{'met' if speedup >= GOAL_ONNX_SPEEDUP else 'NOT met'}")
    except ImportError:
        print(f"\none decision's inference: ONNX Runtime {1e6 * onnx_s:.1f} us (torch not installed: no comparison)")

    request = engine_pb2.ScoreNodesRequest(pod=pod, candidates=list(state.snapshot.names[:100]))
    print(f"\n{'clients':>7} {'decisions/s':>12} {'client p99 ms':>14}   (100 candidates, {args.seconds:g} s each)")
    for clients in (1, 4, 16):
        rate, p99 = throughput(engine.port, request, clients, args.seconds)
        print(f"{clients:>7} {rate:>12,.0f} {ms(p99):>14}")
    before = service.metrics.latency.labels("score_nodes")
    rate, p99 = throughput(engine.port, request, 8, args.seconds, pace_per_s=1000.0)
    print(f"paced to 1,000/s by 8 clients: {rate:,.0f} decisions/s, client p99 {ms(p99)} ms, engine p99 "
          f"{engine_p99_ms(before)} (its histogram, whole run)")
    engine.stop(0)
    noop.stop(0)


def timed(fn, n: int) -> float:
    for _ in range(200):
        fn()
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n // 5):
            fn()
        runs.append((time.perf_counter() - t0) / (n // 5))
    return statistics.median(runs)


def engine_p99_ms(histogram) -> str:
    """The 99th percentile's bucket bound from the engine's latency histogram."""
    samples = {s.labels["le"]: s.value for m in histogram.collect() for s in m.samples if s.name.endswith("_bucket")}
    total = samples["+Inf"]
    for le, count in sorted(((float(k), v) for k, v in samples.items()), key=lambda kv: kv[0]):
        if count >= 0.99 * total:
            return f"<= {1000 * le:g} ms"
    return "n/a"


if __name__ == "__main__":
    main()
