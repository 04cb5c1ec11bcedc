"""The grid end to end on ``tiny``/``test``: files, both backends (local processes and a real local Ray
instance) giving the same numbers, resume, failures, one seed, and a grid without the default."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from td3sched.evaluate import grid as grid_mod
from td3sched.evaluate import prepare, run_grid, write_reports
from td3sched.evaluate.grid import load_existing, policy_slug, split_policies, write_json_atomic
from td3sched.policy import POLICIES
from td3sched.run import run_simulation

SEEDS = 2


def _policies() -> list[str]:
    """k8s-default and random; else k8s-default and the first other registered policy; else alone."""
    if "random" in POLICIES:
        return ["k8s-default", "random"]
    others = [p for p in POLICIES if p != "k8s-default"]
    return ["k8s-default", *others[:1]]


POLICY_LIST = _policies()
KEYS = [(p, s) for p in POLICY_LIST for s in range(1, SEEDS + 1)]


def _spec(out: Path, **kw):
    args = dict(scenario="tiny", span="test", policies=[",".join(POLICY_LIST)], seeds=SEEDS, out=out, workers=2)
    args.update(kw)
    return prepare(**args)


def _deterministic(record: dict) -> str:
    return json.dumps({k: v for k, v in record.items() if k != "runtime"}, sort_keys=True)


@pytest.fixture(scope="module")
def local_grid(tmp_path_factory):
    out = tmp_path_factory.mktemp("local") / "grid"
    spec = _spec(out)
    result = run_grid(spec, progress=False)
    files = write_reports(result)
    return out, result, files


@pytest.fixture(scope="module")
def ray_grid(tmp_path_factory):
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        out = tmp_path_factory.mktemp("ray") / "grid"
        spec = _spec(out, ray="local")
        result = run_grid(spec, progress=True)  # progress bar drawn off-terminal: must not get in the way
        files = write_reports(result)
        assert ray.is_initialized(), "the backend must not shut down a Ray it did not start"
    finally:
        ray.shutdown()
    return out, result, files


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "grid"
    shutil.copytree(src, dst)
    return dst


def test_local_grid_writes_every_file(local_grid):
    out, result, files = local_grid
    assert result.ok and sorted(result.computed) == sorted(KEYS) and not result.reused
    for policy, seed in KEYS:
        record = json.loads((out / "runs" / f"{policy_slug(policy)}__seed{seed}.json").read_text())
        assert (record["policy"], record["seed"], record["scenario"], record["span"]["name"]) == (policy, seed, "tiny",
                                                                                                    "test")
        assert "cpu_util" in record["metrics"]
    grid = json.loads((out / "grid.json").read_text())
    assert grid["status"] == "done" and grid["policies"] == POLICY_LIST and grid["seeds"] == [1, 2]
    assert grid["scenario"] == "tiny" and grid["span"]["name"] == "test" and grid["backend"] == "local"
    for name in ("summary.md", "summary.csv", "vs-default.md", "report.md", "report.html"):
        assert (out / name).stat().st_size > 0, name
    assert not list(out.rglob("*.tmp")), "atomic writes leave no temporary files"
    pngs = sorted(p.name for p in (out / "plots").glob("*.png"))
    assert "metric_cpu_util.png" in pngs and "timeseries.png" in pngs
    assert all((out / "plots" / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    assert sorted(p.name for p in files.plots) == pngs


def test_summary_csv_has_means_and_intervals_of_every_run(local_grid):
    out, result, _ = local_grid
    rows = list(csv.DictReader((out / "summary.csv").open()))
    by = {(r["policy"], r["metric"]): r for r in rows}
    for policy in POLICY_LIST:
        row = by[(policy, "cpu_util")]
        values = [result.records[(policy, s)]["metrics"]["cpu_util"] for s in range(1, SEEDS + 1)]
        assert int(row["n"]) == SEEDS
        assert float(row["mean"]) == pytest.approx(sum(values) / SEEDS)
        assert float(row["ci95_low"]) <= float(row["mean"]) <= float(row["ci95_high"])
    summary = (out / "summary.md").read_text()
    assert all(f"`{p}`" in summary for p in POLICY_LIST) and "±" in summary


def test_vs_default_table_has_the_case_study_rows(local_grid):
    out, _, _ = local_grid
    text = (out / "vs-default.md").read_text()
    for metric in ("cpu_util", "fragmentation", "latency_p99_ms", "oom_per_week", "overload_node_frac",
                   "sla_violations_per_1k_pods", "pending_p99_s", "node_hours", "episode_reward"):
        assert f"| `{metric}`" in text, metric
    header = next(line for line in text.splitlines() if line.startswith("| metric"))
    assert header.split("|")[2].strip() == "`k8s-default`"
    if len(POLICY_LIST) > 1:
        assert f"`{POLICY_LIST[1]}` | Δ `{POLICY_LIST[1]}` | Δ% `{POLICY_LIST[1]}`" in header


def test_report_names_the_setup_and_embeds_tables_and_plots(local_grid):
    out, result, _ = local_grid
    md = (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    version = result.records[KEYS[0]]["code_version"]
    for text in (md, html):
        assert "tiny" in text and "test" in text and version in text and "1..2" in text
        assert "grid wall-clock" in text
    assert "](plots/metric_cpu_util.png)" in md and "](plots/timeseries.png)" in md
    assert "<table>" in html and "| ---" not in html
    assert html.lstrip().startswith("<!DOCTYPE html>") and "</html>" in html
    # one self-contained file: every figure inlined, nothing linked
    import base64
    import re

    sources = re.findall(r'<img src="([^"]+)"', html)
    pngs = sorted((out / "plots").glob("*.png"))
    assert len(sources) == len(pngs) > 0 and all(src.startswith("data:image/png;base64,") for src in sources)
    assert sorted(base64.b64decode(src.split(",", 1)[1]) for src in sources) == sorted(p.read_bytes() for p in pngs)
    for png in pngs:
        assert f"plots/{png.name}" in md
    assert '<div class="figures">' in html and '<div class="table-wrap"><table>' in html


def test_decisions_are_shown_beside_binds_with_the_retries(local_grid):
    """report.md's attempts table and the terminal table put binds beside decisions (means over seeds)
    and say that retries make the difference."""
    from td3sched.cli import out as terminal
    from td3sched.cli import print_evaluation
    from td3sched.evaluate.report import fmt

    out, result, _ = local_grid
    md = (out / "report.md").read_text()
    section = md.split("## Scheduling attempts: decisions and binds", 1)[1].split("\n## ", 1)[0]
    assert "tried again" in section
    with terminal.capture() as captured:
        print_evaluation(result)
    shown = " ".join(captured.get().split())
    assert "decisions / binds" in shown and "tried again" in shown
    for policy in POLICY_LIST:
        runs = [result.records[(policy, s)]["metrics"] for s in range(1, SEEDS + 1)]
        decisions = sum(r["decisions"] for r in runs) / SEEDS
        binds = sum(r["binds"] for r in runs) / SEEDS
        row = next(line for line in section.splitlines() if line.startswith(f"| `{policy}` |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[2:5] == [fmt(decisions), fmt(binds), fmt(decisions - binds)], row
        assert f"{fmt(decisions)} / {fmt(binds)}" in shown


def test_report_html_opens_alone_in_chromium_without_errors(local_grid, tmp_path):
    """report.html copied alone into an empty folder (as mailed), opened in headless Chromium: no console
    error, every figure drawn from the file itself, tables scroll inside their boxes instead of widening
    the page, and a screenshot of the whole page shows something. The harness first proves that it
    sees errors: a page with a missing image and a script error must report both."""
    from matplotlib.image import imread

    from tests.evaluate.chromium_harness import browser, console_errors, full_page_screenshot

    out, _, files = local_grid
    alone = tmp_path / "mailed" / "report.html"
    alone.parent.mkdir()
    shutil.copyfile(files.report_html, alone)
    broken = tmp_path / "broken.html"
    broken.write_text('<!DOCTYPE html><html><body><img src="plots/missing.png"><script>undefinedFunction()</script>'
                      "</body></html>")
    with browser(width=1280) as driver:
        driver.get(broken.as_uri())
        seen = console_errors(driver)
        assert any("missing.png" in e for e in seen) and any("undefinedFunction" in e for e in seen), seen

        driver.get(alone.as_uri())
        assert driver.title == "Evaluation report: tiny / test"
        assert console_errors(driver) == []
        images = driver.execute_script(
            "return Array.from(document.images).map(i => [i.complete && i.naturalWidth > 0, i.src.slice(0, 22)])")
        assert len(images) == len(list((out / "plots").glob("*.png"))) > 0
        assert all(ok and src == "data:image/png;base64," for ok, src in images), images
        page_width = driver.execute_script("return document.documentElement.clientWidth")
        assert driver.execute_script("return document.documentElement.scrollWidth") <= page_width
        wide = driver.execute_script(
            "return Array.from(document.querySelectorAll('.table-wrap'))"
            ".filter(w => w.scrollWidth > w.clientWidth).map(w => getComputedStyle(w).overflowX)")
        assert all(overflow == "auto" for overflow in wide), wide  # a wide table scrolls in its box
        shot = tmp_path / "report.png"
        width, height = full_page_screenshot(driver, shot)
        assert console_errors(driver) == []
    pixels = imread(shot)
    assert pixels.shape[1] >= width and pixels.shape[0] >= min(height, 900)
    assert pixels[..., :3].std() > 0.05, "the screenshot is blank"


def test_each_delta_column_names_its_policy(local_grid):
    out, result, _ = local_grid
    vs = (out / "vs-default.md").read_text()
    header = next(line for line in vs.splitlines() if line.startswith("| metric"))
    others = [p for p in result.spec.policies if p != "k8s-default"]
    assert others and all(f"Δ `{p}`" in header and f"Δ% `{p}`" in header for p in others)


def test_figures_use_one_colour_per_policy_short_labels_and_skip_all_zero_metrics(tmp_path):
    from td3sched.evaluate import plots as P
    from td3sched.evaluate.stats import summarize

    policies = ["k8s-default", "td3:some/long/path/to/td3-dlrm", "random"]
    colours = P.policy_colours(policies)
    assert colours == P.policy_colours(policies) and len(set(colours.values())) == 3
    assert colours["k8s-default"] == P.DEFAULT_COLOUR
    assert P.short_label("td3:some/long/path/to/td3-dlrm") == "td3:td3-dlrm"
    zero = {p: summarize([0.0, 0.0], lower_bound=0.0) for p in policies}
    assert P.metric_bars(tmp_path, "oom_per_week", "OOM", policies, zero, colours) is None
    spread = {"k8s-default": summarize([1.0, 1.2], lower_bound=0.0),
              "td3:some/long/path/to/td3-dlrm": summarize([900.0, 1100.0], lower_bound=0.0),
              "random": summarize([10.0, 30.0], lower_bound=0.0)}
    plot = P.metric_bars(tmp_path, "latency_p99_ms", "p99 (ms)", policies, spread, colours)
    assert plot is not None and plot.path.is_file()


def test_the_heatmap_scale_ends_at_the_most_a_node_can_deliver(tmp_path):
    """With node_util_ceiling the scale's top is the largest ceiling (a saturated node is the top colour),
    whatever the values; older records without it keep 100% or their highest value, and say so."""
    from td3sched.evaluate import plots as P

    rows = [[0.2, 0.5], [1.05, None]]
    top, note = P.heatmap_scale([rows], [[1.1, 1.02], None])
    assert top == pytest.approx(110.0) and "ends at 110%" in note and "cores" in note
    assert P.heatmap_scale([rows], [[0.9]])[0] == 100.0  # never below allocatable
    top, note = P.heatmap_scale([rows, [[1.3]]])
    assert top == pytest.approx(130.0) and "predate" in note
    assert P.heatmap_scale([[[0.1]]])[0] == 100.0
    plot = P.node_heatmap(tmp_path, "k8s-default", 1, rows, "default", ["n0", "n1"], 110.0)
    assert plot is not None and plot.path.is_file()


def test_optional_plots_are_drawn_or_noted(local_grid):
    out, result, files = local_grid
    md = (out / "report.md").read_text()
    record = result.records[KEYS[0]]
    if record.get("latency_hist"):
        assert (out / "plots" / "latency_cdf.png").exists()
    else:
        assert "Latency CDF: skipped" in md
    if record.get("node_util_hourly"):
        assert (out / "plots" / "node_util_default.png").exists()
        top = 100 * max(max(result.records[k]["node_util_ceiling"]) for k in KEYS)
        assert f"so the scale ends at {top:.0f}%" in md and "100% (dashed line on the scale)" in md
    else:
        assert "heatmaps: skipped" in md


def test_records_match_a_direct_run(local_grid):
    _, result, _ = local_grid
    direct = run_simulation("tiny", POLICY_LIST[-1], 2, "test", [])
    assert _deterministic(direct) == _deterministic(result.records[(POLICY_LIST[-1], 2)])


def test_ray_backend_gives_the_same_numbers(local_grid, ray_grid):
    local_out, local, _ = local_grid
    ray_out, ray_result, _ = ray_grid
    assert ray_result.ok and sorted(ray_result.computed) == sorted(KEYS)
    assert json.loads((ray_out / "grid.json").read_text())["backend"] == "ray"
    for key in KEYS:
        name = f"{policy_slug(key[0])}__seed{key[1]}.json"
        a = json.loads((local_out / "runs" / name).read_text())
        b = json.loads((ray_out / "runs" / name).read_text())
        assert a["metrics"] == b["metrics"], key
        assert _deterministic(a) == _deterministic(b), key
    assert (ray_out / "summary.csv").read_text() == (local_out / "summary.csv").read_text()
    assert "Ray" in (ray_out / "report.md").read_text()


def test_resume_recomputes_only_the_missing_run(local_grid, tmp_path):
    out = _copy(local_grid[0], tmp_path)
    victim = (POLICY_LIST[-1], 2)
    victim_path = out / "runs" / f"{policy_slug(victim[0])}__seed{victim[1]}.json"
    victim_path.unlink()
    before = {p.name: p.stat().st_mtime_ns for p in (out / "runs").glob("*.json")}
    events = []
    result = run_grid(_spec(out), progress=False, on_event=lambda kind, task, _: events.append((kind, task.policy,
                                                                                                 task.seed)))
    write_reports(result)
    assert result.computed == [victim]
    assert sorted(result.reused) == sorted(k for k in KEYS if k != victim)
    assert [e for e in events if e[0] == "started"] == [("started", *victim)]
    after = {p.name: p.stat().st_mtime_ns for p in (out / "runs").glob("*.json")}
    assert victim_path.exists() and all(after[name] == t for name, t in before.items())
    assert f"1 computed now, {len(KEYS) - 1} reused" in (out / "report.md").read_text()


def _stamp(path: Path, version: str) -> None:
    record = json.loads(path.read_text())
    record["code_version"] = version
    write_json_atomic(path, record)


def test_a_grid_never_mixes_code_versions_unless_asked(local_grid, tmp_path):
    """Runs of another code version in --out: refused before anything runs or is written, naming each
    version with its runs; with mixed_versions the grid runs and the report lists both."""
    from td3sched.evaluate.grid import MixedVersionsError

    out = _copy(local_grid[0], tmp_path)
    runs = out / "runs"
    current = local_grid[1].records[KEYS[0]]["code_version"]
    old = "0.1.0+0123456789ab"
    for policy, seed in KEYS[:2]:
        _stamp(runs / f"{policy_slug(policy)}__seed{seed}.json", old)
    missing = runs / f"{policy_slug(KEYS[-1][0])}__seed{KEYS[-1][1]}.json"
    missing.unlink()
    grid_before = (out / "grid.json").read_text()
    with pytest.raises(MixedVersionsError) as refused:
        run_grid(_spec(out), progress=False)
    message = str(refused.value)
    assert f"{old} (2 runs)" in message and f"{current} ({len(KEYS) - 2} runs, to run now)" in message
    assert "--mixed-versions" in message and "\n" not in message
    assert not missing.exists() and (out / "grid.json").read_text() == grid_before  # nothing ran or was written

    result = run_grid(_spec(out, mixed_versions=True), progress=False)
    assert result.computed == [KEYS[-1]]
    write_reports(result)
    md = (out / "report.md").read_text()
    assert f"`{old}` (2 runs); `{current}` ({len(KEYS) - 2} runs)" in md and "**Mixed code versions**" in md

    # every run on disk, none to compute, still two versions: refused too (reports included)
    with pytest.raises(MixedVersionsError, match="the report would mix code versions"):
        run_grid(_spec(out), progress=False)
    with pytest.raises(MixedVersionsError):
        write_reports(grid_mod.GridResult(_spec(out), records=result.records))


def test_the_report_states_its_one_code_version_once(local_grid):
    out, result, _ = local_grid
    md = (out / "report.md").read_text()
    version = result.records[KEYS[0]]["code_version"]
    assert {r["code_version"] for r in result.records.values()} == {version}
    assert md.count(version) == 1 and f"| code version | `{version}` |" in md
    assert ("**Uncommitted code:**" in md) == (".dirty" in version)
    assert json.loads((out / "grid.json").read_text())["code_version"] == version


def test_resume_recomputes_corrupt_and_foreign_run_files(local_grid, tmp_path):
    out = _copy(local_grid[0], tmp_path)
    runs = out / "runs"
    corrupt = runs / f"{policy_slug(POLICY_LIST[0])}__seed1.json"
    corrupt.write_text('{"metrics": {"cpu_util": 0.5')  # an interrupted non-atomic write
    foreign = runs / f"{policy_slug(POLICY_LIST[0])}__seed2.json"
    record = json.loads(foreign.read_text())
    record["overrides"] = ["simulator.usage_scale=2.0"]  # another grid's run
    write_json_atomic(foreign, record)
    result = run_grid(_spec(out), progress=False)
    assert sorted(result.computed) == [(POLICY_LIST[0], 1), (POLICY_LIST[0], 2)]
    assert json.loads(foreign.read_text())["overrides"] == []


def test_load_existing_checks_what_the_run_is(local_grid):
    out, _, _ = local_grid
    spec = _spec(out)
    task = spec.tasks()[0]
    path = spec.run_path(task)
    assert load_existing(path, task) is not None
    assert task.identity == (task.policy, "")
    for change in ({"seed": 9}, {"policy": "other"}, {"span": "train"}, {"overrides": ("a=1",)}, {"scenario": "dlrm"},
                   {"identity": ("static-weights:w=1,0,0,0", "")}, {"identity": (task.policy, "model_sha256=0")}):
        other = grid_mod.Task(**{**task.__dict__, **change})
        assert load_existing(path, other) is None, change
    assert load_existing(path.with_name("missing.json"), task) is None


def test_a_failing_run_is_reported_and_the_grid_goes_on(tmp_path):
    out = tmp_path / "grid"
    spec = prepare("tiny", "test", ["k8s-default"], 3, out, workers=2, runner="tests.evaluate.flaky:run")
    result = run_grid(spec, progress=False)
    files = write_reports(result)
    assert not result.ok and list(result.failures) == [("k8s-default", 2)]
    assert "injected failure" in result.failures[("k8s-default", 2)]
    assert sorted(result.computed) == [("k8s-default", 1), ("k8s-default", 3)]
    assert not (out / "runs" / "k8s-default__seed2.json").exists()
    assert "injected failure" in (out / "runs" / "k8s-default__seed2.error.txt").read_text()
    grid = json.loads((out / "grid.json").read_text())
    assert grid["status"] == "failed" and "k8s-default seed 2" in grid["failed"]
    md = files.report_md.read_text()
    assert "Failed runs" in md and "injected failure" in md
    assert "(n=2)" in (out / "summary.md").read_text()


def test_one_seed_reports_an_undefined_interval(local_grid, tmp_path):
    out = _copy(local_grid[0], tmp_path)
    result = run_grid(_spec(out, seeds=1), progress=False)
    assert not result.computed and len(result.reused) == len(POLICY_LIST)
    files = write_reports(result)
    summary = files.summary_md.read_text()
    assert "One seed" in summary and "undefined" in summary and "± n/a" in summary
    rows = list(csv.DictReader(files.summary_csv.open()))
    assert rows and all(r["n"] == "1" and r["ci95_half"] == "" and r["mean"] != "" for r in rows)
    vs = files.vs_default_md.read_text()
    assert "better" not in vs.split("| metric")[1] and "worse" not in vs.split("| metric")[1]


def test_without_the_default_the_comparison_is_skipped(local_grid, tmp_path):
    if len(POLICY_LIST) < 2:
        pytest.skip("only one policy registered")
    out = _copy(local_grid[0], tmp_path)
    result = run_grid(_spec(out, policies=[POLICY_LIST[1]]), progress=False)
    files = write_reports(result)
    vs = files.vs_default_md.read_text()
    assert "No comparison" in vs and "k8s-default" in vs and "| metric" not in vs
    assert "No comparison" in files.report_md.read_text()


def test_policy_lists_split_on_commas_but_keep_spec_arguments():
    names = ["k8s-default", "static-weights", "random"]
    assert split_policies(["k8s-default,random"], names) == ["k8s-default", "random"]
    assert split_policies(["all"], names) == names
    assert split_policies(["random,all,random"], names) == ["random", "k8s-default", "static-weights"]
    assert split_policies(["k8s-default,static-weights:w=0.4,0.3,0.2,0.1;tau=0.5,random"], names) == [
        "k8s-default", "static-weights:w=0.4,0.3,0.2,0.1;tau=0.5", "random"]
    assert split_policies(["k8s-default,static-weights:w=0.4/0.3/0.2/0.1:tau=0.5,random"], names) == [
        "k8s-default", "static-weights:w=0.4/0.3/0.2/0.1:tau=0.5", "random"]
    assert split_policies(["td3:models/x", "k8s-default"], names) == ["td3:models/x", "k8s-default"]
    assert split_policies([" k8s-default , "], names) == ["k8s-default"]


def test_all_runs_every_policy_that_needs_no_arguments(tmp_path):
    from td3sched.policy import make_policy
    from td3sched.search.best_static import VARIANTS, resolve_policy

    names = [*POLICIES, *VARIANTS]

    def needs_arguments(name):  # or a stored search result that tiny does not have
        try:
            make_policy(resolve_policy(name, "tiny")[1])
        except (ValueError, FileNotFoundError):
            return True
        return False

    spec = prepare("tiny", "test", ["all"], 1, tmp_path / "g", workers=1)
    assert list(spec.policies) == [p for p in names if not needs_arguments(p)]
    assert [name for name, _ in spec.skipped] == [p for p in names if needs_arguments(p)]
    assert {"td3", "best-static"} <= {name for name, _ in spec.skipped}
    for name, _ in spec.skipped:  # named explicitly, such a policy is an error
        with pytest.raises(grid_mod.GridError, match=name):
            prepare("tiny", "test", [name], 1, tmp_path / "g", workers=1)
    assert not (tmp_path / "g").exists()


def test_policy_slugs_are_safe_and_distinct():
    assert policy_slug("k8s-default") == "k8s-default"
    a, b = policy_slug("td3:models/x"), policy_slug("td3:models_x")
    assert a != b and "/" not in a and ":" not in a
    assert "/" not in policy_slug("static-weights:w=0.4,0.3;tau=0.5")
    assert "/" not in policy_slug("static-weights:w=0.4/0.6:tau=0.5")


def test_the_progress_bar_shows_an_eta(tmp_path):
    from rich.console import Console

    spec = prepare("tiny", "test", ["k8s-default"], 3, tmp_path / "g", workers=1)
    console = Console(record=True, width=200, force_terminal=True)
    with grid_mod._Status(spec, 3, 0, True, console) as status:
        for task in spec.tasks()[:2]:
            status.started(task)
            status.finished(task, {"ok": True})
    text = console.export_text()
    assert "2/3" in text and "eta" in text
