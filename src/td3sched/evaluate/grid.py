"""The evaluation grid: every (policy, seed) of one scenario span, run once, written once.

``prepare(...)`` checks every argument before anything runs (a ``GridError`` names the bad value and
the valid choices). ``run_grid(spec)`` runs the runs that are not already on disk, on local
processes or on Ray (``backends.py``), writing each record atomically to
``runs/<policy-slug>__seed<k>.json`` as soon as it arrives: an interrupted grid resumes where it
stopped. A run that raises is reported and the grid goes on.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable

from td3sched.outputs import check_folder, write_json_atomic, write_text_atomic  # noqa: F401 (report.py's)

#: The function each run calls, as "module:function"; it gets (scenario, policy, seed, span, overrides).
DEFAULT_RUNNER = "td3sched.run:run_simulation"
RUNS_DIR = "runs"
GRID_FILE = "grid.json"


class GridError(ValueError):
    """A bad argument of the grid, found before anything runs."""


class MixedVersionsError(GridError):
    """The grid's runs would come from more than one code version (and mixing was not asked for)."""


@dataclass(frozen=True)
class Task:
    """One run of the grid; small and picklable (it travels to worker processes and Ray)."""

    scenario: str
    span: str
    overrides: tuple[str, ...]
    policy: str
    seed: int
    runner: str = DEFAULT_RUNNER
    identity: tuple[str, str] | None = None
    """(concrete spec, fingerprint) of the policy when the grid was prepared (``Policy.fingerprint``):
    a stored run of another identity (best-static searched again, a model retrained) is stale."""

    @property
    def label(self) -> str:
        return f"{self.policy} seed {self.seed}"

    @property
    def filename(self) -> str:
        return f"{policy_slug(self.policy)}__seed{self.seed}.json"


@dataclass(frozen=True)
class GridSpec:
    """The grid's arguments, validated by ``prepare``."""

    scenario: str
    span: str
    policies: tuple[str, ...]
    seeds: int
    overrides: tuple[str, ...]
    out: Path
    workers: int
    ray: str | None = None
    """None: local processes; "local": a new local Ray instance; anything else: a Ray address."""
    span_s: tuple[float, float] = (0.0, 0.0)
    runner: str = DEFAULT_RUNNER
    skipped: tuple[tuple[str, str], ...] = ()
    """Policies that ``all`` named but that cannot run without arguments, with the reason."""
    identities: tuple[tuple[str, tuple[str, str]], ...] = ()
    """(policy, (concrete spec, fingerprint)) of every policy, as ``Task.identity``."""
    code_version: str = ""
    """The code that prepared the grid (``version.code_version``): the version of the runs computed now."""
    mixed_versions: bool = False
    """Allow runs of several code versions in one report (``--mixed-versions``); refused otherwise."""

    @property
    def seed_list(self) -> list[int]:
        return list(range(1, self.seeds + 1))

    @property
    def backend(self) -> str:
        return "local" if self.ray is None else "ray"

    def tasks(self) -> list[Task]:
        identities = dict(self.identities)
        return [Task(self.scenario, self.span, self.overrides, p, s, self.runner, identities.get(p))
                for p in self.policies for s in self.seed_list]

    def run_path(self, task: Task) -> Path:
        return self.out / RUNS_DIR / task.filename

    def arguments(self) -> dict:
        return {
            "scenario": self.scenario,
            "span": {"name": self.span, "start_s": self.span_s[0], "end_s": self.span_s[1]},
            "policies": list(self.policies),
            "seeds": self.seed_list,
            "overrides": list(self.overrides),
            "backend": self.backend,
            "ray_address": self.ray,
            "workers": self.workers,
            "skipped_policies": {name: reason for name, reason in self.skipped},
            "code_version": self.code_version,
            "mixed_versions": self.mixed_versions,
        }


@dataclass
class GridResult:
    spec: GridSpec
    records: dict[tuple[str, int], dict] = field(default_factory=dict)
    failures: dict[tuple[str, int], str] = field(default_factory=dict)
    computed: list[tuple[str, int]] = field(default_factory=list)
    reused: list[tuple[str, int]] = field(default_factory=list)
    started_at: str = ""
    finished_at: str = ""
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failures


# ---------------------------------------------------------------------------------------------
# Arguments


