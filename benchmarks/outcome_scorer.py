"""A placement critic trained on the pod's own outcome, and a score that listens to it (issue 9: learning that
can hear one placement).

    python benchmarks/outcome_scorer.py --scenario dlrm-small --train-days 14:18 --test-days 21:31 --seeds 3 \\
        --test-seeds 6 --lam 1 --lam 2 --reference static-weights:w=1/0/0/0:tau=0.3:frag=0.25 --workers 2

The cluster's reward spreads a placement's effect over every decision after it (one placement explains
under 1% of the return's variance, docs/td3.md). The history (schema 4) gives each placement its own
outcome: the hours its pod spent above its latency SLO on that node (``outcome_slo_h``). Three steps, in
one run:

1. **Collect.** The base policy (``--base``, the blend by default) on the train days, every decision
   recorded (``lifecycle.record``; the run's warm-up too, so that the long-lived pods placed before the
   days count). One row per placement of a latency-sensitive pod with its chosen node's features known.
2. **Fit.** ``rate(features)``: the pod's hours above the SLO per hour on its node, from the features a
   scheduler has at the placement (``placement_features``: the node's four utilisations and two requested
   shares with the pod, the pod's requests, and how the node stands among the candidates). A small
   network, weighted by the hours on the node (squared error); beside it the rate by tenth of the chosen
   node's CPU utilisation alone. Checked on the first test day's placements under the base: the
   weighted correlation of predicted and measured rates says how much of a pod's outcome the placement's
   features tell.
3. **Act.** The base's scores, scaled to [0, 1] over the candidates, minus ``lam`` x the predicted rate of
   each candidate (``OutcomeAware``): a pod leaves a node whose predicted rate is 0.1 above another's when
   the base prefers it by less than ``0.1 x lam``. Runs of the test days, paired with the base (``lam`` 0)
   by seed, and beside them any ``--reference`` policy (the base at another tau, kube-scheduler's default):
   the frontier a score moves along without the critic. Printed per run and as paired differences with
   95% intervals: the nodes' part of the cost (node-hours), the hours above the SLO, P99, and the
   objective's cost with the hours above the SLO priced at each ``--slo-hour`` (``rerank.cost``).

``--target node`` credits a placement with what it shares of its node's tail instead: the hours the
latency-sensitive pods on the node (the pod included) spent above their SLO while the pod was there
(``outcome_node_slo_h``, schema 5), for every pod, latency-sensitive or not; the critic also reads whether the
pod is latency-sensitive and the latency-sensitive pods already on each candidate (``NEIGHBOUR_FEATURES``), and
the score listens to it for every pod. A pod that heats its neighbours is charged for it, not only a pod that
is itself hot.

What it measures: whether a per-placement credit of the tail buys hours above the SLO cheaper than nodes
do, and at what price of the SLO hour a score that hears it beats the base.
"""

from __future__ import annotations

import argparse
import heapq
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rerank import cost  # noqa: E402

from td3sched.evaluate.stats import paired_difference  # noqa: E402
from td3sched.lifecycle.history import read_history  # noqa: E402
from td3sched.lifecycle.record import record_simulation  # noqa: E402
from td3sched.policy.assign_cache import AssignCache  # noqa: E402
from td3sched.policy.base import Policy  # noqa: E402
from td3sched.policy.features import requested_utilisation, utilisation  # noqa: E402
from td3sched.run import run_simulation  # noqa: E402
from td3sched.scenario import load_scenario  # noqa: E402
from td3sched.version import code_version  # noqa: E402

FEATURES = ("u_cpu", "u_mem", "u_io", "u_net", "r_cpu", "r_mem", "cpu cores", "mem GiB", "gpus",
            "u_cpu - coolest", "u_cpu - mean", "candidates (log)")
NEIGHBOUR_FEATURES = ("pod latency-sensitive", "latency-sensitive cores on the node", "latency-sensitive pods on the node")
"""What ``--target node`` adds: whether the pod is latency-sensitive, and the latency-sensitive pods already on each
candidate (their CPU requests in cores, and their count), as a scheduler that sees the pods' classes knows them."""


