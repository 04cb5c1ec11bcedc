"""The ``td3sched`` command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from typer.core import TyperCommand
from rich.console import Console
from rich.markup import escape
from rich.table import Table

DEFAULT_SCENARIO = "tiny"
MEASURE_SPAN, LEARN_SPAN = "test", "train"
CONVENTIONS = (
    "Every command's --scenario defaults to tiny (it ships with the package: no traces needed). --span "
    "defaults to test in commands that measure a policy (simulate, evaluate, inspect-model, gate) and to train in "
    "those that learn or search one (train, search-static, overestimation); full is the whole scenario. "
    "Outputs go to --out.")
app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="td3-scheduler: a learned Kubernetes scheduler and its trace-driven simulator.\n\n"
                       + CONVENTIONS)
console = Console(stderr=True)
out = Console()


def _scenario_help(what: str = "Scenario") -> str:
    return f"{what}: a shipped one (see `td3sched scenarios`) or a scenario file's path (.yaml); default {DEFAULT_SCENARIO}."


def _span_help(default: str, what: str = "Span of the scenario") -> str:
    why = "commands that measure use test" if default == MEASURE_SPAN else "commands that learn use train"
    return f"{what}: full, train or test (default {default}: {why})."


SET_HELP = ("Override a scenario setting, e.g. --set autoscaler.enabled=false (every setting, its default and "
            "range: td3sched scenarios --show NAME).")
HISTORY_CANDIDATES_HELP = ("Candidates kept per decision in the history: the chosen node, the best-scored others and a "
                           "weighted sample of the rest (docs/lifecycle.md); 0 keeps all. Default 100, as many as "
                           "kube-scheduler scores at least.")


def _print_version(value: bool) -> None:
    if value:
        from td3sched.version import code_version

        out.print(f"td3sched {code_version()}")
        raise typer.Exit()


@app.callback()
def _options(version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                          help="Print the version (and the commit, in a checkout) and exit.")) -> None:
    """td3-scheduler: a learned Kubernetes scheduler and its trace-driven simulator."""


def train_progress_lines(total: int, start: int = 0):
    """An ``on_log`` for a training loop whose console is not a terminal, where a progress bar shows
    nothing: ``progress.ProgressLines`` with the rate and the losses (``start``: the steps a resumed run
    had done)."""
    from td3sched.progress import ProgressLines

    lines = ProgressLines(lambda line: console.print(escape(line), soft_wrap=True), "train", total, "steps", start)

    def on_log(d: dict) -> None:
        fmt = lambda key: f"{d[key]:.4g}" if key in d and d[key] == d[key] else "-"  # noqa: E731
        detail = [f"{d.get('SPS', float('nan')):,.1f} steps/s", f"ep reward {fmt('episode_reward')}",
                  f"critic loss {fmt('qf_loss')}", f"actor loss {fmt('actor_loss')}"]
        if "saturated" in d:
            detail.append(f"at bound {d['saturated']:.0%}")
        lines.update(d["step"], ", ".join(detail))

    return on_log


def _fail(message: str) -> None:
    console.print(f"[red]error:[/red] {escape(message)}", soft_wrap=True)  # one line, however long
    raise typer.Exit(2)


@app.command()
def simulate(
    scenario: str = typer.Option(DEFAULT_SCENARIO, help=_scenario_help()),
    policy: str = typer.Option("k8s-default", help="Scoring policy spec, e.g. k8s-default, td3:models/td3-dlrm, "
                                                   "static-weights:w=0.4/0.3/0.2/0.1:tau=0.5."),
    seed: int = typer.Option(1, min=0, help="Seed: with the scenario, it fully determines the run."),
    span: str = typer.Option(MEASURE_SPAN, help=_span_help(MEASURE_SPAN, "Span of the scenario to run")),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP),
    out_path: Optional[Path] = typer.Option(None, "--out", help="Write the run's metrics as JSON here."),
    events: Optional[Path] = typer.Option(None, help="Write every event of the run as JSON lines here."),
    events_detail: bool = typer.Option(False, "--events-detail",
                                       help="With --events: each tick also writes every node's delivered CPU and memory."),
    progress: bool = typer.Option(True, help="Show a progress bar."),
    lenient: bool = typer.Option(False, help="Skip malformed trace rows (and report them) instead of failing."),
    record_history: Optional[Path] = typer.Option(None, "--record-history", metavar="DIR",
                                                  help="Record every decision (pod, candidates and their features, "
                                                       "chosen node) as a Parquet file of the history folder DIR "
                                                       "(docs/lifecycle.md)."),
    history_candidates: Optional[int] = typer.Option(None, "--history-candidates",
                                                     help="With --record-history: c" + HISTORY_CANDIDATES_HELP[1:]),
) -> None:
    """Run one policy over a scenario span and print its metrics."""
    from td3sched.outputs import check_file, check_folder, write_json_atomic
    from td3sched.run import run_simulation

    try:
        for option, path in (("--out", out_path), ("--events", events)):
            if path:
                check_file(path, option)
        if out_path and events and out_path.resolve() == events.resolve():
            raise ValueError(f"--out and --events are the same file {out_path}: expected two files")
        if record_history is not None:
            from td3sched.lifecycle.record import record_simulation

            check_folder(record_history, "--record-history")
            result, history_path, recorded = record_simulation(
                scenario, policy, seed, span, record_history, list(set_), progress=progress, events_path=events,
                lenient=lenient, events_detail=events_detail, candidates=history_candidates)
        else:
            result = run_simulation(scenario, policy, seed, span, list(set_), events_path=events, progress=progress,
                                    lenient=lenient, events_detail=events_detail)
    except (ValueError, FileNotFoundError) as exc:
        _fail(str(exc))
    if record_history is not None:
        console.print(f"recorded {recorded:,} decisions in {escape(str(history_path))}")
    for line in result["skipped_rows"]:
        console.print(f"[yellow]{escape(line)}[/yellow]")
    print_metrics(result)
    if out_path:
        write_json_atomic(out_path, result)
        console.print(f"wrote {escape(str(out_path))}")


def print_metrics(result: dict) -> None:
    from td3sched.metrics.collector import DECISIONS_AND_BINDS

    m = result["metrics"]
    table = Table(title=f"{result['scenario']} / {result['span']['name']} / {result['policy']} / seed {result['seed']}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in result["metrics"].items():
        table.add_row(key, f"{value:.4f}" if isinstance(value, float) else str(value))
    for key, value in result["runtime"].items():
        table.add_row(key, f"{value:,.1f}")
    out.print(table)
    if "binds" in m:
        out.print(f"[dim]{DECISIONS_AND_BINDS} (here {m['decisions'] - m['binds']:,}).[/dim]")


@app.command()
def scenarios(
    show: Optional[str] = typer.Option(None, "--show", metavar="NAME",
                                       help="Print scenario NAME resolved, with --set applied: every setting "
                                            "with its value, allowed range and description (builds nothing)."),
    set_: list[str] = typer.Option([], "--set", help="With --show: override a setting, e.g. --set "
                                                      "latency.slo_factor=3."),
) -> None:
    """List scenarios with their nodes, pods and spans (builds each workload; seed 1)."""
    from td3sched.scenario import load_scenario, scenario_names

    if show is not None or set_:
        from td3sched.scenario.schema import to_yaml

        if show is None:
            _fail("--set: only with --show NAME")
        try:
            print(to_yaml(load_scenario(show, list(set_)).config), end="")
        except ValueError as exc:
            _fail(str(exc))
        return

    import time

    table = Table()
    for col in ("scenario", "nodes (start / max)", "pods", "days", "spans (days)", "description"):
        table.add_column(col)
    names = scenario_names()
    for i, name in enumerate(names, 1):
        t0 = time.perf_counter()
        console.print(f"scenarios: building {name} ({i}/{len(names)}, seed 1; the production-size ones take "
                      "tens of seconds)")
        try:
            sc = load_scenario(name)
            world = sc.build(1)
            console.print(f"scenarios: {name} built in {time.perf_counter() - t0:,.1f} s")
        except (ValueError, FileNotFoundError) as exc:
            table.add_row(name, "-", "-", "-", "-", f"unavailable: {exc}")
            continue
        start = sum(p.count for p in world.pools)
        most = sum(p.max_count for p in world.pools)
        spans = ", ".join(f"{k} {v[0]}-{v[1]}" for k, v in sc.config.get("spans", {}).items())
        table.add_row(name, f"{start:,} / {most:,}", f"{len(world.workload):,}", f"{sc.days:g}", spans,
                      sc.config.get("description", ""))
    out.print(table)


@app.command()
def traces(
    progress: bool = typer.Option(True, help="Show a progress bar."),
) -> None:
    """Check the production traces: every file td3sched reads, by its sha256; where each dataset comes
    from, its licence and how to get it. Exit 1 when a file is missing or differs."""
    from td3sched.trace.location import ENV_VAR, traces_dir
    from td3sched.trace.sources import check_traces, expected_files

    folder = traces_dir(must_exist=False)
    import os

    how = f"${ENV_VAR}" if os.environ.get(ENV_VAR) else f"the default; set ${ENV_VAR} to use another"
    console.print(f"traces folder: {escape(str(folder))} ({how})")
    if progress:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        with Progress(TextColumn("checking sha256"), BarColumn(), MofNCompleteColumn(), console=console,
                      transient=True) as bar:
            task = bar.add_task("", total=len(expected_files()))
            checks = check_traces(folder, on_file=lambda _: bar.advance(task))
    else:
        checks = check_traces(folder)
    table = Table()
    for col in ("dataset", "files", "status", "used by"):
        table.add_column(col)
    for c in checks:
        colour = {"ok": "green", "differs": "red"}.get(c.status, "yellow")
        table.add_row(c.dataset.folder, f"{len(c.ok)}/{len(c.ok) + len(c.missing) + len(c.differs)}",
                      f"[{colour}]{c.status}[/{colour}]", c.dataset.used_by)
    out.print(table)
    for c in checks:
        d = c.dataset
        out.print(f"[bold]{d.folder}/[/bold]: {escape(d.title)}\n  source: {escape(d.source)}\n"
                  f"  licence: {escape(d.licence)}\n  to get it: {escape(d.how_to_get)}", soft_wrap=True)
        for name in c.differs[:5]:
            out.print(f"  [red]differs:[/red] {escape(name)} (sha256 is not the published file's)", soft_wrap=True)
        if c.missing and c.ok:
            out.print(f"  [yellow]missing:[/yellow] {len(c.missing)} files, e.g. {escape(c.missing[0])}", soft_wrap=True)
    if any(c.status != "ok" for c in checks):
        raise typer.Exit(1)


def _ray_address_args(args: list[str]) -> list[str]:
    """``--ray`` with no value (last, or followed by an option) becomes ``--ray local``."""
    fixed = []
    for i, arg in enumerate(args):
        fixed.append(arg)
        if arg == "--ray" and (i + 1 == len(args) or args[i + 1].startswith("-")):
            fixed.append("local")
    return fixed


class _OptionalRayAddress(TyperCommand):
    """Lets ``--ray`` stand alone (a local Ray instance) or take an address: ``--ray auto``."""

    def parse_args(self, ctx, args):
        return super().parse_args(ctx, _ray_address_args(list(args)))


@app.command(cls=_OptionalRayAddress)
def evaluate(
    scenario: str = typer.Option(DEFAULT_SCENARIO, help=_scenario_help()),
    span: str = typer.Option(MEASURE_SPAN, help=_span_help(MEASURE_SPAN)),
    policies: Optional[list[str]] = typer.Option(
        None, "--policies",
        help="Comma-separated policy specs, or all (default: every competitor; the hindsight bound oracle runs "
             "only when named). A spec may carry arguments after a colon: td3:runs/NAME, "
             "static-weights:w=0.4/0.3/0.2/0.1:tau=0.5 (key=value pairs apart by colons, list items by "
             "slashes; no quoting needed)."),
    seeds: int = typer.Option(5, help="Seeds per policy: runs seeds 1..N."),
    out_dir: Path = typer.Option(..., "--out", help="Results folder, e.g. results/NAME/ (resumes what is there)."),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP),
    workers: Optional[int] = typer.Option(None, help="Local worker processes (default: number of CPUs); "
                                                     "with --ray and no address, the local Ray instance's CPUs."),
    ray: Optional[str] = typer.Option(None, "--ray", metavar="[ADDRESS]",
                                      help="Run on Ray: alone, a new local instance; with an address (auto, "
                                           "ray://host:10001), that cluster. Needs pip install 'td3sched\\[ray]'."),
    mixed_versions: bool = typer.Option(False, "--mixed-versions",
                                        help="Keep runs in --out made by other code versions beside new ones (the "
                                             "report lists each version). Without it, a report comes from one "
                                             "code version and mixing is refused before anything runs."),
    progress: bool = typer.Option(True, help="Show a progress bar."),
) -> None:
    """Run every (policy, seed) of a scenario span; write run records, summaries, plots and a report."""
    from td3sched.evaluate import GridError, prepare, run_grid, write_reports

    try:
        spec = prepare(scenario, span, policies or ["all"], seeds, out_dir, list(set_), workers, ray,
                       mixed_versions=mixed_versions)
    except GridError as exc:
        _fail(str(exc))
    for name, reason in spec.skipped:
        console.print(f"[yellow]note:[/yellow] all: skipping {escape(name)} ({escape(reason)})")
    console.print(f"evaluate: {len(spec.policies)} policies x {spec.seeds} seeds on {spec.scenario}/{spec.span} "
                  f"-> {escape(str(spec.out))}")
    try:
        result = run_grid(spec, progress=progress, console=console)
    except GridError as exc:  # e.g. no Ray cluster at the address: nothing was run
        _fail(str(exc))
    except KeyboardInterrupt:
        console.print(f"[yellow]interrupted:[/yellow] finished runs are in {escape(str(spec.out / 'runs'))}; "
                      "rerun the same command to resume")
        raise typer.Exit(130) from None
    try:
        files = write_reports(result)
    except GridError as exc:  # runs of several code versions came back (e.g. a Ray cluster's workers)
        _fail(str(exc))
    print_evaluation(result)
    console.print(f"{len(result.computed)} runs computed, {len(result.reused)} reused, {len(result.failures)} failed "
                  f"in {result.wall_s:,.1f} s; report: {escape(str(files.report_md))}, {escape(str(files.report_html))}")
    for note in files.notes:
        console.print(f"[yellow]note:[/yellow] {escape(note)}")
    if result.failures:
        for (policy, seed), error in sorted(result.failures.items()):
            console.print(f"[red]failed:[/red] {escape(policy)} seed {seed}: {escape(error)}")
        raise typer.Exit(1)


def print_evaluation(result) -> None:
    from td3sched.evaluate.plots import short_label
    from td3sched.evaluate.report import KEY_NAMES, analyse, fmt, fmt_ci

    a = analyse(result)
    table = Table(title=f"{result.spec.scenario} / {result.spec.span}: mean and 95% CI over {result.spec.seeds} seeds")
    table.add_column("metric")
    for p in a.policies:
        table.add_column(escape(short_label(p)), justify="right")
    for m in KEY_NAMES:
        if m in a.metrics:
            table.add_row(m, *(fmt_ci(a.stats[p][m]) for p in a.policies))
    if "decisions" in a.metrics and "binds" in a.metrics:  # means: retries explain the gap (caption)
        from td3sched.metrics.collector import DECISIONS_AND_BINDS

        table.add_row("decisions / binds", *(f"{fmt(a.stats[p]['decisions'].mean)} / {fmt(a.stats[p]['binds'].mean)}"
                                             for p in a.policies))
    out.print(table)
    if "decisions" in a.metrics and "binds" in a.metrics:
        out.print(f"[dim]decisions / binds: means over seeds; {DECISIONS_AND_BINDS}.[/dim]")


reproduce_app = typer.Typer(no_args_is_help=True, help="Reproduce published experiments with this project's rules.")
app.add_typer(reproduce_app, name="reproduce")


@reproduce_app.command("fgd")
def reproduce_fgd(
    out_dir: Path = typer.Option(Path("results/fgd-reproduction"), "--out",
                                 help="Folder for curves.csv, table.csv, summary.md and the plot."),
    seeds: str = typer.Option("42-51", help="Seeds: a range (42-51) or a list (42,43)."),
    policies: str = typer.Option(",".join(["Random", "DotProd", "GpuClustering", "GpuPacking", "BestFit", "FGD"]),
                                 help="Comma-separated policies, the paper's names."),
    variant: list[str] = typer.Option([], "--variant", help="Run a policy with another spec, e.g. "
                                                            "--variant FGD=fgd (without the artifact's options)."),
    progress: bool = typer.Option(True, help="Show a progress bar."),
) -> None:
    """The FGD paper's openb experiment (ATC'23, Fig. 9a): 1,213 GPU nodes, the default pod list tuned to
    1.3x the cluster's GPUs, pods arriving one by one; our table beside the artifact's expected results."""
    import shlex
    import time

    import pandas as pd

    from td3sched.policy import make_policy
    from td3sched.reproduce.fgd_openb import POLICIES, curves, expected_curves, load_world, run_experiment
    from td3sched.reproduce.fgd_report import Timing, markdown_table, seeds_from, write_outputs
    from td3sched.run import code_version

    try:
        seed_list = seeds_from(seeds)
        names = [p.strip() for p in policies.split(",") if p.strip()]
        unknown = [p for p in names if p not in POLICIES]
        if unknown or not names:
            raise ValueError(f"--policies {policies!r}: expected some of {', '.join(POLICIES)}")
        specs = {}
        for item in variant:
            name, sep, spec = item.partition("=")
            if not sep or name not in names or not spec:
                raise ValueError(f"--variant {item!r}: expected POLICY=SPEC with POLICY one of {', '.join(names)}")
            make_policy(spec)  # fails early on a bad spec
            specs[name] = spec
        world = load_world()
    except (ValueError, FileNotFoundError) as exc:
        _fail(str(exc))
    command = "td3sched reproduce fgd " + " ".join(shlex.quote(a) for a in sys.argv[3:]) if len(sys.argv) > 3 \
        else "td3sched reproduce fgd"
    version = code_version()  # the code that runs, before anything is written
    used = {p: specs.get(p, POLICIES[p].spec) for p in names}
    runs = [(p, s) for p in names for s in seed_list]
    console.print(f"reproduce fgd: {len(names)} policies x {len(seed_list)} seeds on {len(world.cluster().names):,} "
                  f"nodes -> {escape(str(out_dir))}")
    frames, timings = [], []
    t0 = time.perf_counter()

    def one(policy: str, seed: int, on_progress=None) -> None:
        trace = run_experiment(world, policy, seed, on_progress=on_progress, spec=specs.get(policy))
        frame = curves(trace, world.total_gpu_milli)
        frame.insert(0, "seed", seed)
        frame.insert(0, "policy", policy)
        frames.append(frame)
        timings.append(Timing(policy, seed, trace.wall_s, len(trace.arrived_milli), trace.failed))
        console.print(f"{policy} seed {seed}: {len(trace.arrived_milli):,} pods, {trace.failed:,} failed, "
                      f"{trace.wall_s:.1f} s")

    try:
        if progress:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                          console=console) as bar:
                total = bar.add_task("experiments", total=len(runs))
                pods = bar.add_task("pods", total=1)
                for policy, seed in runs:
                    bar.update(pods, description=f"{policy} seed {seed}", completed=0)
                    one(policy, seed, lambda done, n: bar.update(pods, completed=done, total=n))
                    bar.advance(total)
        else:
            for policy, seed in runs:
                one(policy, seed)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted:[/yellow] nothing written")
        raise typer.Exit(130) from None
    ours = pd.concat(frames, ignore_index=True)
    table = write_outputs(out_dir, ours, expected_curves(), timings, command, version, seed_list, used)
    out.print(f"Unallocated GPU %, median over seeds {seeds}: ours (paper, ours - paper); * outside the paper's "
              "seed range")
    out.print(markdown_table(table, "unallocated_pct"), soft_wrap=True)
    out.print("Fragmentation amount, % of all GPUs:")
    out.print(markdown_table(table, "frag_amount_pct"), soft_wrap=True)
    console.print(f"{len(runs)} experiments in {time.perf_counter() - t0:,.0f} s; wrote {escape(str(out_dir))}/"
                  "{curves.csv, table.csv, summary.md, fgd-openb.png}")


@app.command("build-tiny")
def build_tiny_cmd(
    seed: int = typer.Option(1, min=0, help="Seed of the sampling."),
    out_dir: Path = typer.Option(Path("tiny"), "--out", help="Folder for pods.csv.gz, profiles.npz and "
                                                             "ATTRIBUTION.md (in a checkout, "
                                                             "src/td3sched/scenarios/tiny replaces the shipped one)."),
) -> None:
    """Rebuild the tiny scenario's workload from the production traces, into --out (default ./tiny)."""
    from td3sched.outputs import check_folder
    from td3sched.scenario.tiny import build_tiny

    try:
        check_folder(out_dir, "--out")
        console.print(f"build-tiny: seed {seed} -> {escape(str(out_dir))} (reads the traces; about a minute)")
        w = build_tiny(out_dir, seed)
    except (ValueError, FileNotFoundError) as exc:
        _fail(str(exc))
    out.print(f"tiny: {len(w)} pods written to {escape(str(out_dir))}; run it with --scenario tiny --set "
              f"workload.path={escape(str(out_dir.resolve()))}", soft_wrap=True)