def policy_slug(spec: str) -> str:
    """A file-name-safe name for a policy spec; specs with other characters get a short hash."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", spec).strip("._") or "policy"
    if safe == spec:
        return spec
    return f"{safe[:60]}-{hashlib.sha1(spec.encode()).hexdigest()[:8]}"


def _split(values: Iterable[str], registered: list[str]) -> list[str]:
    specs: list[str] = []
    for value in values:
        start = len(specs)
        for piece in (p.strip() for p in value.split(",")):
            if not piece:
                continue
            head = piece.split(":", 1)[0]
            continues = (len(specs) > start and ":" in specs[-1] and ":" not in piece
                         and head not in registered and head != "all")
            if continues:
                specs[-1] += "," + piece
            else:
                specs.append(piece)
    return specs


def split_policies(values: Iterable[str], names: Iterable[str], everything: Iterable[str] | None = None) -> list[str]:
    """Policy specs from comma-separated ``--policies`` values, ``all`` expanded (to ``everything``,
    by default ``names``), duplicates dropped.

    A spec's arguments hold no comma in the current syntax (``static-weights:w=0.4/0.3/0.2/0.1:tau=0.5``).
    In the older one they may (``static-weights:w=0.4,0.3,0.2,0.1;tau=0.5``): a piece that is not a
    registered name, not ``all`` and has no colon of its own continues the arguments of the spec
    before it. Repeat ``--policies`` to keep such specs apart unambiguously.
    """
    registered = list(names)
    expanded = registered if everything is None else list(everything)
    out: list[str] = []
    for spec in _split(values, registered):
        for s in (expanded if spec == "all" else [spec]):
            if s not in out:
                out.append(s)
    return out


def prepare(scenario: str, span: str, policies: Iterable[str], seeds: int, out: Path,
            overrides: Iterable[str] = (), workers: int | None = None, ray: str | None = None,
            runner: str | None = None, mixed_versions: bool = False) -> GridSpec:
    """Check every argument, in the order a user reads them; a GridError names the bad one.
    ``runner`` ("module:function", default ``DEFAULT_RUNNER``) is what each run calls;
    ``mixed_versions`` lets runs of other code versions in ``out`` be reused beside new ones."""
    runner = runner or DEFAULT_RUNNER
    from td3sched.policy import POLICIES, REFERENCE_POLICIES, make_policy
    from td3sched.scenario import load_scenario
    from td3sched.search.best_static import VARIANTS, resolve_policy

    competitors = [*POLICIES, *VARIANTS]
    names = [*competitors, *REFERENCE_POLICIES]

    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise GridError(f"--seeds {seeds}: expected a whole number >= 1 (runs seeds 1..N)")
    if workers is None:
        workers = os.cpu_count() or 1
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise GridError(f"--workers {workers}: expected a whole number >= 1")
    overrides = tuple(overrides)
    try:
        sc = load_scenario(scenario, list(overrides))
    except (ValueError, FileNotFoundError) as exc:
        raise GridError(str(exc)) from None
    try:
        span_s = sc.span(span)
    except ValueError as exc:
        raise GridError(str(exc)) from None
    values = list(policies)
    specs = split_policies(values, names, competitors)
    explicit = {s for s in _split(values, names) if s != "all"}
    valid = (f"{', '.join(names)}, or all (every registered policy that runs without arguments, "
             f"except the hindsight bounds {', '.join(REFERENCE_POLICIES)})")
    if not specs:
        raise GridError(f"--policies {','.join(values)!r}: no policy given; expected one of {valid}")
    skipped: list[tuple[str, str]] = []
    identities: list[tuple[str, tuple[str, str]]] = []
    for spec in list(specs):
        try:
            concrete = resolve_policy(spec, scenario, overrides)[1]
            identities.append((spec, (concrete, make_policy(concrete).fingerprint)))
        except (ValueError, FileNotFoundError) as exc:
            if spec not in explicit:  # brought in by `all` but needs arguments (e.g. td3:<model>)
                specs.remove(spec)
                skipped.append((spec, str(exc)))
                continue
            hint = (" (a comma inside a spec's arguments joins the next piece to it; repeat --policies "
                    "to separate specs)") if "," in spec else ""
            raise GridError(f"--policies {spec!r}: {exc}; valid policies: {valid}{hint}") from None
    if not specs:
        raise GridError(f"--policies {','.join(values)!r}: no policy runs without arguments: "
                        + "; ".join(f"{n}: {r}" for n, r in skipped))
    if ray is not None:
        from td3sched.evaluate.backends import check_ray_address, import_ray

        import_ray()
        check_ray_address(ray)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise GridError(f"--out {out}: exists and is not a directory")
    try:
        module, func = runner.split(":")
        getattr(importlib.import_module(module), func)
    except (ValueError, ImportError, AttributeError) as exc:
        raise GridError(f"runner {runner!r}: expected module:function ({exc})") from None
    try:
        check_folder(out, "--out")
    except ValueError as exc:
        raise GridError(str(exc)) from None
    from td3sched.version import code_version

    return GridSpec(scenario, span, tuple(specs), seeds, overrides, out, workers, ray, span_s, runner, tuple(skipped),
                    tuple(identities), code_version(), bool(mixed_versions))


def record_version(record: dict) -> str:
    """The ``code_version`` of a run record ("unknown" without one)."""
    return str(record.get("code_version") or "unknown")


def versions_of(records: Iterable[dict]) -> dict[str, int]:
    """How many of ``records`` each code version made, most first."""
    counts: dict[str, int] = {}
    for record in records:
        counts[record_version(record)] = counts.get(record_version(record), 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def check_versions(spec: GridSpec, records: Iterable[dict], computing: int = 0) -> None:
    """Refuse (MixedVersionsError) a report whose runs come from more than one code version: the
    ``records`` kept, and ``computing`` runs about to be made by this code; unless
    ``spec.mixed_versions``. The message names every version with its number of runs."""
    counts = versions_of(records)
    if computing:
        counts[spec.code_version or "unknown"] = counts.get(spec.code_version or "unknown", 0) + computing
    if len(counts) <= 1 or spec.mixed_versions:
        return
    runs = spec.out / RUNS_DIR
    named = ", ".join(f"{v} ({n} run{'s' if n != 1 else ''}"
                      + (", to run now" if computing and v == spec.code_version else "") + ")" for v, n in counts.items())
    raise MixedVersionsError(
        f"{runs}: the report would mix code versions {named}; a report comes from one code version. "
        f"Move or delete {runs} to rerun every run with this code ({spec.code_version or 'unknown'}), or pass "
        "--mixed-versions to keep them side by side (the report then lists each version)")


# ---------------------------------------------------------------------------------------------
# Files


# write_json_atomic and write_text_atomic (td3sched.outputs) write every file here.


def load_existing(path: Path, task: Task) -> dict | None:
    """The record at ``path`` if it parses and belongs to ``task`` (and to its identity, when known);
    None otherwise."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("metrics"), dict):
        return None
    span = record.get("span")
    same = (record.get("scenario") == task.scenario
            and isinstance(span, dict) and span.get("name") == task.span
            and list(record.get("overrides") or []) == list(task.overrides)
            and record.get("policy") == task.policy
            and record.get("seed") == task.seed)
    if same and task.identity is not None:
        same = (record.get("policy_spec"), record.get("policy_fingerprint", "")) == task.identity
    return record if same else None


