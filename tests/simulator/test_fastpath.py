"""The compiled common case (simulator.fastpath) runs a span exactly as the Python path does: every
metric, every hourly series and the reward, on a roomy cluster (arrivals bind at once, the
autoscaler's scans change nothing but for a few scale-downs) and on a loaded one, where arrivals
fail and departures free room for waiting pods, so the hand-backs to Python STOP, FAILED and FREED
are taken (MEMORY, a bind into memory pressure, is not reached on
tiny; the dlrm equivalence run in docs/simulator.md §8 covers it)."""

import numpy as np
import pytest

from td3sched.policy import make_policy
from td3sched.scenario import load_scenario
from td3sched.simulator import fastpath
from td3sched.simulator.engine import Simulation
from td3sched.simulator.fastpath import EventHeap

LOADED = ["nodes.pools.cpu.count=8", "nodes.pools.cpu.max_count=8", "simulator.mem_level=0.9"]


def _run(overrides, fast, seed=1):
    scenario = load_scenario("tiny", overrides)
    start, end = scenario.span("test")
    world = scenario.build(seed)
    sim = Simulation(world, make_policy("k8s-default"), seed, start, end, warmup_s=world.config.warmup_days * 86400)
    sim.fast_path = fast
    sim.verify_compiled_calls = True
    return sim.run()


@pytest.mark.parametrize("overrides", [[], LOADED], ids=["roomy", "loaded"])
def test_the_compiled_loop_runs_a_span_exactly_as_python(overrides, monkeypatch):
    scans, removed = [], []  # autoscaler scans run by Python, nodes removed: per run
    real_scan, real_remove = Simulation._autoscale, Simulation._remove_nodes
    monkeypatch.setattr(Simulation, "_autoscale", lambda self, t: (scans.append(t), real_scan(self, t))[1])
    monkeypatch.setattr(Simulation, "_remove_nodes", lambda self, gone, t: (removed.append(len(gone)),
                                                                            real_remove(self, gone, t))[1])
    python = _run(overrides, fast=False)
    python_scans, python_removed, scans[:], removed[:] = len(scans), sum(removed), [], []
    why = []
    real = fastpath.run_events

    def counted(*args):
        out = real(*args)
        why.append(int(out[0]))
        return out

    monkeypatch.setattr(fastpath, "run_events", counted)
    fast = _run(overrides, fast=True)
    assert why, "the compiled loop never ran"
    assert sum(removed) == python_removed
    if not overrides:  # roomy: nodes are scaled down, and the scans that change nothing run in the loop
        assert python_removed > 0 and 0 < len(scans) < python_scans / 10, (len(scans), python_scans)
    monkeypatch.undo()
    direct = _run(overrides, fast=True)  # the compiled overload called directly after the first call
    assert direct == {**fast, "runtime": direct["runtime"]}
    assert fast["metrics"] == python["metrics"]
    assert fast["series_hourly"] == python["series_hourly"]
    assert fast["latency_hist"] == python["latency_hist"]
    if overrides:  # every hand-back was taken
        assert {fastpath.STOP, fastpath.FAILED, fastpath.FREED} <= set(why), sorted(set(why))


def test_the_event_heap_pops_in_time_kind_push_order():
    rng = np.random.default_rng(3)
    heap, events = EventHeap(capacity=4), []
    for seq in range(500):
        t, kind = float(rng.integers(0, 40)), int(rng.integers(0, 4))
        heap.push(t, kind, seq, -seq)
        events.append((t, kind, seq))
    popped = [heap.pop() for _ in range(len(events))]
    assert [(t, k, a) for t, k, a, _ in popped] == sorted(events)
    assert len(heap) == 0 and heap.peek_t() == np.inf
    with pytest.raises(IndexError, match="empty"):
        heap.pop()