@app.command("search-static")
def search_static(
    scenario: str = typer.Option(DEFAULT_SCENARIO, help=_scenario_help("Scenario whose train span is searched")),
    budget_min: float = typer.Option(30.0, help="Wall-clock budget of the whole search, in minutes."),
    tau_fixed: Optional[float] = typer.Option(None, help="Fix tau (0: best-static-seed); default: search tau too."),
    seed: int = typer.Option(1, min=0, help="Seed of the world and of every evaluation run."),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP),
    step: str = typer.Option("auto", help="Simplex grid step: auto (finest of 0.2, 0.25, 0.5 that fits the "
                                          "budget), 0.2, 0.25 or 0.5."),
    tau_values: str = typer.Option("0,0.2,0.4,0.6,0.8,1", help="Comma-separated tau grid (without --tau-fixed)."),
    ceiling_values: str = typer.Option("none", help="Comma-separated hold-back ceilings searched (static-weights' "
                                                    "ceiling; 'none': no hold-back), e.g. none,0.6,0.7,0.8. Default "
                                                    "none: no ceiling; with any, the result is the variant "
                                                    "best-static-ceiling."),
    window_h: Optional[float] = typer.Option(None, help="Evaluation window in hours (default: the scenario's "
                                                        "search.window_h, else a 24th of the train span, between 1 "
                                                        "and 6)."),
    max_windows: int = typer.Option(8, help="Windows of the last rung of the ladder."),
    warmup_h: Optional[float] = typer.Option(None, help="Start each window from the state the candidate reaches "
                                                        "after this many hours before it, as evaluate starts a span "
                                                        "(0: from an empty cluster; default: the scenario's "
                                                        "search.warmup_h, 0 unless it says). docs/policies.md."),
    workers: int = typer.Option(2, help="Worker processes (each builds the world once)."),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Folder the result is stored in (default: "
                                                               "$TD3SCHED_MODELS/best-static/, else "
                                                               "./models/best-static/; the policies best-static "
                                                               "and best-static-seed read it first)."),
    progress: bool = typer.Option(True, help="Show a progress bar."),
) -> None:
    """Search the static-weights arguments with the highest episode reward on the train span; store the winner
    (read by the policies best-static and, with --tau-fixed 0, best-static-seed)."""
    from td3sched.search.best_static import SearchSettings, search

    try:
        taus = tuple(float(x) for x in tau_values.split(",") if x.strip())
        ceilings = tuple(None if x.strip().lower() == "none" else float(x) for x in ceiling_values.split(",")
                         if x.strip())
        settings = SearchSettings(scenario, tuple(set_), seed=seed, tau_fixed=tau_fixed, budget_min=budget_min,
                                  step=step, tau_values=taus, window_h=window_h, max_windows=max_windows,
                                  warmup_h=warmup_h,
                                  ceiling_values=ceilings)
        result, path = search(settings, workers=workers, progress=progress, models_dir=out_dir)
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        _fail(str(exc))
    table = Table(title=f"{scenario} / train / {result['variant']} ({result['search']['stopped']})")
    table.add_column("rung")
    table.add_column("candidates x windows", justify="right")
    table.add_column("best", overflow="fold")
    table.add_column("mean episode reward", justify="right")
    for r in result["search"]["rungs"]:
        best = r.get("best") or "-"
        reward = f"{r['best_reward']:.2f}" if r.get("best_reward") is not None else "-"
        table.add_row(str(r["rung"]), f"{r['candidates']} x {r['windows']}" + ("" if r["complete"] else " (cut)"),
                      escape(best), reward)
    out.print(table)
    out.print(f"{escape(result['policy'])}  reward {result['reward']:.2f} over {len(result['windows'])} window(s), "
              f"{result['search']['evaluations']} evaluations in {result['wall_s']:,.0f} s")
    console.print(f"wrote {escape(str(path))}")


