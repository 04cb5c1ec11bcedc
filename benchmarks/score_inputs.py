"""What the product score's inputs are worth: the pod's usage estimate and a per-pod target (issue 9).

    python benchmarks/score_inputs.py --scenario openb --variant estimate=request --variant estimate=trimaran \
        --variant estimate=hindsight                                                   # the estimate
    python benchmarks/score_inputs.py --scenario openb --variant tau=0.4 --variant tau-be=0.2 --variant tau-be=0.6

Each variant is the product's score (``static-weights``: ``--weights``, target utilisation ``tau``) with one
of its inputs changed; every variant runs the scenario's span for seeds 1..N as ``evaluate`` runs it
(the scenario's warm-up under the variant itself, then the span), and the table pairs each with the
first variant by seed (mean difference of the episode reward, 95% t interval). Arguments of a variant,
``key=value`` apart by ``:``:

- ``estimate``: the pod's CPU and memory usage the score adds to each node's observed usage (and the
  assign cache books for it): ``request`` (the product: the request, kube-scheduler's defaults for an
  empty one), ``trimaran`` (TargetLoadPacking's prediction: the CPU limit, else 1.5x the request,
  else 1,000m; memory as ``request``), or ``hindsight`` (the pod's true mean CPU and memory over its
  next ``--horizon-h`` hours of life, which no scheduler knows: the best any estimate could do).
- ``tau``: the target utilisation for every pod (default ``--tau``); ``tau-be``: the target for
  BestEffort pods (default: ``tau``). A per-class target is the simplest per-pod action: a policy that
  conditions its action on the pod (the observation's QoS one-hot and request) can express it, a held
  action cannot.

The hindsight estimate reads the run's ground truth (``PolicyContext.hindsight``): a reference bound
for this measurement, never a competitor.
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
from dataclasses import dataclass

import numpy as np

from td3sched.evaluate.stats import summarize
from td3sched.policy.features import candidate_utilisation
from td3sched.policy.static_weights import StaticWeights, parse_args, parse_list, weighted_closeness
from td3sched.policy.target_load_packing import TargetLoadPackingArgs, predicted_cpu_milli
from td3sched.run import run_simulation
from td3sched.scenario import load_scenario
from td3sched.version import code_version
from td3sched.workload.pods import BEST_EFFORT

ESTIMATES = ("request", "trimaran", "hindsight")


@dataclass(frozen=True)
class Variant:
    text: str
    estimate: str
    tau: float
    tau_be: float


def parse_variant(text: str, tau: float) -> Variant:
    """``estimate=E:tau=T:tau-be=B`` (each optional) -> Variant, or a ValueError naming the bad part."""
    kw = parse_args(text)
    unknown = set(kw) - {"estimate", "tau", "tau-be"}
    if unknown:
        raise ValueError(f"variant {text!r}: unknown key(s) {sorted(unknown)}: expected estimate, tau, tau-be")
    estimate = kw.get("estimate", "request")
    if estimate not in ESTIMATES:
        raise ValueError(f"variant {text!r}: estimate={estimate!r}: expected one of {', '.join(ESTIMATES)}")
    try:
        t = float(kw.get("tau", tau))
        be = float(kw.get("tau-be", t))
    except ValueError:
        raise ValueError(f"variant {text!r}: tau and tau-be must be numbers") from None
    for name, v in (("tau", t), ("tau-be", be)):
        if not 0 <= v <= 1:
            raise ValueError(f"variant {text!r}: {name}={v:g}: expected a target utilisation in [0, 1]")
    return Variant(text, estimate, t, be)


class ScoreVariant(StaticWeights):
    """The product's score with the variant's estimate and per-class target."""

    def __init__(self, weights, variant: Variant, horizon_s: float):
        super().__init__(weights, variant.tau)
        self.variant, self.horizon_s = variant, horizon_s

    def estimate(self, pod) -> np.ndarray:
        e = pod.nonzero_cpu_mem
        if self.variant.estimate == "trimaran":
            e = np.array([predicted_cpu_milli(pod, TargetLoadPackingArgs()), e[1]])
        elif self.variant.estimate == "hindsight":
            h = self.context.hindsight
            life = min(float(h.remaining_s(pod.index)), self.horizon_s)
            e = h.future_usage(pod.index, pod.time_s, pod.time_s + max(life, 1.0))[:, :2].mean(axis=0)
        return np.ascontiguousarray(e, dtype=np.float64)

    def utilisation(self, pod, nodes, cluster) -> np.ndarray:
        recent = self.cache.usage_since(cluster.last_scrape_s)
        out = np.empty((len(nodes), cluster.observed.shape[1]))
        return candidate_utilisation(cluster.observed, recent, self.estimate(pod), cluster.capacity_usage,
                                     np.asarray(nodes), out)

    def score(self, pod, nodes, cluster) -> np.ndarray:
        tau = self.variant.tau_be if pod.qos == BEST_EFFORT else self.variant.tau
        return weighted_closeness(self.utilisation(pod, nodes, cluster), self.weights, tau)

    def bound(self, pod, node: int, cluster) -> None:
        self.cache.add(node, pod.time_s, self.estimate(pod))


def run_one(job) -> tuple[int, int, dict, float]:
    scenario, span, overrides, weights, variants, horizon_s, v, seed = job
    started = time.perf_counter()
    record = run_simulation(scenario, "static-weights", seed, span=span, overrides=overrides,
                            wrap_policy=lambda policy, world, spec: ScoreVariant(weights, variants[v], horizon_s))
    return v, seed, record["metrics"], time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="openb")
    ap.add_argument("--span", default="test")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="Override a scenario setting, as evaluate's --set (e.g. workload.target_load=0.75).")
    ap.add_argument("--weights", default="1/0/0/0", help="The score's weights w_cpu/w_mem/w_io/w_net.")
    ap.add_argument("--tau", type=float, default=0.4, help="The target utilisation of a variant that names none.")
    ap.add_argument("--variant", action="append", required=True,
                    help="estimate=request|trimaran|hindsight, tau=T, tau-be=T, apart by ':'; the first is the reference.")
    ap.add_argument("--horizon-h", type=float, default=6.0, help="The hindsight estimate's look-ahead (hours).")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    try:
        weights = [float(x) for x in parse_list(args.weights)]
        StaticWeights(weights, args.tau)
        variants = [parse_variant(v, args.tau) for v in args.variant]
        load_scenario(args.scenario, args.set)
    except ValueError as exc:
        ap.error(str(exc))
    if args.seeds < 1:
        ap.error(f"--seeds {args.seeds}: expected at least 1")
    jobs = [(args.scenario, args.span, args.set, weights, variants, args.horizon_h * 3600, v, s)
            for v in range(len(variants)) for s in range(1, args.seeds + 1)]
    overrides = f" ({', '.join(args.set)})" if args.set else ""
    print(f"{args.scenario}{overrides} {args.span} span, weights {args.weights}, seeds 1-{args.seeds}, code {code_version()}")
    results: dict[tuple[int, int], dict] = {}
    with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
        for v, seed, metrics, wall in pool.imap_unordered(run_one, jobs):
            results[v, seed] = metrics
            print(f"  {variants[v].text} seed {seed}: episode_reward {metrics['episode_reward']:.3f} ({wall:.0f} s)",
                  flush=True)
    seeds = range(1, args.seeds + 1)
    print("\n| variant | episode_reward | - first variant (95% interval) | cost node-hours | P99 ms | OOM / week |")
    print("|---|---:|---:|---:|---:|---:|")
    for v, variant in enumerate(variants):
        rows = [results[v, s] for s in seeds]
        mean = {k: float(np.mean([r[k] for r in rows])) for k in
                ("episode_reward", "cost_node_hours", "latency_p99_ms", "oom_per_week")}
        diff = ""
        if v:
            d = summarize([results[v, s]["episode_reward"] - results[0, s]["episode_reward"] for s in seeds])
            diff = f"{d.mean:+.2f}" + (f" [{d.low:+.2f}, {d.high:+.2f}]" if d.low is not None else "")
        print(f"| `{variant.text}` | {mean['episode_reward']:.2f} | {diff} | {mean['cost_node_hours']:,.0f} | "
              f"{mean['latency_p99_ms']:,.0f} | {mean['oom_per_week']:,.0f} |")


if __name__ == "__main__":
    main()