# ---------------------------------------------------------------------------------------------
# Running


def execute(task: Task) -> dict:
    """Run one task (in a worker process or a Ray task). Never raises: failures come back as data."""
    t0 = time.perf_counter()
    try:
        module, func = task.runner.split(":")
        run = getattr(importlib.import_module(module), func)
        record = run(task.scenario, task.policy, task.seed, task.span, list(task.overrides))
        return {"ok": True, "record": record, "wall_s": time.perf_counter() - t0}
    except Exception as exc:  # noqa: BLE001 - a failed run is reported, the grid goes on
        return failure(exc, traceback.format_exc(), time.perf_counter() - t0)


def failure(exc: BaseException, tb: str | None = None, wall_s: float = 0.0) -> dict:
    message = f"{type(exc).__name__}: {exc}".strip()
    return {"ok": False, "error": message.splitlines()[0] if message else type(exc).__name__,
            "traceback": tb or "".join(traceback.format_exception(exc)), "wall_s": wall_s}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class _Status:
    """What the progress bar shows: finished/total, the runs in flight, the failures."""

    def __init__(self, spec: GridSpec, total: int, reused: int, enabled: bool, console=None):
        self.running: list[str] = []
        self.failed = 0
        self.progress = None
        self.console = console
        self.lines = None
        """Plain progress lines where a bar shows nothing (a console that is not a terminal)."""
        self.done = reused
        if enabled and console is not None and not console.is_terminal:
            from td3sched.progress import ProgressLines

            self.lines = ProgressLines(console.print, f"evaluate {spec.scenario}/{spec.span}", total, "runs", reused)
        elif enabled:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                       TimeRemainingColumn)

            self.progress = Progress(TextColumn("[bold]evaluate[/bold] {task.description}"), BarColumn(),
                                     MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("eta"),
                                     TimeRemainingColumn(), TextColumn("{task.fields[status]}"),
                                     console=console, transient=False)
            self.task = self.progress.add_task(f"{spec.scenario}/{spec.span}", total=total, completed=reused,
                                               status=f"{reused} reused" if reused else "")

    def __enter__(self):
        if self.progress:
            self.progress.start()
        return self

    def __exit__(self, *exc):
        if self.progress:
            self.progress.stop()

    def _refresh(self, advance: int = 0) -> None:
        self.done += advance
        if self.lines is not None and advance:
            self.lines.update(self.done, f"{self.failed} failed" if self.failed else "")
        if not self.progress:
            return
        shown = ", ".join(self.running[:4]) + (f" +{len(self.running) - 4} more" if len(self.running) > 4 else "")
        parts = [f"running: {shown}" if self.running else ""]
        if self.failed:
            parts.append(f"[red]failed: {self.failed}[/red]")
        self.progress.update(self.task, advance=advance, status=" | ".join(p for p in parts if p))

    def started(self, task: Task) -> None:
        self.running.append(f"{task.policy}#{task.seed}")
        self._refresh()

    def finished(self, task: Task, outcome: dict) -> None:
        name = f"{task.policy}#{task.seed}"
        if name in self.running:
            self.running.remove(name)
        if not outcome["ok"]:
            self.failed += 1
            from rich.markup import escape

            self.print(f"[red]failed[/red] {escape(task.label)}: {escape(outcome['error'])}")
        self._refresh(advance=1)

    def print(self, message: str) -> None:
        if self.progress:
            self.progress.console.print(message)
        elif self.console is not None:
            self.console.print(message)