@app.command(cls=_OptionalRayAddress)
def train(
    steps: int = typer.Option(..., help="Environment steps (scheduling decisions, or held actions with --action-hold) to train for, in total."),
    out_dir: Path = typer.Option(..., "--out", help="Run folder, e.g. runs/NAME/: checkpoint, model (then "
                                                    "--policy td3:runs/NAME) and TensorBoard logs (tb/)."),
    scenario: Optional[str] = typer.Option(None, help=_scenario_help("Scenario to train on")),
    seed: Optional[int] = typer.Option(None, min=0, help="Seed of the world, the episode windows, the networks "
                                                         "and the noise (default: 1)."),
    algo: Optional[str] = typer.Option(None, help="td3 (default), or ddpg: one critic, no smoothing, no delay."),
    gamma_per_hour: Optional[float] = typer.Option(None, help="Semi-MDP discount per simulated hour: a transition "
                                                   "of dt seconds is discounted by this ** (dt / 3600) (reward.py). "
                                                   "Default: 0.99 per decision."),
    action: Optional[str] = typer.Option(None, help="The action design: weights+tau (default; the mode 'full'), "
                                         "weights (tau fixed at 0, the reference design; 'seed'), or "
                                         "weights+tau+ceiling (a hold-back ceiling too; 'ceiling'). docs/td3.md."),
    action_hold: Optional[float] = typer.Option(None, help="Simulated seconds each action holds: the policy decides "
                                                "the scoring for the pods of the next this many seconds, and each "
                                                "step is that long (default 0: an action per decision). The model "
                                                "card declares it and td3:FOLDER acts so. docs/td3.md."),
    preactivation_penalty: Optional[float] = typer.Option(None, help="Coefficient of the actor's penalty on its "
                                                          "pre-activations (default 0, "
                                                          "TD3Config.preactivation_penalty; 0: none)."),
    branch_every: Optional[int] = typer.Option(None, help="Counterfactual branches: every this many steps after "
                                               "the warm-up, fork the simulator at the pending decision and "
                                               "teach the critics the differences between the branches' "
                                               "returns (TD3Config.branch_every; default 0: off). docs/td3.md."),
    branch_horizon: Optional[float] = typer.Option(None, help="Simulated seconds each branch runs (default "
                                                   "1800)."),
    branch_imitation: Optional[float] = typer.Option(None, help="With --branch-every: pull the actor towards each "
                                                     "branched state's best branch with this weight "
                                                     "(TD3Config.branch_imitation; default 0: off)."),
    branch_workers: int = typer.Option(2, help="Branches simulated at once (processes; the result does not "
                                               "depend on it)."),
    env_workers: Optional[int] = typer.Option(None, help="Copies of the env stepped at once, each in its own "
                                              "process drawing its own windows (default 1). With a held action "
                                              "the simulator is nearly all of a step: 2 copies on two cores "
                                              "collect nearly twice the steps a second. The run depends on it; "
                                              "--steps and --checkpoint-every must be multiples of it. "
                                              "docs/td3.md."),
    ray: Optional[str] = typer.Option(None, "--ray", metavar="[ADDRESS]",
                                      help="With --env-workers N: run copies 2..N as Ray actors, the same run: "
                                           "alone, a new local instance; with an address (auto, "
                                           "ray://host:10001), that cluster. Needs pip install 'td3sched\\[ray]'."),
    span: Optional[str] = typer.Option(None, help=_span_help(LEARN_SPAN, "Span whose windows are the episodes")),
    episode_hours: Optional[float] = typer.Option(None, help="Episode window in simulated hours (default: 24)."),
    warmup_h: Optional[float] = typer.Option(None, help="Start each episode from the cluster --warmup-score leaves "
                                             "after this many simulated hours, as evaluate starts a span "
                                             "(default 0: from an empty cluster). docs/td3.md."),
    warmup_score: Optional[str] = typer.Option(None, help="The static-weights spec that places the warm-up's pods, "
                                               "e.g. the scenario's best static (needed with --warmup-h)."),
    spread: Optional[float] = typer.Option(None, help="The sibling spread every decision's score takes, fixed in "
                                           "the model's card (static-weights' spread, policy/siblings.py; default 0: "
                                           "none), e.g. 3 with --anchor ...:spread=3."),
    anchor: Optional[str] = typer.Option(None, help="Warm start from this static-weights spec: the random steps "
                                         "take its action plus noise and the actor starts as it "
                                         "(TD3Config.anchor; default: none)."),
    bc_alpha: Optional[float] = typer.Option(None, help="TD3+BC: keep the actor near the replayed actions, the Q "
                                             "term scaled by this / mean |Q| (2.5 in the paper; default: none)."),
    bc_decay_steps: Optional[int] = typer.Option(None, help="With --bc-alpha: the behaviour term fades to 0 by this "
                                                 "step (default: it stays)."),
    learning_starts: Optional[int] = typer.Option(None, help="Random warm-up steps before learning (default: "
                                                             "10000, TD3Config.learning_starts)."),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP),
    checkpoint_every: int = typer.Option(10_000, help="Write a checkpoint and the model every this many steps "
                                                      "(and at the end)."),
    select_span: Optional[str] = typer.Option(None, help="Model selection on held-out days: at every checkpoint "
                                              "and at the end, run the actor on this span (one that does not "
                                              "overlap --span, e.g. --set spans.validation=[18,21]) and keep the "
                                              "candidate with the lowest mean cost as --out/best (then --policy "
                                              "td3:FOLDER/best); selection.json holds every candidate's figures. "
                                              "Default: none. docs/td3.md."),
    select_seeds: int = typer.Option(2, help="With --select-span: seeds 1..N each candidate runs (paired)."),
    select_workers: int = typer.Option(2, help="With --select-span: validation runs at once (processes; "
                                               "training waits meanwhile; the result does not depend on it)."),
    resume: bool = typer.Option(False, help="Continue the run in --out from its last checkpoint."),
    threads: int = typer.Option(1, help="torch threads. One leaves a core to the simulator's thread; more can be "
                                        "far slower on a busy machine."),
    progress: bool = typer.Option(True, help="Show a progress bar."),
) -> None:
    """Train a TD3 policy on a scenario; the run folder's model is then the policy td3:FOLDER."""
    try:
        import torch

        from td3sched.rl.model import ModelError
        from td3sched.rl.td3 import TD3Config
        from td3sched.rl.train import CHECKPOINT_FILE, CheckpointError, TrainSettings, checkpoint_settings
        from td3sched.rl.train import train as run_training
        from td3sched.rl.workers import EnvWorkerError
    except ImportError as exc:
        _fail(f"training needs the rl extra ({exc}): pip install 'td3sched[rl]'")
    given = {"scenario": scenario, "seed": seed, "span": span, "episode_hours": episode_hours, "action_mode": action,
             "action_hold_s": action_hold, "warmup_hours": warmup_h, "warmup_score": warmup_score,
             "env_workers": env_workers, "sibling_spread": spread}
    learner = {"algo": algo, "learning_starts": learning_starts, "gamma_per_hour": gamma_per_hour,
               "preactivation_penalty": preactivation_penalty, "branch_every": branch_every,
               "branch_horizon_s": branch_horizon, "branch_imitation": branch_imitation, "anchor": anchor,
               "bc_alpha": bc_alpha, "bc_decay_steps": bc_decay_steps}
    if action_hold is not None:
        from td3sched.rl.actions import check_hold

        try:
            check_hold(action_hold)
        except ValueError as exc:
            _fail(f"--action-hold: {exc}")
    if action is not None:
        from td3sched.rl.actions import action_mode_of

        try:
            given["action_mode"] = action_mode_of(action)
        except ValueError as exc:
            _fail(f"--action: {exc}")
    if set_:
        given["overrides"] = tuple(set_)
    try:
        if steps < 1 or checkpoint_every < 0 or threads < 1 or branch_workers < 1:
            raise ValueError(f"--steps {steps}, --checkpoint-every {checkpoint_every}, --threads {threads}, "
                             f"--branch-workers {branch_workers}: expected steps >= 1, checkpoint-every >= 0 (0: only "
                             "at the end), threads >= 1, branch-workers >= 1")
        if ray is not None and (env_workers or 1) < 2 and not resume:
            raise ValueError(f"--ray {ray}: Ray runs the env copies 2..N of --env-workers N: expected "
                             "--env-workers 2 or more")
        if resume:
            settings, config, done = checkpoint_settings(out_dir)
            clash = {k: (v, getattr(settings, k)) for k, v in given.items()
                     if v is not None and v != getattr(settings, k)}
            clash.update({k: (v, getattr(config, k)) for k, v in learner.items()
                          if v is not None and v != getattr(config, k)})
            if clash:
                raise ValueError(f"--resume: options differ from the checkpoint's (given, checkpoint): {clash}")
            if steps <= done:
                raise ValueError(f"--steps {steps}: the checkpoint in {out_dir} is at step {done}; expected more")
        else:
            if (out_dir / CHECKPOINT_FILE).exists():
                raise ValueError(f"--out {out_dir} holds a checkpoint: pass --resume to continue it, or choose "
                                 "another folder")
            defaults = TrainSettings()
            settings = TrainSettings(**{k: v if v is not None else getattr(defaults, k) for k, v in given.items()})
            if anchor is not None:  # with the action mode's check, before any work
                from td3sched.rl.actions import static_score_args

                from td3sched.rl.train import check_spread_of

                try:
                    check_spread_of(anchor, static_score_args(anchor, settings.action_mode), settings.sibling_spread,
                                    "the anchor")
                except ValueError as exc:
                    raise ValueError(f"--anchor: {exc}") from None
            config = TD3Config(**{k: v for k, v in learner.items() if v is not None})
        from td3sched.outputs import check_folder
        from td3sched.rl.select import SELECTION_FILE, SelectionConfig, check_held_out
        from td3sched.scenario import load_scenario

        scenario_ = load_scenario(settings.scenario, list(settings.overrides))
        scenario_.span(settings.span)  # before the first step
        check_folder(out_dir, "--out")
        selection = None
        if select_span is None and resume and (out_dir / SELECTION_FILE).exists():  # the run's own, as recorded
            saved = json.loads((out_dir / SELECTION_FILE).read_text())["selection"]
            selection = SelectionConfig(saved["span"], tuple(saved["seeds"]), select_workers)
        elif select_span is not None:
            if select_seeds < 1:
                raise ValueError(f"--select-seeds {select_seeds}: expected at least 1 seed")
            if not checkpoint_every:
                raise ValueError("--select-span validates every checkpoint: expected --checkpoint-every > 0")
            selection = SelectionConfig(select_span, tuple(range(1, select_seeds + 1)), select_workers)
        if selection is not None:
            check_held_out(scenario_, settings.span, selection.span)
    except (ValueError, FileNotFoundError, KeyError) as exc:
        _fail(str(exc))
    torch.set_num_threads(threads)
    from td3sched.rl.actions import design_of

    hold = f" held {settings.action_hold_s:g} s" if settings.action_hold_s else ""
    console.print(f"train: {settings.scenario}/{settings.span}, {settings.episode_hours:g} h windows, seed "
                  f"{settings.seed}, {config.algo}, action {design_of(settings.action_mode)}{hold}"
                  + (f", {settings.env_workers} env workers" if settings.env_workers > 1 else "")
                  + f" -> {escape(str(out_dir))}"
                  + (" (resumed)" if resume else ""))

    if selection is not None:
        console.print(f"selection: every {checkpoint_every:,} steps and at the end, on span {selection.span}, seeds "
                      f"{', '.join(map(str, selection.seeds))} -> {escape(str(out_dir / 'best'))}")

    def run(on_log=None):
        return run_training(out_dir, steps, settings, config, checkpoint_every=checkpoint_every, resume=resume,
                            on_log=on_log, branch_workers=branch_workers, ray_address=ray, selection=selection,
                            say=lambda line: console.print(escape(line)))

    try:
        if progress and not console.is_terminal:
            result = run(train_progress_lines(steps, done if resume else 0))
        elif progress:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                       TimeRemainingColumn)

            with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                          TextColumn("{task.fields[sps]:>5.0f} steps/s"), TextColumn("ep reward {task.fields[reward]}"),
                          TextColumn("critic loss {task.fields[critic]} actor loss {task.fields[actor]}"),
                          TextColumn("at bound {task.fields[saturated]}"),
                          TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=True) as bar:
                task = bar.add_task("train", total=steps, completed=done if resume else 0, sps=0.0, reward="-",
                                    critic="-", actor="-", saturated="-")

                def on_log(d: dict) -> None:
                    fmt = lambda key: f"{d[key]:.4g}" if key in d and d[key] == d[key] else "-"  # noqa: E731
                    bar.update(task, completed=d["step"], sps=d["SPS"], reward=fmt("episode_reward"),
                               critic=fmt("qf_loss"), actor=fmt("actor_loss"),
                               saturated=f"{d['saturated']:.0%}" if "saturated" in d else "-")

                result = run(on_log)
        else:
            result = run()
    except (ValueError, FileNotFoundError, CheckpointError, ModelError, EnvWorkerError) as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        checkpoint = out_dir / CHECKPOINT_FILE
        if checkpoint.exists():
            console.print(f"[yellow]interrupted:[/yellow] the last checkpoint is {escape(str(checkpoint))}; continue "
                          f"with: td3sched train --steps {steps} --out {escape(str(out_dir))} --resume")
        else:
            console.print(f"[yellow]interrupted[/yellow] before the first checkpoint (every {checkpoint_every:,} "
                          "steps): nothing to resume; run the same command again")
        raise typer.Exit(130) from None
    recent = f"{sum(result.recent_returns) / len(result.recent_returns):.4g}" if result.recent_returns else "-"
    console.print(f"{result.steps:,} steps, {result.episodes} episodes, {result.wall_s:,.1f} s training, "
                  f"{result.sps:,.0f} steps/s; mean of the last episode rewards {recent}")
    card = json.loads((out_dir / "model.json").read_text())
    last = card["training"].get("preactivation_saturation", {}).get("last")
    if last is not None:
        console.print(f"actor pre-activations at the bound (> 90%) on the last logged batch: {last:.1%}")
    console.print(f"model: {escape(str(out_dir))} (use --policy td3:{escape(str(out_dir))})")
    if selection is not None:
        best = json.loads((out_dir / SELECTION_FILE).read_text())["best"]
        console.print(f"selected: step {best['step']:,} of {result.steps:,}, the lowest validation cost on "
                      f"{selection.span} (use --policy td3:{escape(str(out_dir / 'best'))})")


