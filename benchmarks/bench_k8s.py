"""Scheduling throughput on a real control plane, side by side in one run (issue 11, section 6): the
stock kube-scheduler alone; the td3-scheduler (TD3Score plugin, engine over gRPC) serving a model that
decides per pod, asking the engine for every pod (td3-scheduler) or running the engine's model in the
plugin (td3-inprocess: `inference: plugin`, no engine call on the scheduling cycle), and a model that
holds its action (one engine call per hold, the pods of the hold scored in the plugin); a fragmentation
model run in the plugin (td3-fragmentation: `inference: plugin` with a model whose action carries FGD's
share, by default the shipped blend, so every pod's scores also take FGD's fragmentation decrease over
the scheduler's own allocation); and the stock kube-scheduler with the engine as its HTTP extender. The same fake cluster (Node objects, node_exporter metrics through a real Prometheus), the
same pods.

For each scheduler the pods are created first, with that scheduler's name and no scheduler running,
then the scheduler starts; pods/s is measured from its first to its last successful scheduling
attempt (its own `scheduler_schedule_attempts_total{result="scheduled"}`, polled), so pod creation
and process start do not count. Latency: the p99 of the scheduler's own
`scheduler_scheduling_attempt_duration_seconds{result="scheduled"}` (histogram buckets, interpolated
as PromQL's histogram_quantile does). Goal: the plugin path at least 0.9x the stock throughput.

    make k8s-bin && python benchmarks/bench_k8s.py [--nodes 1000] [--pods 5000] [--model DIR] [--held-model DIR]
        [--fragmentation-model DIR] [--gpu-pools]
        [--schedulers stock,td3-scheduler,td3-inprocess,td3-held,td3-extender,td3-fragmentation] [--rounds 1]
        [--plugin-metrics-interval S]

With ``--gpu-pools`` the cluster has the two pools of dlrm's typical pods (the shipped blend's card):
every other node is labelled td3sched.io/pool=gpu and has 8 nvidia.com/gpu, the rest pool=cpu, and every
fourth pod asks for one GPU, so that FGD's term has GPUs and typical pods to measure. Every scheduler of
the run gets that cluster and those pods.

With ``--rounds N`` the chosen schedulers run N times, the even rounds in reverse order (stock, td3-held;
td3-held, stock; ...), and each ratio is against the stock run of its own round: on a shared machine
consecutive runs of one scheduler differ, and the rounds show by how much; and the machine's background
load drifts during a benchmark (Prometheus' CPU grows as its head block fills), which the reversed rounds
cancel from the mean ratio as far as it is linear in time. Every run also reports the CPU seconds per pod of
each process (the scheduler, kube-apiserver, etcd, the engines, Prometheus, and this process, which
serves the node_exporter metrics) and how busy the whole machine was: a run whose machine is busy
throughout is bound by CPU, and its pods/s follows the cluster's CPU per pod.

All processes on 127.0.0.1; the binaries from build/k8s/<version> (make k8s-bin). Every scheduler gets
client QPS 5,000 (the default 50 would cap every path at 50 bindings/s) and the default
percentageOfNodesToScore.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import tempfile
import time
from concurrent import futures
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from td3sched.engine.prometheus_source import DEFAULT_QUERIES  # noqa: E402
from td3sched.evaluate.stats import summarize  # noqa: E402
from td3sched.rl.actions import card_action_dimensions, card_action_hold  # noqa: E402
from td3sched.rl.card import read_card  # noqa: E402
from tests.engine.prometheus_harness import (NodeExporterStub, PrometheusServer, SimulatedNode,  # noqa: E402
                                             ensure_prometheus, wait_for)
from tests.k8s.control_plane import (ControlPlane, Engine, Processes, Scheduler, build_binaries,  # noqa: E402
                                     extender_config, plugin_config, shipped_config, wait_rates_settled)

GOAL_PLUGIN_RATIO = 0.9
SCRAPE_S = 2
QUERIES = {name: q.replace("[1m]", f"[{5 * SCRAPE_S}s]") for name, q in DEFAULT_QUERIES.items()}
CLIENT = {"qps": 5000, "burst": 5000}
MODEL = REPO / "models" / "td3-dlrm"
HELD_MODEL = REPO / "models" / "td3-dlrm-held"
FRAGMENTATION_MODEL = REPO / "models" / "static-blend-dlrm-small"
SCHEDULERS = ("stock", "td3-scheduler", "td3-inprocess", "td3-held", "td3-extender", "td3-fragmentation")
POOL_LABEL = "td3sched.io/pool"  # the engine's and the plugin's default
GPU_NODE = {"nvidia.com/gpu": "8"}
GPU_POD = {"nvidia.com/gpu": "1"}


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """PromQL's histogram_quantile over cumulative (le, count) buckets."""
    buckets = sorted(buckets)
    total = buckets[-1][1]
    if total == 0:
        return math.nan
    rank = q * total
    prev_le, prev_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if math.isinf(le):
                return prev_le
            return prev_le + (le - prev_le) * (rank - prev_count) / max(count - prev_count, 1e-12)
        prev_le, prev_count = le, count
    return buckets[-1][0]


