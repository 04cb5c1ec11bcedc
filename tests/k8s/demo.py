"""`make k8s-demo`: the td3-scheduler on a live control plane, on the end-to-end tests' harness.

50 fake nodes of the tiny scenario's two shapes (40 CPU nodes, 10 GPU nodes), their node_exporter
metrics (a seeded CPU and memory load per node; a few over the 90% safety threshold) through a real
Prometheus, the decision engine serving models/td3-dlrm, and the td3-scheduler (TD3Score). The first
500 pods of the tiny scenario's trace are created with `schedulerName: td3-scheduler`; then a table
says where each went and why: the engine's action (weights, tau), the chosen node's score against
the runner-up's, or the static score and the reason when the engine's answer was not used.

    make k8s-demo        # or: python -m tests.k8s.demo [--pods 500]
"""

from __future__ import annotations

import argparse
import collections
import csv
import gzip
import tempfile
import time
from concurrent import futures
from pathlib import Path

import numpy as np

from tests.engine.prometheus_harness import NodeExporterStub, PrometheusServer, SimulatedNode, ensure_prometheus, wait_for
from tests.k8s.control_plane import (REPO, ControlPlane, Engine, Processes, Scheduler, build_binaries, plugin_config,
                                     wait_rates_settled)

TINY_PODS = REPO / "src" / "td3sched" / "scenarios" / "tiny" / "pods.csv.gz"
SAFETY = 0.9


def tiny_pods(n: int) -> list[dict]:
    with gzip.open(TINY_PODS, "rt") as f:
        rows = list(csv.DictReader(f))[:n]
    return [{"name": r["name"].replace("_", "-"), "cpu_milli": int(float(r["request_cpu_milli"])),
             "mem_mib": int(float(r["request_mem_mib"])), "gpus": int(r["gpu_count"])} for r in rows]


def fake_nodes(seed: int = 7) -> list[tuple[SimulatedNode, dict]]:
    rng = np.random.default_rng(seed)
    nodes = []
    for i in range(50):
        gpu = i >= 40
        busy = float(rng.uniform(0.05, 0.85)) if i % 12 else 0.95  # every twelfth node over the threshold
        node = SimulatedNode(f"{'gpu' if gpu else 'cpu'}-{i:02d}", 96 if gpu else 192, busy, 768 if gpu else 1024,
                             float(rng.uniform(0.1, 0.7)))
        nodes.append((node, {"nvidia.com/gpu": "8"} if gpu else {}))
    return nodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pods", type=int, default=500)
    parser.add_argument("--rows", type=int, default=30, help="Rows of the placement table to print.")
    args = parser.parse_args()
    bins, _ = build_binaries()
    processes = Processes()
    prom = exporter = None
    folder = Path(tempfile.mkdtemp(prefix="k8s-demo-"))
    try:
        (folder / "control-plane").mkdir()
        plane = ControlPlane(folder / "control-plane", bins, processes)
        plane.start()
        nodes = fake_nodes()
        for node, extra in nodes:
            plane.create_node(node.name, node.cores * 1000, int(node.mem_bytes / 2**20), extra=extra)
        exporter = NodeExporterStub([n for n, _ in nodes])
        (folder / "prometheus").mkdir()
        prom = PrometheusServer(ensure_prometheus(), folder / "prometheus", f"127.0.0.1:{exporter.port}")
        prom.start()
        wait_rates_settled(prom, exporter.nodes)
        engine = Engine(folder / "engine", prom, processes)
        engine.wait_fresh([n.name for n, _ in nodes])
        scheduler = Scheduler("td3-scheduler", bins / "td3-scheduler",
                              plugin_config(f"127.0.0.1:{engine.grpc_port}", prom), plane, processes)
        plane.create_namespace("demo")
        pods = tiny_pods(args.pods)
        start = time.monotonic()
        with futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda p: plane.create_pod("demo", p["name"], "td3-scheduler", f"{p['cpu_milli']}m",
                                                     f"{p['mem_mib']}Mi",
                                                     {"nvidia.com/gpu": str(p["gpus"])} if p["gpus"] else None), pods))
        last, still = -1, 0
        while still < 10:  # until no pod was bound for 5 s
            bound = plane.bindings("demo")
            still = still + 1 if len(bound) == last else 0
            last = len(bound)
            if last == len(pods):
                break
            time.sleep(0.5)
        seconds = time.monotonic() - start
        records = wait_for(lambda: (r := engine.records()) and sum(x["kind"] == "binding" for x in r) >= len(bound) and r,
                           deadline_s=10) or engine.records()
        report(pods, nodes, bound, records, seconds, args.rows)
        reasons = {r: scheduler.metric("td3score_fallbacks_total", reason=r) for r in
                   ("timeout", "unavailable", "error", "nan", "invalid", "missing_node", "advisory", "bad_pod")}
        batched = scheduler.metric("scheduler_batch_attempts_total", result="hint_used")
        print(f"static scores by reason (td3score_fallbacks_total): { {r: int(v) for r, v in reasons.items() if v} } "
              f"(engine deadline 15 ms); batched onto the previous identical pod's runner-up without an engine "
              f"call (SignPod, scheduler_batch_attempts_total{{result=\"hint_used\"}}): {int(batched)}")
        print(f"\nlogs and the decision log: {folder}")
    finally:
        processes.stop_all()
        for server in (prom, exporter):  # started before the processes list existed for them
            if server is not None:
                server.stop()