def test_an_edit_of_a_kernel_drops_the_compiled_loops_stale_cache(tmp_path):
    """numba keys a cached function on its own file: the loop's cache must go when a kernel it inlines
    changes, and only then."""
    from td3sched.simulator.fastpath import drop_stale_cache

    module, kernel = tmp_path / "loop.py", tmp_path / "kernel.py"
    module.write_text("def run(): pass\n")
    kernel.write_text("def k(): return 1\n")
    cache = tmp_path / "__pycache__"
    cache.mkdir()
    compiled = [cache / "loop.run-1.py311.nbi", cache / "loop.run-1.py311.1.nbc"]
    other = cache / "kernel.k-1.py311.nbi"
    for f in compiled + [other]:
        f.write_bytes(b"x")
    assert drop_stale_cache(module, [kernel])  # no stamp yet: what is cached cannot be vouched for
    assert not any(f.exists() for f in compiled) and other.exists()
    for f in compiled:
        f.write_bytes(b"x")
    assert not drop_stale_cache(module, [kernel])  # nothing changed: the cache stays
    assert all(f.exists() for f in compiled)
    kernel.write_text("def k(): return 2\n")
    assert drop_stale_cache(module, [kernel])
    assert not any(f.exists() for f in compiled)


def _copies_hold(sim) -> int:
    """What the simulation keeps as copies holds now: the running pods' slots hold each pod's CPU
    usage and crash state (simulator.running), and every block of the reward's sums that is neither
    flagged stale nor holds a dirty node holds its nodes' sums (kernels.reward_state's contract with
    its callers). Returns how many blocks were checked."""
    from td3sched.simulator.kernels import block_size, overload_sum, weighted_total

    run = sim.running_pods
    pods = run.pods[: run.n]
    assert run.cpu[: run.n].tobytes() == sim.pod_usage[pods, 0].tobytes()
    assert (run.crashed[: run.n] == sim.crashed[pods]).all()
    c = sim.cluster
    checked = 0
    size = block_size(c.size, len(sim._stale_blocks))
    for b in range(len(sim._stale_blocks)):
        lo, hi = b * size, min((b + 1) * size, c.size)
        if sim._stale_blocks[b] or sim.dirty[lo:hi].any():
            continue
        want = (overload_sum(np.ascontiguousarray(c.usage[lo:hi, 0]), sim._cpu_cores[lo:hi], sim._inv_alloc_cpu[lo:hi],
                             sim._prov_f[lo:hi], sim.reward.cfg.overload_util),
                weighted_total(sim.frag_cache[lo:hi], sim._prov_f[lo:hi]))
        assert tuple(sim._block_sums[:, b]) == want, (b, tuple(sim._block_sums[:, b]), want)
        checked += 1
    return checked


@pytest.mark.parametrize("fast", [False, True], ids=["python", "compiled"])
def test_the_copies_follow_every_change(fast, monkeypatch):
    """The running pods' slot copies of CPU usage and crash state, and the reward's overload and
    stranded sums kept per block of nodes (recomputed only where a node changed), hold after every
    decision, tick, crash, restart, autoscaler scan and compiled stretch: every block not flagged for
    recomputation still holds its nodes' exact sums (a missed flag would leave a stale one). On the
    loaded tiny cluster, with 2 nodes per block so that there are many blocks, and memory tight
    enough that containers are OOM-killed and restarted."""
    from td3sched.simulator import engine
    from td3sched.simulator.kernels import block_count

    monkeypatch.setattr(engine, "block_count", lambda n: block_count(n, 2))  # 2 nodes a block: many blocks
    checks = []
    for name in ("_open_decision", "_tick", "_run_fast", "_crash", "_restart", "_autoscale"):
        real = getattr(Simulation, name)

        def hooked(self, *args, _real=real):
            out = _real(self, *args)
            checks.append(_copies_hold(self))
            return out

        monkeypatch.setattr(Simulation, name, hooked)
    result = _run(LOADED, fast=fast)
    assert result["metrics"]["container_oom"] > 0
    assert sum(checks) > 1000, sum(checks)