@app.command()
def overestimation(
    scenario: str = typer.Option(DEFAULT_SCENARIO, help=_scenario_help("Scenario to train and evaluate on "
                                                                       "(its train span)")),
    steps: int = typer.Option(25_000, help="Training steps per algorithm and seed."),
    eval_every: int = typer.Option(2_500, help="Training steps between two evaluation episodes."),
    seeds: int = typer.Option(2, help="Seeds per algorithm: runs seeds 1..N."),
    episode_hours: float = typer.Option(12.0, help="Episode window in simulated hours (training and evaluation); "
                                                   "the evaluation window must hold more decisions than the "
                                                   "horizon H (459 for gamma 0.99)."),
    learning_starts: int = typer.Option(2_000, help="Random warm-up steps before learning (TD3Config default: "
                                                    "10000)."),
    out_dir: Path = typer.Option(Path("docs/results/overestimation"), "--out",
                                 help="Folder of the CSV, the figure and the README (rewritten)."),
    threads: int = typer.Option(1, help="torch threads (see train)."),
    progress: bool = typer.Option(True, help="Show a progress bar."),
) -> None:
    """Overestimation, TD3 vs DDPG: the critic's Q estimate against the discounted Monte-Carlo return on the
    states of a fixed evaluation episode, over training (Fujimoto et al. 2018, Fig. 1)."""
    try:
        import torch

        from td3sched.rl.overestimation import CSV_FILE, FIGURE_FILE, REPORT_FILE, StudySettings, run_study
        from td3sched.rl.td3 import TD3Config
    except ImportError as exc:
        _fail(f"the study needs the rl extra ({exc}): pip install 'td3sched[rl]'")
    try:
        if seeds < 1 or threads < 1:
            raise ValueError(f"--seeds {seeds}, --threads {threads}: expected seeds >= 1, threads >= 1")
        settings = StudySettings(scenario, episode_hours=episode_hours, steps=steps, eval_every=eval_every,
                                 seeds=tuple(range(1, seeds + 1)), config=TD3Config(learning_starts=learning_starts))
    except ValueError as exc:
        _fail(str(exc))
    torch.set_num_threads(threads)
    runs = len(settings.algos) * len(settings.seeds)
    console.print(f"overestimation: {', '.join(settings.algos)} x {seeds} seeds x {steps:,} steps on "
                  f"{scenario}/{settings.span}, {episode_hours:g} h windows, evaluation every {eval_every:,} steps "
                  f"-> {escape(str(out_dir))}")

    def report(point) -> None:
        console.print(f"{point.algo} seed {point.seed} step {point.step:,}: Q {point.q_estimate:.4g}, MC return "
                      f"{point.mc_return:.4g}, bias {point.bias:+.4g} ({point.n_states} states)")

    try:
        if progress:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                       TimeRemainingColumn)

            with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                          TextColumn("{task.fields[sps]:>5.0f} steps/s"), TimeElapsedColumn(), TimeRemainingColumn(),
                          console=console) as bar:
                task = bar.add_task("train", total=runs * steps, sps=0.0)

                def on_log(d: dict) -> None:
                    bar.update(task, completed=d["done"], sps=d["SPS"], description=f"{d['algo']} seed {d['seed']}")

                result = run_study(settings, out_dir, on_log=on_log, on_point=report)
                bar.update(task, completed=runs * steps)
        else:
            result = run_study(settings, out_dir, on_point=report)
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        console.print(f"[yellow]interrupted:[/yellow] the points measured so far are in "
                      f"{escape(str(out_dir / CSV_FILE))}")
        raise typer.Exit(130) from None
    console.print(f"{len(result.points)} evaluation points in {result.wall_s / 60:,.1f} min; wrote "
                  f"{escape(str(out_dir / CSV_FILE))}, {escape(str(out_dir / FIGURE_FILE))}, "
                  f"{escape(str(out_dir / REPORT_FILE))}")


