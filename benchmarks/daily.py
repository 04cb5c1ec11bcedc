"""What the day-at-a-time benchmarks share (``drain_term``, ``lifetime_term``, ``sibling_term``,
``share_by_load``): variants of the blend, each (day, seed) one run of the day after the scenario's
warm-up (as ``td3sched rehearse --steps 0`` measures a policy a day at a time), every variant on the same
days and seeds so that their differences pair by (day, seed)."""

from __future__ import annotations

import argparse
import multiprocessing
import time
from typing import Callable, Iterator

import numpy as np

from td3sched.evaluate.stats import summarize
from td3sched.version import code_version

BLEND = "static-weights:w=1/0/0/0:tau=0.4:frag=0.25"
COLUMNS = ("cost_node_hours", "node_hours", "latency_breach_hours", "cost_overload", "cost_slo", "latency_p99_ms",
           "oom_kills", "evictions")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--scenario``, ``--days``, ``--seeds`` and ``--workers``."""
    parser.add_argument("--scenario", default="dlrm-small")
    parser.add_argument("--days", default="21:27", help="FIRST:END scenario days, a run each (END exclusive)")
    parser.add_argument("--seeds", type=int, default=2, help="seeds 1..N of each day")
    parser.add_argument("--workers", type=int, default=2)


def days_of(parser: argparse.ArgumentParser, args: argparse.Namespace) -> range:
    """The days of ``--days``, or the parser's error naming what was expected."""
    try:
        first, end = (int(v) for v in args.days.split(":"))
    except ValueError:
        parser.error(f"--days {args.days!r}: expected FIRST:END, two whole days")
    if not 0 <= first < end or args.seeds < 2:
        parser.error(f"--days {args.days} --seeds {args.seeds}: expected FIRST < END and at least 2 seeds")
    return range(first, end)


def day_span(day: int) -> str:
    """The override that makes span ``d`` the one day."""
    return f"spans.d=[{day},{day + 1}]"


def metrics(record: dict) -> dict:
    return {c: float(record["metrics"][c]) for c in COLUMNS}


def run_all(one: Callable, jobs: list, workers: int, every: int = 10) -> Iterator:
    """``one(job)`` for every job on ``workers`` spawned processes, yielded as they finish, with progress."""
    started = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        for k, result in enumerate(pool.imap_unordered(one, jobs), 1):
            if k % every == 0 or k == len(jobs):
                print(f"  {k}/{len(jobs)} runs, {time.perf_counter() - started:,.0f} s", flush=True)
            yield result


def numbers(parser: argparse.ArgumentParser, text: str, name: str) -> list[float]:
    """The comma-separated numbers of option ``--name`` (none for ''), or the parser's error naming them."""
    try:
        values = [float(x) for x in text.split(",") if x]
    except ValueError:
        parser.error(f"--{name} {text!r}: expected comma-separated numbers")
    if len(set(values)) != len(values):
        parser.error(f"--{name} {text!r}: expected each value once")
    return values


def compare(args: argparse.Namespace, days: range, variants: list[tuple], one: Callable, setting: str = "") -> None:
    """Run every variant ``(label, *parameters)`` on every (day, seed), ``one((scenario, day, seed, label,
    *parameters))`` returning ``(label, day, seed, metrics)``, and print the table against the first."""
    jobs = [(args.scenario, day, seed, *variant) for day in days for seed in range(1, args.seeds + 1)
            for variant in variants]
    print(f"code version {code_version()}; {args.scenario} days {days[0]}-{days[-1]}, seeds 1-{args.seeds}"
          f"{setting}: {len(jobs)} runs on {args.workers} workers", flush=True)
    started = time.perf_counter()
    labels = [variant[0] for variant in variants]
    runs: dict[str, dict[tuple, dict]] = {label: {} for label in labels}
    for label, day, seed, m in run_all(one, jobs, args.workers):
        runs[label][day, seed] = m
    print_table(labels, runs)
    print(f"\n{len(runs[labels[0]])} (day, seed) pairs, {time.perf_counter() - started:,.0f} s")


def print_table(labels: list[str], runs: dict[str, dict[tuple, dict]]) -> None:
    """The variants' table: each one's cost summed over the (day, seed) pairs, its paired difference to
    the first label's (the reference) with the 95% t interval, and the parts the cost trades."""
    keys = sorted(runs[labels[0]])
    base = runs[labels[0]]
    print()
    print("| variant | cost | - the blend, a (day, seed), 95% interval | node-hours | hours above the SLO | "
          "overload term | SLO term | P99 ms (mean) | OOM kills | evictions |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for label in labels:
        r = runs[label]
        total = lambda c: sum(r[k][c] for k in keys)  # noqa: E731
        diff = summarize([r[k]["cost_node_hours"] - base[k]["cost_node_hours"] for k in keys])
        interval = "" if label == labels[0] else f"{diff.mean:+.1f} [{diff.low:+.1f}, {diff.high:+.1f}]"
        print(f"| {label} | {total('cost_node_hours'):,.0f} | {interval} | {total('node_hours'):,.0f} | "
              f"{total('latency_breach_hours'):,.0f} | {total('cost_overload'):,.1f} | {total('cost_slo'):,.0f} | "
              f"{np.mean([r[k]['latency_p99_ms'] for k in keys]):.0f} | {total('oom_kills'):.0f} | "
              f"{total('evictions'):.0f} |")