def placement_features(u: np.ndarray, r: np.ndarray, cpu_milli: float, mem_mib: float, gpus: int) -> np.ndarray:
    """[k, len(FEATURES)] for each candidate of one decision: its utilisations ``u`` [k, 4] and requested shares
    ``r`` [k, 2] with the pod on it, the pod's requests, and its CPU against the coolest and the mean
    candidate's."""
    k = len(u)
    pod = np.broadcast_to([cpu_milli / 1000.0, mem_mib / 1024.0, float(gpus)], (k, 3))
    rel = np.stack([u[:, 0] - u[:, 0].min(), u[:, 0] - u[:, 0].mean(), np.full(k, np.log(k))], axis=1)
    return np.hstack([u, r, pod, rel]).astype(np.float32)


def placements(path: Path, ls: dict, end_s: float, target: str = "pod") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features [n, F] of the chosen nodes, the target hours [n] and hours on the node [n], for the history file's
    placements with every candidate fresh. ``target`` "pod": latency-sensitive pods' placements, their own hours
    above the SLO (``outcome_slo_h``); "node": every placement, the hours the latency-sensitive pods on the node
    spent above theirs while the pod was there (``outcome_node_slo_h``), with ``NEIGHBOUR_FEATURES`` rebuilt by
    replaying the history's placements and departures in time order."""
    column = "outcome_slo_h" if target == "pod" else "outcome_node_slo_h"
    rows = read_history(path, ["pod_name", "cpu_milli", "mem_mib", "gpu_count", "candidates", "chosen_node",
                               "chosen_index", "outcome_left_s", column]).to_pylist()
    x, slo, on = [], [], []
    ls_cores: dict[str, float] = {}
    ls_pods: dict[str, int] = {}
    leaving: list[tuple[float, int, str, float]] = []
    for k, row in enumerate(rows):
        while leaving and leaving[0][0] <= row["time_s"]:
            _, _, node, cores = heapq.heappop(leaving)
            ls_cores[node] -= cores
            ls_pods[node] -= 1
        i, cands, node = row["chosen_index"], row["candidates"], row["chosen_node"]
        pod_ls = bool(ls[row["pod_name"]])
        left = row["outcome_left_s"] if row["outcome_left_s"] is not None else end_s
        usable = i is not None and row[column] is not None and not any(c["stale"] for c in cands)
        if usable and (pod_ls or target == "node"):
            u = np.array([[c["u_cpu"], c["u_mem"], c["u_io"], c["u_net"]] for c in cands])
            r = np.array([[c["r_cpu"], c["r_mem"]] for c in cands])
            f = placement_features(u, r, row["cpu_milli"], row["mem_mib"], row["gpu_count"])[i]
            if target == "node":
                f = np.concatenate([f, [float(pod_ls), ls_cores.get(node, 0.0), float(ls_pods.get(node, 0))]])
            x.append(f)
            slo.append(row[column])
            on.append(max(left - row["time_s"], 0.0) / 3600.0)
        if pod_ls and node is not None:
            cores = row["cpu_milli"] / 1000.0
            ls_cores[node] = ls_cores.get(node, 0.0) + cores
            ls_pods[node] = ls_pods.get(node, 0) + 1
            heapq.heappush(leaving, (left if row["outcome_left_s"] is not None else np.inf, k, node, cores))
    width = len(FEATURES) + (len(NEIGHBOUR_FEATURES) if target == "node" else 0)
    return np.array(x, dtype=np.float32).reshape(-1, width), np.array(slo), np.array(on)


def record_placements(job) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """One seed's recorded run of ``base`` over ``days`` (in a worker process): its placements (``placements``)
    and the decisions recorded."""
    scenario, base, seed, days, overrides, target = job
    overrides = [*overrides, f"spans.outcome=[{days[0]},{days[1]}]"]
    with tempfile.TemporaryDirectory(prefix="outcome-scorer-") as tmp:
        # every candidate kept: a placement's features read the coolest and the mean candidate
        record, path, n = record_simulation(scenario, base, seed, "outcome", tmp, overrides, candidates=0)
        world = load_scenario(scenario, overrides).build(seed).workload
        ls = dict(zip(world.name, world.latency_sensitive))
        return (*placements(path, ls, record["span"]["end_s"], target), n)