def report(pods, nodes, bound, records, seconds, rows) -> None:
    decisions = {r["decision_id"]: r for r in records if r["kind"] == "decision"}
    bindings = {r["pod"]["name"]: r for r in records if r["kind"] == "binding"}
    hot = {n.name for n, _ in nodes if n.cpu_busy > SAFETY}
    print(f"\n{len(bound)} of {len(pods)} pods bound in {seconds:.1f} s on {len(set(bound.values()))} of {len(nodes)} "
          f"nodes; nodes over the {SAFETY:.0%} CPU safety threshold: {sorted(hot)} (pods on them: "
          f"{sum(n in hot for n in bound.values())})")
    print(f"\n{'pod':<16} {'CPU m':>7} {'mem MiB':>8} {'GPU':>3}  {'node':<7} {'why':<44} {'score':>5} {'runner-up':>13}")
    why_counts = collections.Counter()
    for i, p in enumerate(pods):
        node = bound.get(p["name"])
        b = bindings.get(p["name"])
        d = decisions.get(b["decision_id"]) if b and b["decision_id"] else None
        if node is None:
            why, score, runner = "pending (fits no node that passes Filter)", "", ""
        elif d is None:
            why, score, runner = "no engine answer: static score, or batched", "", ""
        else:
            scores = {c["node"]: c["score"] for c in d["candidates"]}
            others = sorted(((s, n) for n, s in scores.items() if n != node), reverse=True)
            w = ", ".join(f"{x:.2f}" for x in d["weights"])
            why = f"engine: w=[{w}] tau={d['tau']:.2f}" + (f" ({d['fallback_reason']})" if d["fallback_reason"] else "")
            score = str(scores.get(node, ""))
            runner = f"{others[0][0]} {others[0][1]}" if others else "-"
        why_counts[why.split(":")[0].split(" (")[0]] += 1
        if i < rows:
            print(f"{p['name']:<16} {p['cpu_milli']:>7} {p['mem_mib']:>8} {p['gpus']:>3}  {node or '-':<7} {why:<44} "
                  f"{score:>5} {runner:>13}")
    print(f"... ({len(pods) - rows} more)\n\nwhy, all pods: {dict(why_counts)}")
    per_node = collections.Counter(bound.values())
    print(f"pods per node (busiest 10): {per_node.most_common(10)}")


if __name__ == "__main__":
    main()
