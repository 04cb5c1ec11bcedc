"""The ``td3sched`` command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="td3-scheduler: a learned Kubernetes scheduler and its trace-driven simulator.")
console = Console(stderr=True)
out = Console()


def _fail(message: str) -> None:
    console.print(f"[red]error:[/red] {escape(message)}")
    raise typer.Exit(2)


@app.command()
def simulate(
    scenario: str = typer.Option("tiny", help="Scenario name (see `td3sched scenarios`)."),
    policy: str = typer.Option("k8s-default", help="Scoring policy."),
    seed: int = typer.Option(1, help="Seed: with the scenario, it fully determines the run."),
    span: str = typer.Option("full", help="Span of the scenario to run: full, train or test."),
    set_: list[str] = typer.Option([], "--set", help="Override a scenario field, e.g. --set nodes.count=800."),
    out_path: Optional[Path] = typer.Option(None, "--out", help="Write the run's metrics as JSON here."),
    events: Optional[Path] = typer.Option(None, help="Write every event of the run as JSON lines here."),
    progress: bool = typer.Option(True, help="Show a progress bar."),
    lenient: bool = typer.Option(False, help="Skip malformed trace rows (and report them) instead of failing."),
) -> None:
    """Run one policy over a scenario span and print its metrics."""
    from td3sched.run import run_simulation

    try:
        result = run_simulation(scenario, policy, seed, span, list(set_), events_path=events, progress=progress,
                                lenient=lenient)
    except (ValueError, FileNotFoundError) as exc:
        _fail(str(exc))
    for line in result["skipped_rows"]:
        console.print(f"[yellow]{escape(line)}[/yellow]")
    print_metrics(result)
    if out_path:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = out_path.with_suffix(out_path.suffix + ".tmp")
        tmp.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
        tmp.replace(out_path)
        console.print(f"wrote {out_path}")


def print_metrics(result: dict) -> None:
    table = Table(title=f"{result['scenario']} / {result['span']['name']} / {result['policy']} / seed {result['seed']}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in result["metrics"].items():
        table.add_row(key, f"{value:.4f}" if isinstance(value, float) else str(value))
    for key, value in result["runtime"].items():
        table.add_row(key, f"{value:,.1f}")
    out.print(table)


@app.command()
def scenarios() -> None:
    """List scenarios with their nodes, pods and spans (builds each workload; seed 1)."""
    from td3sched.scenario import load_scenario, scenario_names

    table = Table()
    for col in ("scenario", "nodes (start / max)", "pods", "days", "spans (days)", "description"):
        table.add_column(col)
    for name in scenario_names():
        try:
            sc = load_scenario(name)
            world = sc.build(1)
        except (ValueError, FileNotFoundError) as exc:
            table.add_row(name, "-", "-", "-", "-", f"unavailable: {exc}")
            continue
        start = sum(p.count for p in world.pools)
        most = sum(p.max_count for p in world.pools)
        spans = ", ".join(f"{k} {v[0]}-{v[1]}" for k, v in sc.config.get("spans", {}).items())
        table.add_row(name, f"{start:,} / {most:,}", f"{len(world.workload):,}", f"{sc.days:g}", spans,
                      sc.config.get("description", ""))
    out.print(table)


@app.command("build-tiny")
def build_tiny_cmd(seed: int = typer.Option(1, help="Seed of the sampling.")) -> None:
    """Regenerate the shipped tiny scenario from the production traces."""
    from td3sched.scenario import SCENARIO_DIR
    from td3sched.scenario.tiny import build_tiny

    w = build_tiny(SCENARIO_DIR / "tiny", seed)
    out.print(f"tiny: {len(w)} pods written to {SCENARIO_DIR / 'tiny'}")


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