@app.command("export-onnx")
def export_onnx_cmd(
    folder: Path = typer.Argument(..., help="Model folder (td3sched train's run folder, or models/NAME)."),
    out_path: Optional[Path] = typer.Option(None, "--out", help="Where to write the graph (default: FOLDER/model.onnx)."),
) -> None:
    """The model's actor as an ONNX graph, normaliser inside, for ONNX Runtime (the engine and td3 runs)."""
    try:
        from td3sched.rl.model import ModelError
        from td3sched.rl.onnx_export import export_onnx
    except ImportError as exc:
        _fail(f"exporting a model needs the rl extra ({exc}): pip install 'td3sched[rl]'")
    try:
        path = export_onnx(folder, out_path)
    except (ModelError, ValueError) as exc:
        _fail(str(exc))
    console.print(f"wrote {escape(str(path))}")


@app.command("static-model")
def static_model_cmd(
    spec: str = typer.Argument(..., help="A static-weights spec, e.g. static-weights:w=1/0/0/0:tau=0.4:frag=0.25."),
    out_dir: Path = typer.Option(..., "--out", help="The model folder to write (refused if it holds a model)."),
    scenario: str = typer.Option("tiny", help="The scenario the card names (default tiny): its typical pods score a "
                                              "fragmentation share, and its best-static arguments are the engine's "
                                              "default fallback."),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP),
    action_hold: float = typer.Option(0.0, help="The card's action_hold_s: seconds a scheduler may keep the action "
                                                "(0: ask per pod). The action never changes, so any hold is exact."),
) -> None:
    """A model folder that acts one static-weights spec, whatever it observes: a static score served,
    gated and rolled back as any model is (docs/td3.md, Shipped models)."""
    try:
        from td3sched.rl.card import CARD_FILE
        from td3sched.rl.model import ModelError
        from td3sched.rl.static_model import write_static_model
    except ImportError as exc:
        _fail(f"writing a model needs the rl extra ({exc}): pip install 'td3sched[rl]'")
    from td3sched.scenario import load_scenario

    if (out_dir / CARD_FILE).exists():
        _fail(f"--out {out_dir}: holds a model already ({CARD_FILE}); choose another folder or remove it")
    try:
        load_scenario(scenario, list(set_))
        folder = write_static_model(spec, out_dir, scenario, tuple(set_), action_hold)
    except (ModelError, ValueError, KeyError, OSError) as exc:  # OSError: the scenario's traces are missing
        _fail(str(exc))
    console.print(f"wrote {escape(str(folder))}: {escape(spec)} as a model")


@app.command("plugin-vectors")
def plugin_vectors_cmd(
    out: Path = typer.Option(Path("scheduler/testdata/vectors.json"), help="Where the Go plugin's tests read them."),
) -> None:
    """Test vectors for the Go td3score plugin: static score (and its fragmentation blend), safety filter, v1.Pod requests, PromQL, observation, actor."""
    from td3sched.engine.plugin_vectors import write_vectors

    console.print(f"wrote {escape(str(write_vectors(out)))}")


@app.command()
def serve(
    config: Path = typer.Option(..., "--config", help="The engine's settings (docs/engine.md lists every key)."),
    ready_file: Optional[Path] = typer.Option(None, help="Write the bound ports here as JSON once serving."),
) -> None:
    """The decision engine: gRPC ScoreNodes and the HTTP scheduler extender (127.0.0.1 by default)."""
    import logging

    try:
        from td3sched.engine.config import load_config
        from td3sched.engine.serve import serve as run_engine
    except ImportError as exc:
        _fail(f"the engine needs the engine extra and its generated stubs ({exc}): pip install "
              "'td3sched[engine]' and run make setup")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        run_engine(load_config(config), ready_file)
    except (ValueError, OSError) as exc:
        _fail(str(exc))


@app.command("bc")
def bc_cmd(
    history: Path = typer.Option(..., "--history", metavar="DIR", help="Scheduling history: a folder of Parquet "
                                 "files (simulate --record-history, history-from-log) or one file."),
    out_dir: Path = typer.Option(..., "--out", metavar="MODEL", help="Model folder to write (then --policy td3:MODEL)."),
    epochs: int = typer.Option(40, help="Passes of the actor stage over the decisions (BCConfig.epochs)."),
    learning_rate: float = typer.Option(1e-4, "--lr", help="Adam's learning rate of the actor stage."),
    action: str = typer.Option("full", help="full (weights+tau): weights and tau; seed (weights): tau fixed at 0; "
                               "requests (weights+tau+requests): weights, tau and the requests share, which a "
                               "history of a requests-based scheduler such as k8s-default needs; balance "
                               "(weights+tau+requests+balance): those and the balance share (k8s-default's "
                               "BalancedAllocation)."),
    validation_share: float = typer.Option(0.1, help="Newest share of decisions held out for the agreement."),
    target: str = typer.Option("chosen", help="The loss's target: chosen, the chosen node (as an import "
                               "holds it); best, the nodes the history's policy scored best where its scores "
                               "are recorded, else the chosen node (docs/lifecycle.md compares them)."),
    seed: int = typer.Option(1, min=0, help="torch's seed (initialisation, batch order)."),
    threads: int = typer.Option(1, min=1, help="torch threads (more can be far slower on a busy machine)."),
) -> None:
    """Behaviour cloning: an actor whose action ranks the history's chosen nodes first, through the
    product's score (docs/lifecycle.md); prints the top-1 agreement with the history."""
    from td3sched.lifecycle.bc import BCConfig, clone_history
    from td3sched.outputs import check_folder
    from td3sched.rl.actions import action_mode_of

    try:
        import torch

        torch.set_num_threads(threads)
        check_folder(out_dir, "--out")
        config = BCConfig(epochs=epochs, learning_rate=learning_rate, action_mode=action_mode_of(action),
                          validation_share=validation_share, seed=seed, target=target)
        training = clone_history(history, out_dir, config, progress=lambda line: console.print(escape(line)))
    except (ValueError, FileNotFoundError) as exc:
        _fail(str(exc))
    _print_agreement(training)
    console.print(f"model: {escape(str(out_dir))} (use --policy td3:{escape(str(out_dir))})")


