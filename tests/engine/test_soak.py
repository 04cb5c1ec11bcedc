"""A 30-second soak: ScoreNodes (and a ReportBinding every tenth call) at a steady rate from another
process against the engine served by its own process, which writes its decision log and refreshes
its state every second: no call fails, and the server's memory stops growing after the warm-up.
(The benchmark runs 1,000 decisions/s for 10 minutes and measures the latency; this test asserts
no timing.)"""

from __future__ import annotations

from td3sched.engine.loadgen import ServedEngine, requests, run_load, synthetic_snapshot

from tests.engine.conftest import MODEL

NODES = 5000
RATE_PER_S = 200.0
SECONDS = 30.0
WARMUP_S = 10.0
MAX_RSS_GROWTH = 0.05


def test_a_30_second_soak_has_no_error_and_bounded_memory(tmp_path):
    with ServedEngine(NODES, str(MODEL), log_dir=str(tmp_path)) as served:
        load = requests(synthetic_snapshot(NODES).names, candidates=100)
        report = run_load(f"127.0.0.1:{served.port}", RATE_PER_S, SECONDS, load, pid=served.pid,
                          timeout_s=120.0)
        counters = served.stop()
    assert report.errors == {} and report.ok == report.sent == int(RATE_PER_S * SECONDS)
    assert report.server_cpu_s > 0 and report.server_cpu_per_call_s > 0
    assert counters["rejected"] == 0 and counters["decisions"] == report.sent
    growth = report.rss_growth(WARMUP_S)
    assert growth < MAX_RSS_GROWTH, f"server RSS grew {100 * growth:.1f}% after the warm-up: {report.rss}"
    assert sorted(p.name for p in tmp_path.iterdir())[0] == "decisions.jsonl"