def collect(args, pool, days: tuple[int, int], seeds: range) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    xs, slos, ons = [], [], []
    jobs = [(args.scenario, args.base, seed, days, args.overrides, args.target) for seed in seeds]
    whose = "of latency-sensitive pods" if args.target == "pod" else "(every pod; the node's latency-sensitive pods')"
    for seed, (x, slo, on, n) in zip(seeds, pool.map(record_placements, jobs)):
        print(f"  days {days[0]}-{days[1]} seed {seed}: {n:,} decisions, {len(x):,} placements {whose}, "
              f"{slo.sum():,.1f} hours above the SLO in {on.sum():,.0f} on their nodes", flush=True)
        xs.append(x), slos.append(slo), ons.append(on)
    return np.concatenate(xs), np.concatenate(slos), np.concatenate(ons)


class RateModel:
    """``rate(features)``: a 2 x 32 network on standardised features, the squared error weighted by the hours on
    the node; predictions clipped to [0, ``cap``] (a share of time: 1 for a pod's own hours, the node's
    latency-sensitive pods' count for theirs, unbounded here)."""

    def __init__(self, x: np.ndarray, slo: np.ndarray, on: np.ndarray, seed: int = 0, steps: int = 3000,
                 cap: float = 1.0):
        import torch

        self.cap = cap
        torch.manual_seed(seed)
        keep = on > 0
        x, y, w = x[keep], slo[keep] / on[keep], on[keep] / on[keep].mean()
        self.mu, self.sd = x.mean(axis=0), x.std(axis=0) + 1e-6
        self.net = torch.nn.Sequential(torch.nn.Linear(x.shape[1], 32), torch.nn.ReLU(), torch.nn.Linear(32, 32),
                                       torch.nn.ReLU(), torch.nn.Linear(32, 1))
        opt = torch.optim.Adam(self.net.parameters(), lr=3e-3, weight_decay=1e-4)
        xt = torch.as_tensor((x - self.mu) / self.sd, dtype=torch.float32)
        yt, wt = torch.as_tensor(y, dtype=torch.float32), torch.as_tensor(w, dtype=torch.float32)
        for _ in range(steps):
            opt.zero_grad()
            loss = (wt * (self.net(xt).squeeze(1) - yt) ** 2).mean()
            loss.backward()
            opt.step()
        # as NumPy arrays: the test runs' worker processes use no torch (which does not survive a fork)
        self.layers = [(m.weight.detach().numpy().T.astype(np.float64), m.bias.detach().numpy().astype(np.float64))
                       for m in self.net if isinstance(m, torch.nn.Linear)]
        del self.net

    def __call__(self, x: np.ndarray) -> np.ndarray:
        h = (np.asarray(x, dtype=np.float64) - self.mu) / self.sd
        for i, (w, b) in enumerate(self.layers):
            h = h @ w + b
            if i < len(self.layers) - 1:
                h = np.maximum(h, 0.0)
        return np.clip(h[:, 0], 0.0, self.cap)


def by_cpu_tenth(x: np.ndarray, slo: np.ndarray, on: np.ndarray):
    """The rate by tenth of the chosen node's u_cpu (edges from the training placements): a one-feature
    reference for the network."""
    edges = np.quantile(x[:, 0], np.linspace(0, 1, 11)[1:-1])
    bins = np.searchsorted(edges, x[:, 0])
    rates = np.array([slo[bins == b].sum() / max(on[bins == b].sum(), 1e-9) for b in range(10)])
    return lambda z: rates[np.searchsorted(edges, z[:, 0])]


def weighted_corr(a: np.ndarray, b: np.ndarray, w: np.ndarray) -> float:
    w = w / w.sum()
    ma, mb = w @ a, w @ b
    cov = w @ ((a - ma) * (b - mb))
    return float(cov / np.sqrt((w @ (a - ma) ** 2) * (w @ (b - mb) ** 2) + 1e-300))