def _print_agreement(training: dict) -> None:
    val = training.get("validation")
    out.print(f"top-1 agreement with the history: {training['train']['agreement']:.3f} on {training['train']['decisions']:,} "
              f"decisions trained on" + (f", {val['agreement']:.3f} on {val['decisions']:,} held out" if val else ""))
    top = [x.get("policy_top1") for x in (training["train"], val or {})]
    if top[0] is not None:
        out.print(f"the clone's best node among those the history's policy scored best: {top[0]:.3f} trained on"
                  + (f", {top[1]:.3f} held out" if top[1] is not None else ""))
    if training.get("tie_bound") is not None:
        out.print(f"the agreement the history's ties allow (the mean of 1/m over its m best-scored nodes): "
                  f"{training['tie_bound']:.3f}")


REGISTRY_HELP = "Model registry folder (default: $TD3SCHED_REGISTRY, else ./registry; docs/lifecycle.md)."


@app.command("history-from-log")
def history_from_log_cmd(
    log: Path = typer.Argument(..., help="The engine's decision log (decision_log.path; its rotated files are read too)."),
    out_path: Path = typer.Option(..., "--out", help="Parquet file to write, e.g. history/engine-2026-12-01.parquet."),
    prometheus: Optional[str] = typer.Option(None, "--prometheus", metavar="URL", help="Prometheus scraping "
                                             "node_exporter on every node: each bound pod's overload hours "
                                             "(outcome_overload_h) from its node's CPU over its stay; without it null."),
    step_s: float = typer.Option(15.0, "--step", help="With --prometheus: the range queries' step in seconds."),
    node_label: str = typer.Option("", help="With --prometheus: a label holding the node name; \"\" uses the "
                                   "instance without its port."),
    history_candidates: Optional[int] = typer.Option(None, "--history-candidates", help=HISTORY_CANDIDATES_HELP),
) -> None:
    """The engine's decision log as scheduling history (the schema of simulate --record-history)."""
    from td3sched.lifecycle.engine_log import convert_log
    from td3sched.outputs import check_file

    outcomes = None
    if prometheus is not None:
        from td3sched.lifecycle.importer import overload_from_prometheus

        def outcomes(rows):
            return overload_from_prometheus(rows, prometheus, step_s, node_label=node_label)
    try:
        check_file(out_path, "--out")
        path, counts = convert_log(log, out_path, outcomes, history_candidates)
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        _fail(str(exc))
    overload = f"; {counts['outcomes_known']:,} with their overload hours" if outcomes is not None else ""
    console.print(f"{counts['decisions']:,} decisions ({counts['bound']:,} with their bound node{overload}; "
                  f"{counts['bindings_unmatched']:,} bindings matched no decision; {counts['lines_skipped']:,} lines "
                  f"skipped) -> {escape(str(path))}")


@app.command("import-history")
def import_history_cmd(
    pods: Optional[str] = typer.Option(None, "--pods", metavar="FILE|URL", help="A v1.PodList: `kubectl get pods -A "
                                       "-o json` output, or the API server's /api/v1/pods URL."),
    audit_log: Optional[Path] = typer.Option(None, "--audit-log", help="Instead of --pods: the API server's audit log "
                                             "(pods and pods/binding at level Request or more)."),
    prometheus: str = typer.Option(..., "--prometheus", metavar="URL", help="Prometheus scraping node_exporter on "
                                   "every node (the engine's queries, docs/engine.md)."),
    out_path: Path = typer.Option(..., "--out", help="Parquet file to write, e.g. history/cluster.parquet."),
    step_s: float = typer.Option(15.0, "--step", help="Range queries' step in seconds (the scrape interval)."),
    token_file: Optional[Path] = typer.Option(None, help="A bearer token for the API server URL."),
    ca_file: Optional[Path] = typer.Option(None, help="The API server's CA certificate (default: the system's)."),
    node_label: str = typer.Option("", help="A label holding the node name; \"\" uses the instance without its port."),
    history_candidates: Optional[int] = typer.Option(None, "--history-candidates", help=HISTORY_CANDIDATES_HELP),
) -> None:
    """Scheduling history of a cluster that never ran td3-scheduler: its pods' bindings, node metrics at
    bind time (docs/lifecycle.md)."""
    from td3sched.lifecycle.importer import import_history, read_pod_list
    from td3sched.outputs import check_file

    try:
        check_file(out_path, "--out")
        if (pods is None) == (audit_log is None):
            raise ValueError("expected one source of bindings: --pods FILE|URL or --audit-log FILE")
        token = token_file.read_text().strip() if token_file else None
        pod_list = read_pod_list(pods, token, ca_file=ca_file) if pods is not None else None
        path, counts = import_history(pod_list, prometheus, out_path, step_s, node_label=node_label,
                                      progress=lambda line: console.print(escape(line)), audit_log=audit_log,
                                      candidates=history_candidates)
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        _fail(str(exc))
    console.print(f"{counts['decisions']:,} decisions from {counts['bindings']:,} bindings ({counts['pods_skipped']:,} "
                  f"skipped: pods without a binding time or bindings without their pod; {counts['no_metrics']:,} "
                  "bindings without metrics) -> "
                  f"{escape(str(path))}")


@app.command("rebuild-scenario")
def rebuild_scenario_cmd(
    history: Path = typer.Option(..., "--history", metavar="DIR", help="Scheduling history of a cluster (import-history, "
                                 "history-from-log) or of the simulator: a folder of Parquet files or one file."),
    nodes: Path = typer.Option(..., "--nodes", metavar="FILE", help="The cluster's nodes: `kubectl get nodes -o json`."),
    window: str = typer.Option("7d", help="The newest window of the history, the span `recent`: 7d, 12h, 30m, 3600s."),
    warmup: str = typer.Option("1d", help="History before the window replayed as the warm-up (at most)."),
    out_dir: Path = typer.Option(..., "--out", help="Folder to write (replaced whole): scenario.yaml, the pods and "
                                 "their usage, rebuild.json."),
) -> None:
    """A scenario rebuilt from scheduling history on the cluster's nodes, for the gate and evaluate
    (`--scenario OUT/scenario.yaml --span recent`; docs/lifecycle.md)."""
    from td3sched.lifecycle.finetune import parse_window
    from td3sched.lifecycle.rebuild import read_node_list, rebuild_scenario

    try:
        rebuilt = rebuild_scenario(history, read_node_list(nodes), out_dir, parse_window(window),
                                   parse_window(warmup) if warmup.strip() not in ("0", "0s") else 0.0,
                                   progress=lambda line: console.print(escape(line)))
    except (ValueError, FileNotFoundError) as exc:
        _fail(str(exc))
    out.print(f"scenario {escape(rebuilt.scenario)}, span {rebuilt.span}: td3sched evaluate --scenario "
              f"{escape(rebuilt.scenario)} --span {rebuilt.span} ...")


@app.command("offline-rl")
def offline_rl_cmd(
    history: Path = typer.Option(..., "--history", metavar="DIR", help="Simulator history of a policy of the "
                                 "product's score, with rewards (simulate --record-history)."),
    out_dir: Path = typer.Option(..., "--out", metavar="MODEL", help="Model folder to write."),
    steps: int = typer.Option(20_000, min=1, help="Gradient steps."),
    alpha: float = typer.Option(2.5, min=0.0, help="TD3+BC's alpha: the Q term's weight against the behaviour term."),
    init: Optional[Path] = typer.Option(None, help="Start from this model folder (e.g. td3sched bc's); default: a new one."),
    gamma_per_hour: Optional[float] = typer.Option(None, help="Semi-MDP discount per simulated hour (a new model)."),
    seed: int = typer.Option(1, min=0, help="Seed of a new agent and of the replay sampling."),
    threads: int = typer.Option(1, min=1, help="torch threads."),
) -> None:
    """TD3+BC on scheduling history: offline RL from the history's rewards (docs/lifecycle.md)."""
    from td3sched.lifecycle.offline import offline_td3bc
    from td3sched.outputs import check_folder

    try:
        import torch

        torch.set_num_threads(threads)
        check_folder(out_dir, "--out")
        training = offline_td3bc(history, out_dir, steps, alpha, init, seed, gamma_per_hour,
                                 progress=lambda line: console.print(escape(line)))
    except (ValueError, FileNotFoundError) as exc:
        _fail(str(exc))
    out.print(f"{training['transitions']:,} transitions, {steps:,} steps; mean |action - history's| "
              f"{training['mean_abs_action_gap']:.4f}")
    console.print(f"model: {escape(str(out_dir))} (use --policy td3:{escape(str(out_dir))})")