def attempt_buckets(metrics: str, profile: str) -> list[tuple[float, float]]:
    out = []
    for line in metrics.splitlines():
        if line.startswith("scheduler_scheduling_attempt_duration_seconds_bucket{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            if labels.get("result") == "scheduled" and labels.get("profile") == profile:
                out.append((float(labels["le"]), float(line.rsplit(" ", 1)[1])))
    return out


def shipped_metrics_interval() -> float:
    """metricsIntervalSeconds of scheduler/config/td3-scheduler.yaml."""
    return float(shipped_config("td3-scheduler.yaml")["profiles"][0]["pluginConfig"][0]["args"]["metricsIntervalSeconds"])


def with_client(config: dict) -> dict:
    config["clientConnection"] = {**config.get("clientConnection", {}), **CLIENT}
    return config


def stock_config() -> dict:
    return with_client({"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
                        "leaderElection": {"leaderElect": False}, "profiles": [{"schedulerName": "stock"}]})


def create_pods(plane: ControlPlane, namespace: str, scheduler: str, n: int, gpu_pools: bool,
                threads: int = 8) -> None:
    """``gpu_pools``: every fourth pod also asks for one GPU."""
    def one(i):
        plane.create_pod(namespace, f"{scheduler}-{i:05d}", scheduler, cpu=f"{100 + (i % 8) * 50}m",
                         memory=f"{128 + (i % 16) * 32}Mi", extra=GPU_POD if gpu_pools and i % 4 == 0 else None)
    with futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(n)))


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, over every core (/proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:8]]
    idle = fields[3] + fields[4]  # idle + iowait
    tick = os.sysconf("SC_CLK_TCK")
    return (sum(fields) - idle) / tick, sum(fields) / tick


def run(plane, processes, bins, name: str, kind: str, config: dict, namespace: str, pods: int,
        watched: dict[str, int], gpu_pools: bool) -> dict:
    """One scheduler's run; ``watched``: other processes (name -> pid) whose CPU seconds are reported."""
    create_pods(plane, namespace, name, pods, gpu_pools)
    before = {n: cpu_seconds(pid) for n, pid in watched.items()}
    machine_before = machine_cpu()
    scheduler = Scheduler(f"bench-{name}", bins / ("td3-scheduler" if kind == "plugin" else "kube-scheduler"),
                          config, plane, processes)
    samples = []  # (time, pods scheduled)
    try:
        end = time.monotonic() + 1800
        while True:
            if time.monotonic() > end:
                raise RuntimeError(f"{name}: {samples[-1][1] if samples else 0:.0f} of {pods} pods scheduled "
                                   "in 1,800 s")
            done = scheduler.metric("scheduler_schedule_attempts_total", result="scheduled", profile=name)
            samples.append((time.monotonic(), done))
            if done >= pods:
                break
            time.sleep(0.25)
        metrics = scheduler.metrics()
        cpu = {"scheduler": cpu_seconds(scheduler.process.proc.pid),
               **{n: cpu_seconds(pid) - before[n] for n, pid in watched.items()}}
        busy, total = (after - b for after, b in zip(machine_cpu(), machine_before))
    finally:
        scheduler.stop()
    bound = sum(1 for p in plane.pods(namespace) if p["spec"].get("nodeName"))
    started = next(t for t, d in samples if d > 0)
    seconds = samples[-1][0] - started
    result = {"scheduler": name, "pods": pods, "bound": bound, "seconds": seconds,
              "pods_per_s": (samples[-1][1] - next(d for t, d in samples if d > 0)) / seconds if seconds > 0 else math.nan,
              "p99_attempt_ms": 1000 * histogram_quantile(0.99, attempt_buckets(metrics, name)),
              "p50_attempt_ms": 1000 * histogram_quantile(0.50, attempt_buckets(metrics, name)),
              "cpu_s": cpu, "machine_busy": busy / total if total > 0 else math.nan,
              "machine_cpu_s": busy}
    if kind == "plugin":
        result["fallbacks"] = {m.group(1): float(m.group(2)) for m in
                               re.finditer(r'^td3score_fallbacks_total\{reason="(\w+)"\} (\S+)$', metrics, re.M)}
        result["sources"] = {m.group(1): float(m.group(2)) for m in
                             re.finditer(r'^td3score_decisions_total\{source="(\w+)"\} (\S+)$', metrics, re.M)}
    plane.request("DELETE", f"/api/v1/namespaces/{namespace}/pods",
                  {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}, timeout_s=600)
    wait_for(lambda: not plane.pods(namespace), deadline_s=600)
    return result