class OutcomeAware(Policy):
    """``inner`` with each candidate's score moved by the predicted rate above the SLO on it: ``minmax(inner's
    scores) - lam x rate(placement_features)``. ``target`` "pod": the pod's own rate, for latency-sensitive pods;
    "node": the node's latency-sensitive pods' rate while the pod is there, for every pod (with
    ``NEIGHBOUR_FEATURES``, kept from the binds and releases this policy is told of). Filter, Bind and Release go
    to ``inner`` unchanged."""

    def __init__(self, inner: Policy, rate, lam: float, latency_sensitive: np.ndarray, target: str = "pod"):
        self.inner, self.rate, self.lam, self.ls, self.target = inner, rate, float(lam), latency_sensitive, target
        self.name = inner.name

    def attach(self, context) -> None:
        super().attach(context)
        self.inner.attach(context)
        self.cache = AssignCache(context.cluster.size, horizon_s=context.window_s + context.scrape_s)
        self.ls_cores = np.zeros(context.cluster.size)
        self.ls_pods = np.zeros(context.cluster.size)

    def filter(self, pod, nodes, cluster):
        return self.inner.filter(pod, nodes, cluster)

    def score(self, pod, nodes, cluster):
        s = np.asarray(self.inner.score(pod, nodes, cluster), dtype=np.float64)
        if (self.target == "pod" and not self.ls[pod.index]) or len(nodes) < 2:
            return s
        span = s.max() - s.min()
        s = (s - s.min()) / span if span > 0 else np.zeros_like(s)
        u = utilisation(pod, nodes, cluster, self.cache.usage_since(cluster.last_scrape_s))
        r = requested_utilisation(pod, nodes, cluster)
        x = placement_features(u, r, pod.request[0], pod.request[1], pod.gpu_count)
        if self.target == "node":
            x = np.hstack([x, np.column_stack([np.full(len(nodes), float(self.ls[pod.index])), self.ls_cores[nodes],
                                               self.ls_pods[nodes]])])
        return s - self.lam * self.rate(x)

    def bound(self, pod, node, cluster):
        self.cache.add(node, pod.time_s, pod.nonzero_cpu_mem)
        if self.ls[pod.index]:
            self.ls_cores[node] += pod.request[0] / 1000.0
            self.ls_pods[node] += 1
        self.inner.bound(pod, node, cluster)

    def choose_gpus(self, pod, node, cluster):
        return self.inner.choose_gpus(pod, node, cluster)

    def released(self, pod, node, cluster, reason="departure"):
        if self.ls[pod.index]:
            self.ls_cores[node] -= pod.request[0] / 1000.0
            self.ls_pods[node] -= 1
        self.inner.released(pod, node, cluster, reason)