@app.command("online-rl")
def online_rl_cmd(
    model: Path = typer.Option(..., help="The offline TD3+BC model (td3sched offline-rl)."),
    history: Path = typer.Option(..., "--history", metavar="DIR", help="The history it learnt from: its transitions "
                                 "start the replay buffer."),
    out_dir: Path = typer.Option(..., "--out", metavar="MODEL", help="Model folder to write."),
    steps: int = typer.Option(10_000, min=1, help="Online steps (decisions) on the simulator."),
    decay_steps: Optional[int] = typer.Option(5_000, min=1, help="Steps over which the behaviour term's weight falls "
                                              "linearly to 0 (TD3Config.bc_decay_steps)."),
    naive: bool = typer.Option(False, "--naive", help="Drop the behaviour term at once (the naive switch)."),
    scenario: str = typer.Option(DEFAULT_SCENARIO, help=_scenario_help("Scenario whose train span is the online env")),
    episode_hours: float = typer.Option(12.0, help="Episode window in simulated hours."),
    eval_every: int = typer.Option(500, min=1, help="Steps between two evaluations on one fixed window."),
    seed: int = typer.Option(1, min=0, help="Seed of the env's windows and of the noise."),
    action_hold: float = typer.Option(0.0, min=0.0, help="Simulated seconds an action holds online (as train's; "
                                      "0: an action per decision)."),
    warmup_h: float = typer.Option(0.0, min=0.0, help="Start each episode from the cluster --warmup-score leaves "
                                   "after this many simulated hours (as train's)."),
    warmup_score: Optional[str] = typer.Option(None, help="The static-weights spec of the warm-up's placements."),
    env_workers: int = typer.Option(1, min=1, help="Env copies stepped at once, each in its own process (as "
                                    "train's; --steps a multiple of it)."),
    threads: int = typer.Option(1, min=1, help="torch threads."),
) -> None:
    """Online TD3 from an offline TD3+BC model, the behaviour term decayed (docs/lifecycle.md)."""
    from td3sched.lifecycle.offline import online_after_offline
    from td3sched.outputs import check_folder

    try:
        import torch

        torch.set_num_threads(threads)
        check_folder(out_dir, "--out")
        result = online_after_offline(model, history, out_dir, steps, None if naive else decay_steps, scenario,
                                      episode_hours, eval_every, seed=seed, action_hold_s=action_hold,
                                      warmup_hours=warmup_h, warmup_score=warmup_score, env_workers=env_workers,
                                      progress=lambda line: console.print(escape(line)))
    except (ValueError, FileNotFoundError) as exc:
        _fail(str(exc))
    out.print("evaluation returns: " + ", ".join(f"{s:,}: {r:.4f}" for s, r in result["returns"]))
    console.print(f"model: {escape(str(out_dir))} (use --policy td3:{escape(str(out_dir))})")


@app.command("finetune")
def finetune_cmd(
    history: Path = typer.Option(..., "--history", metavar="DIR", help="Scheduling history (folder or file)."),
    window: str = typer.Option("7d", help="The newest window of the history to learn from: 7d, 12h, 30m, 3600s."),
    method: str = typer.Option("choices", help="choices: rank the window's chosen nodes first (behaviour cloning; "
                                               "from another scheduler's or an operator's history); replay: TD3 on "
                                               "the replay of the window, the gate's (learns from outcomes; from the "
                                               "model's own history)."),
    learning_rate: Optional[float] = typer.Option(None, "--lr", help="Adam's learning rate (small: the model moves a "
                                                  "little a day; default 1e-5 with choices, 1e-4 with replay)."),
    epochs: int = typer.Option(5, help="With choices: passes over the window's decisions."),
    steps: int = typer.Option(600, min=2, help="With replay: TD3 steps (decisions, or holds of the model's card), "
                                               "the first 256 (at most half) filling the replay buffer."),
    nodes: Optional[Path] = typer.Option(None, "--nodes", metavar="FILE", help="With replay and a cluster's history: "
                                         "its nodes (`kubectl get nodes -o json`), to rebuild the window on."),
    model: Optional[Path] = typer.Option(None, help="Model folder to fine-tune (default: the registry's serving one)."),
    out_dir: Path = typer.Option(..., "--out", metavar="CANDIDATE", help="Model folder to write the candidate to."),
    registry: Optional[Path] = typer.Option(None, help=REGISTRY_HELP),
    seed: int = typer.Option(1, min=0, help="torch's seed (batch order; with replay, the episodes' too)."),
    threads: int = typer.Option(1, min=1, help="torch threads."),
) -> None:
    """Fine-tune the serving model on the newest window of history; write and register a candidate."""
    from td3sched.lifecycle.finetune import DEFAULT_LR, DEFAULT_REPLAY_LR, finetune, finetune_on_replay
    from td3sched.lifecycle.rebuild import read_node_list
    from td3sched.lifecycle.registry import Registry, RegistryError
    from td3sched.outputs import check_folder

    if method not in ("choices", "replay"):
        _fail(f"--method {method!r}: expected choices or replay")
    try:
        import torch

        torch.set_num_threads(threads)
        reg = Registry(registry)
        if model is None:
            serving = reg.serving()
            if serving is None:
                raise RegistryError(f"registry {reg.root}: nothing is serving: expected --model FOLDER or a promoted "
                                    "version (td3sched promote)")
            model = reg.folder(serving)
        check_folder(out_dir, "--out")
        say = lambda line: console.print(escape(line))  # noqa: E731
        if method == "choices":
            training = finetune(history, model, out_dir, window, learning_rate or DEFAULT_LR, epochs, seed,
                                progress=say)
        else:
            node_list = read_node_list(nodes) if nodes is not None else None
            training = finetune_on_replay(history, model, out_dir, window, learning_rate or DEFAULT_REPLAY_LR, steps,
                                          seed=seed, node_list=node_list, progress=say)
        version = reg.register(out_dir)
    except (ValueError, FileNotFoundError) as exc:
        _fail(str(exc))
    if method == "choices":
        out.print(f"agreement with the window: {training['initial_train']['agreement']:.3f} before, "
                  f"{training['train']['agreement']:.3f} after")
    else:
        returns = training["recent_returns"]
        out.print(f"{training['steps']:,} steps on the replay, {training['episodes']} episode(s)"
                  + (f", last return {returns[-1]:.4f}" if returns else ""))
    out.print(f"candidate {version} registered in {reg.root} (parent {training['parent']}): td3sched gate {version}")


@app.command("gate")
def gate_cmd(
    candidate: str = typer.Argument(..., help="A registered version, or a model folder (registered first)."),
    against: Optional[str] = typer.Option(None, help="What the candidate must beat: a version, a model folder or a "
                                          "policy spec (default: the serving version; k8s-default when none serves)."),
    scenario: str = typer.Option(DEFAULT_SCENARIO, help=_scenario_help("Scenario of the replays")),
    span: str = typer.Option(MEASURE_SPAN, help=_span_help(MEASURE_SPAN, "Span of the replays")),
    seeds: int = typer.Option(5, min=1, help="Seeds 1..N, each replayed by both (paired)."),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP),
    margin: float = typer.Option(0.01, help="Least mean improvement of the cost, a share of the current's (1%)."),
    safety_tolerance: float = typer.Option(0.02, help="Share by which a safety metric's mean may exceed the current's."),
    promote: bool = typer.Option(False, "--promote", help="Promote the candidate when it passes."),
    history: Optional[Path] = typer.Option(None, "--history", metavar="DIR", help="Replay the newest --window of this "
                                           "history instead of --scenario and --span: a simulator history's own "
                                           "scenario, or a scenario rebuilt from a cluster's (engine, import) history "
                                           "on the nodes of --nodes."),
    window: str = typer.Option("7d", help="With --history: the window replayed, before its last decision."),
    nodes: Optional[Path] = typer.Option(None, "--nodes", metavar="FILE", help="With a cluster's --history: its "
                                         "nodes, as `kubectl get nodes -o json` prints them. The rebuilt scenario "
                                         "is kept in the candidate's registry folder (replay/)."),
    registry: Optional[Path] = typer.Option(None, help=REGISTRY_HELP),
    workers: int = typer.Option(1, min=1, help="Processes the replays run in side by side (the same runs and "
                                "verdict; one a core at most)."),
) -> None:
    """Replay the candidate and the serving model on the same seeds; record the verdict (exit 1 if refused)."""
    from td3sched.lifecycle.finetune import parse_window
    from td3sched.lifecycle.gate import GateConfig, history_replay, run_gate
    from td3sched.lifecycle.rebuild import read_node_list
    from td3sched.lifecycle.registry import Registry

    try:
        reg = Registry(registry)
        version = reg.register(candidate) if Path(candidate).is_dir() else candidate
        folder = reg.folder(version)
        if history is not None:
            node_list = read_node_list(nodes) if nodes is not None else None
            scenario, span, recent = history_replay(history, parse_window(window), node_list, folder / "replay",
                                                    progress=lambda line: console.print(escape(line)))
            set_ = [*set_, *recent]
        if against is None:
            serving = reg.serving()
            against = str(reg.folder(serving)) if serving else "k8s-default"
        elif not Path(against).is_dir() and (reg.versions_dir / against).is_dir():
            against = str(reg.folder(against))
        config = GateConfig(scenario, span, tuple(range(1, seeds + 1)), tuple(set_), margin, safety_tolerance)
        from td3sched.processes import optional_pool

        with optional_pool(workers) as pool:
            result = run_gate(folder, against, config, progress=lambda line: console.print(escape(line)), pool=pool)
        reg.record_gate(version, result)
        if promote and result["promote"]:
            previous = reg.promote(version)
    except (ValueError, FileNotFoundError) as exc:
        _fail(str(exc))
    o = result["objective"]
    interval = ("no interval" if o["improvement_low"] is None else
                f"95% interval [{o['improvement_low']:.4f}, {o['improvement_high']:.4f}]")
    out.print(f"{o['metric']}: current {o['current_mean']:.4f}, candidate {o['candidate_mean']:.4f}, improvement "
              f"{o['improvement_mean']:.4f}, {interval} (margin {o['margin_needed']:.4f})")
    for metric, m in result["safety"].items():
        out.print(f"{metric}: current {m['current']:.4g}, candidate {m['candidate']:.4g}{' WORSE' if m['worse'] else ''}")
    if not result["promote"]:
        out.print(f"gate: {version} refused: " + "; ".join(result["reasons"]))
        raise typer.Exit(1)
    out.print(f"gate: {version} passed" + (f"; promoted (replacing {previous or 'none'})" if promote else
                                           f": td3sched promote {version}"))