def _capped_world():
    """4 nodes; three apps: ``one`` at most 1 a node, ``two`` at most 2 (a third of its pods carry no cap
    of their own but count against it), ``free`` without a cap. More pods of the capped apps than
    the caps let run at once, so caps reject nodes, pods wait and departures free room for them."""
    from tests.simulator.worlds import P, config, node, pool, world

    rng = np.random.default_rng(5)
    pods = []
    for i in range(400):
        app = ("one", "two", "free")[i % 3]
        cap = {"one": 1, "two": -1 if i % 9 == 1 else 2, "free": -1}[app]
        pods.append(P(f"p{i}", t=float(rng.uniform(0, 6000)), dur=float(rng.uniform(100, 900)), cpu=500, mem=512,
                      app=app, cap=cap, size_cpu=300, size_mem=300))
    return world([pool("cpu", node(cpu=8000, mem=16384), 4)], pods, cfg=config(tick_s=60))


@pytest.mark.parametrize("fast", [False, True], ids=["python", "compiled"])
def test_pods_of_capped_apps_bind_in_the_compiled_loop_as_in_python(fast, monkeypatch):
    """The anti-affinity cap (DLRM's max_instance_per_node) in the compiled loop: its per-app counts
    follow every bind and release of either path, the cap holds, the compiled run binds pods of
    capped apps itself (it used to hand them to Python), and its records are the Python run's."""
    w = _capped_world()
    capped_in_python = []
    real_schedule, real_run_fast = Simulation.schedule, Simulation._run_fast

    def schedule(self, pod, t, memo=True):
        if self.app_row[self.w.app[pod]] >= 0:
            capped_in_python.append(pod)
        return real_schedule(self, pod, t, memo)

    def counts_hold(self):
        c, run = self.cluster, self.running_pods
        on = run.pods[: run.n]
        for app in np.flatnonzero(self.app_row >= 0):
            mine = self.node[on[self.w.app[on] == app]]
            assert (c.app_count[self.app_row[app]] == np.bincount(mine, minlength=c.size)).all()
            caps = self.w.max_per_node[self.w.app == app]
            if (caps > 0).all():  # (a pod without a cap of its own may go where its app's cap is reached)
                assert c.app_count[self.app_row[app]].max() <= caps.min()

    def run_fast(self, *args):
        out = real_run_fast(self, *args)
        counts_hold(self)
        return out

    monkeypatch.setattr(Simulation, "schedule", schedule)
    monkeypatch.setattr(Simulation, "_run_fast", run_fast)
    runs = []
    for path in (False, fast):
        capped_in_python.clear()
        sim = Simulation(w, make_policy("k8s-default"), 1, 0.0, 7200.0)
        sim.fast_path = path
        sim.verify_compiled_calls = True
        runs.append(sim.run())
        counts_hold(sim)
    python, result = runs
    capped = np.flatnonzero(sim.app_row[w.workload.app] >= 0)
    bound = capped[np.isfinite(sim.started[capped])]
    assert (sim.started[bound] > w.workload.arrival_s[bound]).sum() > 10  # caps made pods wait
    if fast:
        assert len(bound) > len(set(capped_in_python)) > 0  # some bound by the compiled loop, retries in Python
    assert result["metrics"] == python["metrics"]
    assert result["series_hourly"] == python["series_hourly"]
    assert result["latency_hist"] == python["latency_hist"]


def test_a_compiled_call_goes_straight_to_the_overload_and_can_verify_its_types():
    from numba import njit

    from td3sched.simulator.fastpath import CompiledCall

    @njit
    def add(a, b):
        return a + b

    call = CompiledCall(add, verify=True)
    assert call(np.arange(3.0), 1.0).tolist() == [1.0, 2.0, 3.0]
    assert call._entry is not None  # the first call found the overload
    assert call(np.arange(2.0), 2.0).tolist() == [2.0, 3.0]
    with pytest.raises(TypeError, match="argument types changed"):
        call(np.arange(2), 2.0)  # int64 where float64 was
    plain = CompiledCall(lambda a: a * 2)
    assert plain(3) == 6 and plain._entry is None