def run_grid(spec: GridSpec, progress: bool = True, console=None,
             on_event: Callable[[str, Task, dict | None], None] | None = None) -> GridResult:
    """Run every (policy, seed) of ``spec`` that is not already in ``spec.out/runs``.

    ``on_event(kind, task, outcome)`` (kinds: reused, started, finished) lets callers watch; the
    return value holds every record of the grid, the failures and what was computed or reused.
    """
    from td3sched.evaluate.backends import make_backend

    result = GridResult(spec, started_at=_now())
    t0 = time.perf_counter()
    todo: list[Task] = []
    reused: list[tuple[Task, dict]] = []
    for task in spec.tasks():
        record = load_existing(spec.run_path(task), task)
        if record is None:
            todo.append(task)
        else:
            reused.append((task, record))
    check_versions(spec, (record for _, record in reused), len(todo))  # before anything runs or is written
    (spec.out / RUNS_DIR).mkdir(parents=True, exist_ok=True)
    write_json_atomic(spec.out / GRID_FILE, {**spec.arguments(), "status": "running", "started_at": result.started_at})
    for task, record in reused:
        result.records[(task.policy, task.seed)] = record
        result.reused.append((task.policy, task.seed))
        if on_event:
            on_event("reused", task, None)

    def started(task: Task) -> None:
        status.started(task)
        if on_event:
            on_event("started", task, None)

    def finished(task: Task, outcome: dict) -> None:
        key = (task.policy, task.seed)
        path = spec.run_path(task)
        error_path = path.with_suffix(".error.txt")
        if outcome["ok"]:
            write_json_atomic(path, outcome["record"])
            result.records[key] = outcome["record"]
            result.computed.append(key)
            if error_path.exists():
                error_path.unlink()
        else:
            result.failures[key] = outcome["error"]
            write_text_atomic(error_path, f"{task.label}\n{outcome['error']}\n\n{outcome.get('traceback', '')}")
        status.finished(task, outcome)
        if on_event:
            on_event("finished", task, outcome)

    status_word = "error"
    try:
        with _Status(spec, len(spec.tasks()), len(result.reused), progress, console) as status:
            if todo:
                with make_backend(spec) as backend:
                    backend.run(todo, started, finished)
        status_word = "failed" if result.failures else "done"
    except KeyboardInterrupt:
        status_word = "interrupted"
        raise
    finally:  # also on Ctrl-C: grid.json says what is on disk; rerunning resumes from there
        result.wall_s = time.perf_counter() - t0
        result.finished_at = _now()
        _write_grid_file(result, status_word)
    return result


def _write_grid_file(result: GridResult, status: str) -> None:
    spec = result.spec
    write_json_atomic(spec.out / GRID_FILE, {
        **spec.arguments(), "status": status,
        "started_at": result.started_at, "finished_at": result.finished_at, "wall_s": round(result.wall_s, 3),
        "computed": [f"{p} seed {s}" for p, s in result.computed],
        "reused": [f"{p} seed {s}" for p, s in result.reused],
        "failed": {f"{p} seed {s}": e for (p, s), e in sorted(result.failures.items())},
    })