@app.command("promote")
def promote_cmd(
    version: str = typer.Argument(..., help="A registered version (or a model folder, registered first)."),
    force: bool = typer.Option(False, "--force", help="Promote without a passed gate (the first model, or an "
                                                      "operator's override)."),
    registry: Optional[Path] = typer.Option(None, help=REGISTRY_HELP),
) -> None:
    """Make a version the serving one (atomic; a running engine reloads it)."""
    from td3sched.lifecycle.registry import Registry

    try:
        reg = Registry(registry)
        version = reg.register(version) if Path(version).is_dir() else version
        previous = reg.promote(version, require_gate=not force)
    except (ValueError, FileNotFoundError) as exc:
        _fail(str(exc))
    out.print(f"serving {version} (was {previous or 'none'}); the engine's model: {reg.serving_link}")


@app.command("rollback")
def rollback_cmd(registry: Optional[Path] = typer.Option(None, help=REGISTRY_HELP)) -> None:
    """Serve the version the serving one replaced (atomic; a running engine reloads it)."""
    from td3sched.lifecycle.registry import Registry

    try:
        was, now = Registry(registry).rollback()
    except (ValueError, FileNotFoundError) as exc:
        _fail(str(exc))
    out.print(f"serving {now} (rolled back from {was})")



@app.command("rehearse")
def rehearse_cmd(
    model: Path = typer.Option(..., "--model", help="The model serving at the start (and kept frozen to compare)."),
    out_dir: Path = typer.Option(..., "--out", metavar="DIR", help="Folder of the rehearsal: its registry, history, "
                                 "candidates, rows.jsonl, report.md and rehearsal.png. An existing one goes on after "
                                 "its last period done."),
    scenario: str = typer.Option(DEFAULT_SCENARIO, help=_scenario_help("Scenario rolled through")),
    days: Optional[str] = typer.Option(None, help="FIRST:END days rolled through (END exclusive), e.g. 14:31; "
                                       "default: the scenario's test span."),
    period: float = typer.Option(1.0, help="Days per round of serve, fine-tune and gate."),
    seeds: int = typer.Option(2, min=1, help="Seeds 1..N each period is served on by both models (seed 1 is the "
                                             "history)."),
    window: str = typer.Option("7d", help="The fine-tune's window of the history."),
    steps: int = typer.Option(600, min=0, help="The fine-tune's TD3 steps (finetune --method replay); 0: no "
                              "fine-tune or gate, the model against the references a period at a time."),
    learning_rate: float = typer.Option(1e-4, "--lr", help="The fine-tune's learning rate."),
    gate_window: str = typer.Option("1d", help="The window the gate replays."),
    gate_seeds: int = typer.Option(3, min=2, help="The gate's seeds 1..N."),
    margin: float = typer.Option(0.01, help="The gate's margin, a share of the serving model's cost."),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP),
    reference: list[str] = typer.Option([], "--reference", metavar="POLICY",
                                        help="A policy run on each period's seeds beside the two models, for the "
                                        "report (repeatable), e.g. k8s-default or static-weights:w=1/0/0/0:tau=0.4."),
    threads: int = typer.Option(1, min=1, help="torch threads."),
    workers: int = typer.Option(1, min=1, help="Processes a period's runs and the gate's replays run in side by "
                                "side (the same runs and rows; one a core at most)."),
) -> None:
    """The lifecycle rolled through a scenario's days (serve, fine-tune on the replay, gate, promote)
    against the model frozen at the start, and any reference policies; a row per period, a report and
    a figure (docs/lifecycle.md)."""
    from td3sched.lifecycle.rehearsal import RehearsalConfig, rehearse, report

    try:
        import torch

        torch.set_num_threads(threads)
        first, end = (float(x) for x in days.split(":")) if days is not None else (None, None)
    except ValueError:
        _fail(f"--days {days!r}: expected FIRST:END in days, e.g. 14:31")
    try:
        if days is None:
            from td3sched.scenario import load_scenario

            first, end = (s / 86400.0 for s in load_scenario(scenario, list(set_)).span("test"))
        config = RehearsalConfig(scenario, first, end, period, tuple(range(1, seeds + 1)), window, steps,
                                 learning_rate, gate_window, tuple(range(1, gate_seeds + 1)), margin, tuple(set_),
                                 tuple(reference))
        rows = rehearse(model, out_dir, config, progress=lambda line: console.print(escape(line)), workers=workers)
        md, png = report(out_dir, rows)
    except (ValueError, FileNotFoundError) as exc:
        _fail(str(exc))
    out.print(md.read_text().splitlines()[-1])
    out.print(f"report: {md}; figure: {png}")

@app.command("models")
def models_cmd(
    registry: Optional[Path] = typer.Option(None, help=REGISTRY_HELP),
    json_out: bool = typer.Option(False, "--json", help="Print every version's card and gate result as JSON."),
) -> None:
    """The registry's versions, their cards and gate results; the serving one marked."""
    from td3sched.lifecycle.registry import Registry

    try:
        versions = Registry(registry).list()
    except (ValueError, FileNotFoundError) as exc:
        _fail(str(exc))
    if json_out:
        out.print_json(data=[{"version": v.version, "serving": v.serving, "card": v.card, "gate": v.gate,
                              "promotion": v.promotion} for v in versions])
        return
    table = Table(title=f"models in {Registry(registry).root} (* serving; --json: cards and gate results)")
    for column in ("version", "", "kind", "parent", "gate", "cost", "vs"):
        table.add_column(column, no_wrap=True)
    for v in versions:
        t = v.card.get("training") or {}
        gate = "-" if v.gate is None else ("passed" if v.gate["promote"] else "refused")
        o = (v.gate or {}).get("objective") or {}
        cost = (f"{o['candidate_mean']:.2f}", f"{o['current_mean']:.2f}") if o.get("candidate_mean") is not None \
            else ("-", "-")
        kind = {"behaviour-cloning": "bc", None: "td3"}.get(t.get("kind"), str(t.get("kind")))
        table.add_row(v.version, "*" if v.serving else "", kind, str(t.get("parent") or "-"),
                      gate, *cost)
    out.print(table)


@app.command("inspect-model")
def inspect_model(
    folder: Path = typer.Argument(..., help="Model folder (td3sched train's run folder), or a shipped model's "
                                            "name (td3-dlrm, td3-dlrm-seed, td3-dlrm-held, td3-openb, td3-openb-seed, td3-openb-held)."),
    scenario: str = typer.Option(DEFAULT_SCENARIO, help=_scenario_help("Scenario whose window the model runs on")),
    span: str = typer.Option(MEASURE_SPAN, help=_span_help(MEASURE_SPAN, "Span of the window")),
    episode_hours: float = typer.Option(6.0, help="Window length in simulated hours."),
    seed: int = typer.Option(1, min=0, help="Draws the window (and its world)."),
    json_out: bool = typer.Option(False, "--json", help="Print the figures as JSON."),
) -> None:
    """What a trained model chooses on one window, and how much its critic tells actions apart."""
    try:
        import torch

        from td3sched.rl.diagnose import inspect_model as run_inspection
        from td3sched.rl.model import ModelError, load_model
    except ImportError as exc:
        _fail(f"inspecting a model needs the rl extra ({exc}): pip install 'td3sched[rl]'")
    torch.set_num_threads(1)
    try:
        model = load_model(folder)
        result = run_inspection(model, scenario, span, episode_hours, seed)
    except (ModelError, ValueError, FileNotFoundError) as exc:
        _fail(str(exc))
    if json_out:
        print(json.dumps(result.to_json(), indent=2))
        return
    card = model.card
    fmt = lambda xs: "[" + ", ".join(f"{x:.3f}" for x in xs) + "]"  # noqa: E731
    table = Table(title=f"{escape(str(folder))}: {card['scenario']}-trained, action {model.action_mode}, "
                        f"{card['training']['steps']:,} steps" if card.get("training") else escape(str(folder)))
    table.add_column("figure")
    table.add_column("value", justify="right")
    for name, value in (
            ("window", f"{scenario}/{span} {result.window_h[0]:.2f}-{result.window_h[1]:.2f} h"),
            ("decisions", f"{result.decisions:,}"), ("reward", f"{result.reward:.2f}"),
            ("weights [cpu, mem, io, net] mean", fmt(result.weights_mean)),
            ("weights std", fmt(result.weights_std)), ("tau mean / std", f"{result.tau_mean:.3f} / {result.tau_std:.3f}"),
            *([("ceiling mean / std", f"{result.ceiling_mean:.3f} / {result.ceiling_std:.3f}")]
              if result.ceiling_mean is not None else []),
            ("pre-activations saturated", f"{100 * result.saturated:.0f}%"),
            ("Q std across states", f"{result.q_state_std:.3f}"),
            ("Q std across random actions (per state)", f"{result.q_action_std:.3f}"),
            ("Q gain of the actor over random actions", f"{result.q_policy_gain:.3f}")):
        table.add_row(escape(name), escape(value))
    Console().print(table)


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