def test_run(job) -> tuple[dict, float]:
    """One test run (in a worker process): the policy, or with ``lam`` > 0 the policy listening to ``model``."""
    scenario, base, seed, overrides, lam, model, target = job

    def wrap(inner, world, spec):
        return inner if lam == 0 else OutcomeAware(inner, model, lam, world.workload.latency_sensitive, target)

    t = time.perf_counter()
    m = run_simulation(scenario, base, seed, "outcome", overrides, wrap_policy=wrap)["metrics"]
    return m, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="dlrm-small")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="A scenario override (repeatable).")
    ap.add_argument("--base", default="static-weights:w=1/0/0/0:tau=0.4:frag=0.25")
    ap.add_argument("--train-days", default="14:18", help="FIRST:END, the days the critic is fitted on")
    ap.add_argument("--test-days", default="21:23", help="FIRST:END, the days the score is run on")
    ap.add_argument("--seeds", type=int, default=3, help="seeds 1..N of the collection")
    ap.add_argument("--test-seeds", type=int, default=5, help="seeds 1..N of the test runs")
    ap.add_argument("--lam", type=float, action="append", default=None, help="the predicted rate's weight "
                    "(repeatable; default 0.5 and 2)")
    ap.add_argument("--slo-hour", default="0,0.5,1", help="prices of an hour above the SLO to compare at")
    ap.add_argument("--workers", type=int, default=1, help="processes for the test runs")
    ap.add_argument("--data", type=Path, default=None, help="an .npz of the collected placements: written after "
                    "collecting, read instead of collecting when it exists (the same --base, --target, days and seeds)")
    ap.add_argument("--target", choices=("pod", "node"), default="pod", help="what the critic predicts: the "
                    "latency-sensitive pod's own hours above the SLO (pod), or those of the latency-sensitive pods on "
                    "the node while the pod is there, for every pod (node: its own part of the node's tail and its "
                    "neighbours')")
    ap.add_argument("--reference", action="append", default=[], help="another policy run on the test days beside "
                    "them, paired with the base the same way (repeatable): e.g. the base at another tau")
    args = ap.parse_args()
    lams = args.lam or [0.5, 2.0]
    train = tuple(int(v) for v in args.train_days.split(":"))
    test = tuple(int(v) for v in args.test_days.split(":"))
    seeds, test_seeds = range(1, args.seeds + 1), range(1, args.test_seeds + 1)
    t0 = time.perf_counter()
    print(f"code version {code_version()}", flush=True)
    if args.data is not None and args.data.is_file():
        with np.load(args.data) as d:
            x, slo, on, xh, sloh, onh = (d[k] for k in ("x", "slo", "on", "xh", "sloh", "onh"))
        print(f"placements from {args.data.name}", flush=True)
    else:
        print(f"collect: {args.base} on {args.scenario} days {train[0]}-{train[1]}", flush=True)
        with ProcessPoolExecutor(args.workers, mp_context=get_context("fork")) as pool:
            x, slo, on = collect(args, pool, train, seeds)
            print(f"check: the same on days {test[0]}-{test[0] + 1}", flush=True)
            xh, sloh, onh = collect(args, pool, (test[0], test[0] + 1), seeds)
        print(f"collected in {time.perf_counter() - t0:,.0f} s", flush=True)
        if args.data is not None:
            np.savez(args.data, x=x, slo=slo, on=on, xh=xh, sloh=sloh, onh=onh)

    model = RateModel(x, slo, on, cap=1.0 if args.target == "pod" else np.inf)
    tenth = by_cpu_tenth(x, slo, on)
    keep = onh > 0
    measured = sloh[keep] / onh[keep]
    print(f"\nfit on {len(x):,} placements ({slo.sum():,.0f} hours above the SLO), checked on {keep.sum():,}: "
          f"weighted correlation of the predicted and measured rate, network {weighted_corr(model(xh[keep]), measured, onh[keep]):+.3f} "
          f"(on its own training placements {weighted_corr(model(x[on > 0]), slo[on > 0] / on[on > 0], on[on > 0]):+.3f}), "
          f"u_cpu by tenth {weighted_corr(tenth(xh[keep]), measured, onh[keep]):+.3f}", flush=True)

    overrides = [*args.overrides, f"spans.outcome=[{test[0]},{test[1]}]"]
    rows = [f"lam {lam:g}" for lam in [0.0, *lams]] + list(args.reference)
    runs: dict[str, dict[int, dict]] = {row: {} for row in rows}
    jobs = [(args.scenario, args.base, seed, overrides, lam, model, args.target) for lam in [0.0, *lams]
            for seed in test_seeds]
    jobs += [(args.scenario, spec, seed, overrides, 0.0, None, args.target) for spec in args.reference
             for seed in test_seeds]
    with ProcessPoolExecutor(args.workers, mp_context=get_context("fork")) as pool:
        for row, (_, _, seed, _, _, _, _), (m, seconds) in zip([r for r in rows for _ in test_seeds], jobs,
                                                             pool.map(test_run, jobs)):
            runs[row][seed] = m
            print(f"  {row} seed {seed}: cost {m['cost_node_hours']:,.0f}, nodes {m['cost_nodes']:,.0f}, hours "
                  f"above the SLO {m['latency_breach_hours']:,.1f}, P99 {m['latency_p99_ms']:,.0f} ms "
                  f"({seconds:,.0f} s)", flush=True)

    prices = [float(v) for v in args.slo_hour.split(",")]
    print(f"\n{args.base} + lam x the predicted rate, days {test[0]}-{test[1]}, seeds 1-{args.test_seeds}: differences "
          "to the base (lam 0), paired by seed, 95% intervals")
    print("| policy | nodes | hours above the SLO | P99 ms | " + " | ".join(f"cost, slo_hour {p:g}" for p in prices)
          + " |")
    print("|---|---:|---:|---:|" + "---:|" * len(prices))
    base = runs["lam 0"]

    def diff(row, f):
        d = paired_difference({s: f(m) for s, m in base.items()}, {s: f(m) for s, m in runs[row].items()})
        return f"{d.mean:+,.1f}" + ("" if d.low is None else f" [{d.low:+,.1f}, {d.high:+,.1f}]")

    for row in rows[1:]:
        cells = [diff(row, lambda m: m["cost_nodes"]), diff(row, lambda m: m["latency_breach_hours"]),
                 diff(row, lambda m: m["latency_p99_ms"])]
        cells += [diff(row, lambda m, p=p: cost(m, 1.0, 10.0, p)) for p in prices]
        print(f"| {row} | " + " | ".join(cells) + " |")
    print(f"\nbase means: nodes {np.mean([m['cost_nodes'] for m in base.values()]):,.0f}, hours above the SLO "
          f"{np.mean([m['latency_breach_hours'] for m in base.values()]):,.1f}; total {time.perf_counter() - t0:,.0f} s")


if __name__ == "__main__":
    main()
