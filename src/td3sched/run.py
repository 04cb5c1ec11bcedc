"""One simulation run, end to end: scenario -> world -> simulator -> metrics record."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from td3sched.outputs import check_file
from td3sched.policy import make_policy
from td3sched.scenario import load_scenario
from td3sched.simulator.engine import Simulation, open_event_log
from td3sched.version import code_version  # noqa: F401 (imported from here by older callers)


def run_simulation(scenario_name: str, policy_name: str, seed: int, span: str = "full",
                   overrides: list[str] | None = None, events_path: Path | None = None,
                   progress: bool = False, lenient: bool = False, events_detail: bool = False,
                   wrap_policy: Callable | None = None, on_simulation: Callable | None = None) -> dict:
    """Run ``policy_name`` on a scenario span; return the JSON-ready record of the run. With
    ``lenient``, malformed trace rows are skipped and counted in the record's ``skipped_rows``.
    ``wrap_policy(policy, world, spec)``: the policy the simulator consults instead (a wrapper that
    delegates to it, e.g. ``lifecycle.record.HistoryRecorder``); called once the world is built.
    ``on_simulation(sim)``: told of the ``Simulation`` before it runs (the recorder reads its reward)."""
    from td3sched.search.best_static import resolve_policy

    if events_path is not None:
        events_path = Path(events_path)
        check_file(events_path, "--events")
    label, spec = resolve_policy(policy_name, scenario_name, overrides or [])
    policy = make_policy(spec)
    scenario = load_scenario(scenario_name, overrides or [])
    start_s, end_s = scenario.span(span)
    reports: list = []
    world = scenario.build(seed, lenient=lenient, reports=reports)
    if wrap_policy is not None:
        policy = wrap_policy(policy, world, spec)
    warmup_s = world.config.warmup_days * 86400.0
    # the event log goes to a temporary file beside events_path, renamed over it once the run succeeded
    events_tmp = None
    if events_path is not None:
        events_path.parent.mkdir(parents=True, exist_ok=True)
        events_tmp = events_path.with_name(f".{events_path.name}.{os.getpid()}.tmp")
    events, stream = open_event_log(events_tmp, events_detail)
    try:
        if progress:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                          TimeElapsedColumn(), TimeRemainingColumn(), transient=True) as bar:
                task = bar.add_task(f"{scenario_name} {span} {policy_name}", total=(end_s - max(0.0, start_s - warmup_s)) / 3600)
                sim = Simulation(world, policy, seed, start_s, end_s, events,
                                 progress=lambda dt: bar.advance(task, dt / 3600), warmup_s=warmup_s)
                if on_simulation is not None:
                    on_simulation(sim)
                record = sim.run()
        else:
            sim = Simulation(world, policy, seed, start_s, end_s, events, warmup_s=warmup_s)
            if on_simulation is not None:
                on_simulation(sim)
            record = sim.run()
    except BaseException:
        if stream:
            stream.close()
            events_tmp.unlink(missing_ok=True)
        raise
    if stream:
        stream.close()
        os.replace(events_tmp, events_path)
    return {
        "scenario": scenario_name,
        "overrides": list(scenario.overrides),
        "span": {"name": span, "start_s": start_s, "end_s": end_s, "measured_from_s": record["runtime"]["warmup_s"]
                 + max(0.0, start_s - warmup_s)},
        "seed": seed,
        "policy": label,
        "policy_spec": spec,
        "policy_fingerprint": policy.fingerprint,
        "code_version": code_version(),
        **record,
        "skipped_rows": [r.summary() for r in reports if r.count],
    }