def report(results: list[dict], args) -> None:
    """The table (each ratio against the stock run of the same round), the goal, and CPU per pod."""
    stock = {r["round"]: r["pods_per_s"] for r in results if r["scheduler"] == "stock"}
    for r in results:
        r["x_stock"] = r["pods_per_s"] / stock[r["round"]]
    print(f"\n{args.nodes} nodes, {args.pods} pods; scheduling attempts of scheduled pods, from the scheduler's /metrics")
    print(f"per-pod model {args.model.name}, held model {args.held_model.name}, fragmentation model "
          f"{args.fragmentation_model.name}; {'two pools, half the nodes with 8 GPUs, a quarter of the pods asking one' if args.gpu_pools else 'no GPUs'}; "
          f"the plugin's metrics interval {args.plugin_metrics_interval:g} s")
    print(f"{'round':>5} {'scheduler':>17} {'pods/s':>8} {'x stock':>8} {'p50 ms':>8} {'p99 ms':>8} {'busy':>5}  bound  "
          "scores by source, fallbacks")
    for r in results:
        print(f"{r['round']:>5} {r['scheduler']:>17} {r['pods_per_s']:>8.1f} {r['x_stock']:>8.2f} "
              f"{r['p50_attempt_ms']:>8.1f} {r['p99_attempt_ms']:>8.1f} {100 * r['machine_busy']:>4.0f}%  {r['bound']:>5}  "
              f"{r.get('sources', '')} {r.get('fallbacks', '')}")
    for name in dict.fromkeys(r["scheduler"] for r in results if r["scheduler"] != "stock"):
        ratios = [r["x_stock"] for r in results if r["scheduler"] == name]
        mean = sum(ratios) / len(ratios)
        spread, verdict = "", "met" if mean >= GOAL_PLUGIN_RATIO else "not met"
        if len(ratios) > 1:
            interval = summarize(ratios)
            spread = (f" (rounds {min(ratios):.2f}-{max(ratios):.2f}; 95% interval {interval.low:.2f}-"
                      f"{interval.high:.2f})")
            if mean >= GOAL_PLUGIN_RATIO > interval.low:
                verdict = "met on the mean; the interval reaches below it"
        if name == "td3-extender":
            print(f"{name}: extender path {mean:.2f}x the stock scheduler{spread}")
        else:
            print(f"{name}: plugin path {mean:.2f}x the stock scheduler{spread} (goal >= {GOAL_PLUGIN_RATIO}): {verdict}")
    print("\nCPU seconds per pod while each scheduler ran (from its start to its last pod), and the whole machine's:")
    names = list(results[0]["cpu_s"])
    print(f"{'round':>5} {'scheduler':>17} " + " ".join(f"{n:>12}" for n in names) + f" {'all listed':>12} {'machine':>12}")
    for r in results:
        listed = sum(r["cpu_s"].values())
        print(f"{r['round']:>5} {r['scheduler']:>17} " + " ".join(f"{1000 * r['cpu_s'][n] / r['pods']:>9.2f} ms" for n in names)
              + f" {1000 * listed / r['pods']:>9.2f} ms {1000 * r['machine_cpu_s'] / r['pods']:>9.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--model", type=Path, default=MODEL, help="The per-pod model (default: %(default)s).")
    parser.add_argument("--held-model", type=Path, default=HELD_MODEL,
                        help="A model whose card declares action_hold_s (default: %(default)s).")
    parser.add_argument("--fragmentation-model", type=Path, default=FRAGMENTATION_MODEL,
                        help="A per-pod model whose action carries a fragmentation share, run in the plugin by "
                             "td3-fragmentation (default: %(default)s).")
    parser.add_argument("--gpu-pools", action="store_true",
                        help="Two pools (gpu: 8 GPUs a node, every other node; cpu), every fourth pod asking one GPU.")
    parser.add_argument("--schedulers", default=",".join(SCHEDULERS),
                        help="Which schedulers to run, comma-separated, stock first (default: %(default)s).")
    parser.add_argument("--rounds", type=int, default=1, help="Run the schedulers this many times, interleaved.")
    parser.add_argument("--plugin-metrics-interval", type=float, default=shipped_metrics_interval(),
                        help="The plugin's metricsIntervalSeconds, s (default: the shipped configuration's, "
                             "%(default)g). Each refresh runs the plugin's PromQL over every node in Prometheus, "
                             "which shares the machine's cores here.")
    parser.add_argument("--out", type=Path, help="Also write the results here as JSON.")
    args = parser.parse_args()
    chosen = [x.strip() for x in args.schedulers.split(",") if x.strip()]
    unknown = [x for x in chosen if x not in SCHEDULERS]
    if unknown or not chosen or chosen[0] != "stock" or len(set(chosen)) != len(chosen):
        parser.error(f"--schedulers {args.schedulers!r}: expected distinct names of {', '.join(SCHEDULERS)}, "
                     "stock first")
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: expected at least 1")
    if not args.plugin_metrics_interval > 0:
        parser.error(f"--plugin-metrics-interval {args.plugin_metrics_interval}: expected seconds > 0")
    for flag, folder, held in (("--model", args.model, False), ("--held-model", args.held_model, True),
                               ("--fragmentation-model", args.fragmentation_model, False)):
        try:
            card = read_card(folder)
            hold, dimensions = card_action_hold(card), card_action_dimensions(card)
        except (OSError, ValueError) as exc:
            parser.error(f"{flag} {folder}: {exc}")
        if bool(hold) != held:
            parser.error(f"{flag} {folder}: its card's action_hold_s is {hold:g}: expected "
                         f"{'a hold > 0' if held else 'none (a per-pod model)'}")
        if flag == "--fragmentation-model" and "frag" not in dimensions:
            parser.error(f"{flag} {folder}: its action is {', '.join(dimensions)}: expected a fragmentation share "
                         "(frag)")

    bins, build_s = build_binaries()
    print(f"binaries: {bins.relative_to(REPO)} (make k8s-bin: {build_s:.0f} s)")
    processes = Processes()
    prom = exporter = None
    folder = Path(tempfile.mkdtemp(prefix="bench-k8s-"))
    try:
        plane = ControlPlane(folder / "control-plane", bins, processes)
        (folder / "control-plane").mkdir(parents=True)
        plane.start()
        nodes = [SimulatedNode(f"node-{i:04d}", 16, 0.1 + 0.75 * ((i * 37) % 100) / 100 if i % 50 else 0.95, 64,
                               0.1 + 0.6 * ((i * 53) % 100) / 100) for i in range(args.nodes)]

        def create_node(i: int) -> None:
            gpu = args.gpu_pools and i % 2 == 0
            plane.create_node(nodes[i].name, nodes[i].cores * 1000, int(nodes[i].mem_bytes / 2**20),
                              extra=GPU_NODE if gpu else None,
                              labels={POOL_LABEL: "gpu" if gpu else "cpu"} if args.gpu_pools else None)
        start = time.monotonic()
        with futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(create_node, range(args.nodes)))
        print(f"{args.nodes} fake nodes in {time.monotonic() - start:.0f} s")
        exporter = NodeExporterStub(nodes)
        (folder / "prometheus").mkdir()
        prom = PrometheusServer(ensure_prometheus(), folder / "prometheus", f"127.0.0.1:{exporter.port}",
                                scrape_interval_s=SCRAPE_S)
        prom.start()
        wait_rates_settled(prom, nodes, deadline_s=180, queries=QUERIES)
        prometheus = {"url": prom.url, "interval_s": float(SCRAPE_S), "queries": QUERIES}
        engine = Engine(folder / "engine", prom, processes, decision_log=None, model=str(args.model),
                        prometheus=prometheus)
        engine.wait_fresh([n.name for n in nodes[:100]])
        held = Engine(folder / "engine-held", prom, processes, decision_log=None, model=str(args.held_model),
                      prometheus=prometheus)
        held.wait_fresh([n.name for n in nodes[:100]])
        fragmentation = None
        if "td3-fragmentation" in chosen:  # serves the model's graph and typical pods to the plugin; its own
            # decisions (the probe below, a fallback) need the nodes' allocation: it watches pods and nodes
            fragmentation = Engine(folder / "engine-fragmentation", prom, processes, decision_log=None,
                                   model=str(args.fragmentation_model), prometheus=prometheus,
                                   kubernetes={"kubeconfig": str(plane.kubeconfig)})
            fragmentation.wait_fresh([n.name for n in nodes[:100]])

        def plugin(address: str, name: str, **extra) -> dict:
            config = with_client(plugin_config(address, prom, metricsIntervalSeconds=args.plugin_metrics_interval,
                                               **extra))
            config["profiles"][0]["schedulerName"] = name  # the pods' schedulerName
            config["profiles"][0]["pluginConfig"][0]["args"]["queries"] = QUERIES
            return config
        configs = {"stock": ("stock", stock_config()),
                   "td3-scheduler": ("plugin", plugin(f"127.0.0.1:{engine.grpc_port}", "td3-scheduler")),
                   "td3-inprocess": ("plugin", plugin(f"127.0.0.1:{engine.grpc_port}", "td3-inprocess",
                                                      inference="plugin")),
                   "td3-held": ("plugin", plugin(f"127.0.0.1:{held.grpc_port}", "td3-held")),
                   "td3-extender": ("extender", with_client(extender_config(f"http://127.0.0.1:{engine.http_port}")))}
        watched = {"apiserver": plane.apiserver.proc.pid, "etcd": plane.etcd.proc.pid,
                   "engine": engine.process.proc.pid, "engine-held": held.process.proc.pid,
                   "prometheus": prom.proc.pid, "bench": os.getpid()}
        if fragmentation is not None:
            configs["td3-fragmentation"] = ("plugin", plugin(f"127.0.0.1:{fragmentation.grpc_port}",
                                                             "td3-fragmentation", inference="plugin"))
            watched["engine-fragmentation"] = fragmentation.process.proc.pid
        results = []
        for round_ in range(1, args.rounds + 1):
            for name in (chosen if round_ % 2 else chosen[::-1]):
                kind, config = configs[name]
                namespace = f"bench-{name}-{round_}"
                plane.create_namespace(namespace)
                r = run(plane, processes, bins, name, kind, config, namespace, args.pods, watched, args.gpu_pools)
                r["round"] = round_
                results.append(r)
                print(f"  round {round_} {name}: {r['bound']}/{r['pods']} bound in {r['seconds']:.1f} s: "
                      f"{r['pods_per_s']:.1f} pods/s, attempt p99 {r['p99_attempt_ms']:.1f} ms, machine busy "
                      f"{100 * r['machine_busy']:.0f}% {r.get('fallbacks', '')}", flush=True)
    finally:
        processes.stop_all()
        for server in (prom, exporter):  # started before the processes list existed for them
            if server is not None:
                server.stop()
    report(results, args)
    if args.out:
        args.out.write_text(json.dumps({"nodes": args.nodes, "pods": args.pods, "results": results}, indent=1))


if __name__ == "__main__":
    main()
