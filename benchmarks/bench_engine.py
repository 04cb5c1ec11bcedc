"""Decision-engine evidence, everything side by side in one run (issue: the decision engine, section 6).

The engine is served by its own process (``td3sched.engine.loadgen.ServedEngine``: the engine on a
synthetic 5,000-node cluster whose metrics are republished every second), and so is a no-op server
of the same kind (the same gRPC server, the reply built by the same code, no decision); the calls
come from this process over loopback. On a shared machine every figure moves with the
neighbours' load, so comparisons are interleaved and repeated, and ratios are medians over trials.

1. latency   ScoreNodes at 100 and 5,000 candidates, engine and no-op calls alternating one by one;
             per trial the p99 ratio, reported as the median over trials. Goal: engine p99 <= 1.3x.
2. onnx      one decision's inference, batch 1: ONNX Runtime (one intra-op thread) against torch
             eager (one thread), blocks alternating; median of the per-trial ratios. Goal: >= 3x.
             Beside it, the observation's statistics against numpy's general functions.
3. clients   decisions/s with 1, 4 and 16 concurrent clients (100 candidates, closed loop).
4. soak      1,000 decisions/s (open loop, a ReportBinding every tenth) for --soak-s (600): errors,
             the server's RSS growth after the first minute (goal < 5%), p99 per minute, CPU per call;
             then the no-op at the same rate for --soak-noop-s (120): what the transport alone carries.
5. twin      the simulator driving the engine over loopback gRPC and over the extender against the
             same run through the engine in process: same placements and metrics, bit for bit, on
             tiny and on a dlrm window (needs the traces).
6. fuzz      --fuzz (100,000) generated requests, half ScoreNodes, half extender bodies: 0 crashes.
7. profile   (asked for by name; needs Linux perf) a served call's CPU by library, engine against
             no-op: --seconds of closed-loop calls from one client to each, sampled by perf.
8. served    (asked for by name) a served decision's cost by elimination: the no-op, the engine with
             every ScoreNodes answered from one decision taken at start, the engine whose actor
             answers one fixed action, and the engine; one client each in turn, 2-second blocks,
             --trials rounds: latency and the server's CPU a call, medians over the rounds.

    python benchmarks/bench_engine.py [--sections latency,onnx,clients,soak,twin,fuzz,profile,served] [--soak-s 600]
                                      [--soak-rate 1000] [--soak-noop-s 120] [--fuzz 100000]
                                      [--trials 9] [--calls 300]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

import grpc
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.engine.fuzzing: the tests' generators and contract

from td3sched.engine.loadgen import ServedEngine, cpu_seconds, requests, run_load, synthetic_snapshot  # noqa: E402
from td3sched.engine.v1 import engine_pb2_grpc  # noqa: E402
from td3sched.rl.observation import OBSERVATION_SIZE, utilisation_stats  # noqa: E402
from td3sched.rl.onnx_actor import load_actor  # noqa: E402

GOAL_P99_RATIO = 1.3
GOAL_ONNX_SPEEDUP = 3.0
GOAL_SOAK_RATE = 1000.0
GOAL_RSS_GROWTH = 0.05
NODES = 5000
SECTIONS = ("latency", "onnx", "clients", "soak", "twin", "fuzz", "profile", "served")
DEFAULT_SECTIONS = SECTIONS[:-2]
"""profile needs Linux perf and permission to attach to a child process, served takes its own processes
and about 8 x --trials seconds: asked for by name."""


def ms(x: float) -> str:
    return f"{1000 * x:.3f}"


def interleaved_latency(engine_port: int, noop_port: int, reqs: list, calls: int, trials: int):
    """(engine latencies [trials, calls], no-op latencies [trials, calls]), calls alternating."""
    with grpc.insecure_channel(f"127.0.0.1:{engine_port}") as ce, grpc.insecure_channel(f"127.0.0.1:{noop_port}") as cn:
        stubs = (engine_pb2_grpc.DecisionEngineStub(ce), engine_pb2_grpc.DecisionEngineStub(cn))
        for i in range(50):  # warm both
            for stub in stubs:
                stub.ScoreNodes(reqs[i % len(reqs)], timeout=30)
        out = np.empty((2, trials, calls))
        for t in range(trials):
            for i in range(calls):
                request = reqs[i % len(reqs)]
                for k in ((0, 1) if (i + t) % 2 == 0 else (1, 0)):
                    t0 = time.perf_counter()
                    stubs[k].ScoreNodes(request, timeout=30)
                    out[k, t, i] = time.perf_counter() - t0
    return out[0], out[1]


def section_latency(served: ServedEngine, noop: ServedEngine, names, args) -> None:
    print(f"\n1. ScoreNodes latency, engine vs no-op, calls alternating; {args.trials} trials; "
          f"p99 ratio goal <= {GOAL_P99_RATIO}")
    print(f"{'candidates':>10} {'calls':>6} {'engine p50':>11} {'engine p99':>11} {'no-op p50':>10} {'no-op p99':>10} "
          f"{'p99 ratio: median (min-max) of trials':>38}")
    for n in (100, 5000):
        calls = args.calls if n <= 100 else max(60, args.calls // 5)
        e, z = interleaved_latency(served.port, noop.port, requests(names, n), calls, args.trials)
        ratios = np.quantile(e, 0.99, axis=1) / np.quantile(z, 0.99, axis=1)
        med = float(np.median(ratios))
        print(f"{n:>10} {calls * args.trials:>6} {ms(np.median(e)):>8} ms {ms(np.quantile(e, 0.99)):>8} ms "
              f"{ms(np.median(z)):>7} ms {ms(np.quantile(z, 0.99)):>7} ms "
              f"{med:>10.2f} ({ratios.min():.2f}-{ratios.max():.2f})  {'met' if med <= GOAL_P99_RATIO else 'NOT met'}"
              f"; p50 ratio {np.median(e) / np.median(z):.2f}")
    # the same two handlers called directly, CPU time of this thread: the work each adds to a call
    from td3sched.engine.decision import DecisionEngine, ModelSlot
    from td3sched.engine.grpc_server import DecisionEngineServicer
    from td3sched.engine.loadgen import NoOpServicer
    from td3sched.engine.service import EngineService
    from td3sched.engine.state import ShadowState

    state = ShadowState(lambda: 0.0)
    state.publish(synthetic_snapshot(NODES, 0, now=0.0))
    engine = DecisionEngineServicer(EngineService(DecisionEngine(state, ModelSlot(load_actor(args.model)))))
    noop = NoOpServicer()
    for n in (100, 5000):
        request = requests(names, n)[0]
        t = blocks([lambda: engine.ScoreNodes(request, None), lambda: noop.ScoreNodes(request, None)],
                   200 if n <= 100 else 10, args.trials, clock=time.thread_time)
        print(f"   handler CPU per call at {n} candidates (no transport): engine {1e6 * np.median(t[:, 0]):.0f} us, "
              f"no-op {1e6 * np.median(t[:, 1]):.0f} us: the decision adds {1e6 * np.median(t[:, 0] - t[:, 1]):.0f} us")
        if n <= 100:
            t = blocks([lambda: engine.ScoreNodes(request, None), lambda: noop.ScoreNodes(request, None)],
                       200, args.trials, clock=time.thread_time, between=evict_caches)
            print(f"   the same, {EVICT_BYTES >> 20} MiB written between calls (as a served call's transport evicts the "
                  f"decision's code and data): engine {1e6 * np.median(t[:, 0]):.0f} us, no-op "
                  f"{1e6 * np.median(t[:, 1]):.0f} us: the decision adds {1e6 * np.median(t[:, 0] - t[:, 1]):.0f} us")
    section_fragmentation_cost(names, args)


def fragmentation_model(folder: Path) -> Path:
    """A fragmentation-mode model of the default network size (as initialised: the cost, not the
    choices, is measured) whose card carries the tiny scenario's typical pods (pools "cpu" and "gpu")."""
    from td3sched.rl.td3 import TD3, TD3Config

    TD3(OBSERVATION_SIZE, TD3Config(buffer_size=10, learning_starts=0), seed=1,
        action_mode="fragmentation").save(folder, {"scenario": "tiny", "span": "train"})
    return folder


def section_fragmentation_cost(names, args) -> None:
    """Handler CPU of a model with a fragmentation share against one without, both on a snapshot that
    carries the nodes' allocation and pools: what fgd's term adds to a decision."""
    import tempfile

    from td3sched.engine.decision import DecisionEngine, ModelSlot
    from td3sched.engine.grpc_server import DecisionEngineServicer
    from td3sched.engine.service import EngineService
    from td3sched.engine.state import ShadowState

    state = ShadowState(lambda: 0.0)
    state.publish(synthetic_snapshot(NODES, 0, now=0.0, allocation=True))
    with tempfile.TemporaryDirectory() as tmp:
        frag = load_actor(fragmentation_model(Path(tmp) / "frag"))
    servicers = [DecisionEngineServicer(EngineService(DecisionEngine(state, ModelSlot(actor))))
                 for actor in (frag, load_actor(args.model))]
    for n in (100, 5000):
        request = requests(names, n)[0]
        reply = servicers[0].ScoreNodes(request, None)
        assert not reply.fallback and reply.action.fragmentation > 0, reply.fallback_reason
        t = blocks([lambda s=s: s.ScoreNodes(request, None) for s in servicers], 200 if n <= 100 else 10,
                   args.trials, clock=time.thread_time)
        print(f"   handler CPU per call at {n} candidates with a fragmentation share (tiny's typical pods: "
              f"{sum(len(p) for p in frag.typical_pods[1].pools)} shapes in 2 pools): {1e6 * np.median(t[:, 0]):.0f} us "
              f"against {1e6 * np.median(t[:, 1]):.0f} us without: fgd's term adds "
              f"{1e6 * np.median(t[:, 0] - t[:, 1]):.0f} us")


EVICT_BYTES = 4 << 20
_EVICT = np.zeros(EVICT_BYTES // 8)


def evict_caches() -> None:
    """Write one word of every cache line of EVICT_BYTES: what the last call left in the caches is gone."""
    _EVICT[::8] += 1.0


def blocks(fns, n: int, trials: int, clock=time.perf_counter, between=None) -> np.ndarray:
    """[trials, len(fns)] seconds per call, each trial running every fn's block, order alternating;
    with ``between``, it runs before each call, untimed."""
    for fn in fns:
        for _ in range(200):
            fn()
    out = np.empty((trials, len(fns)))
    for t in range(trials):
        order = range(len(fns)) if t % 2 == 0 else reversed(range(len(fns)))
        for k in order:
            fn = fns[k]
            if between is None:
                t0 = clock()
                for _ in range(n):
                    fn()
                out[t, k] = (clock() - t0) / n
            else:
                total = 0.0
                for _ in range(n):
                    between()
                    t0 = clock()
                    fn()
                    total += clock() - t0
                out[t, k] = total / n
    return out


def section_onnx(args) -> None:
    actor = load_actor(args.model)
    rng = np.random.default_rng(0)
    obs = rng.uniform(0, 1, OBSERVATION_SIZE).astype(np.float32)
    print(f"\n2. one decision's inference, batch 1, {args.trials} trials of alternating blocks; goal >= "
          f"{GOAL_ONNX_SPEEDUP}x")
    try:
        import torch

        from td3sched.rl.model import load_model

        torch.set_num_threads(1)
        model = load_model(args.model)
        t = blocks([lambda: actor.act(obs), lambda: model.act(obs)], 1000, args.trials)
        ratios = t[:, 1] / t[:, 0]
        med = float(np.median(ratios))
        print(f"   ONNX Runtime {1e6 * np.median(t[:, 0]):.1f} us, torch eager {1e6 * np.median(t[:, 1]):.1f} us: "
              f"{med:.1f}x (trials {ratios.min():.1f}-{ratios.max():.1f})  {'met' if med >= GOAL_ONNX_SPEEDUP else 'NOT met'}")
    except ImportError:
        t = blocks([lambda: actor.act(obs)], 1000, args.trials)
        print(f"   ONNX Runtime {1e6 * np.median(t[:, 0]):.1f} us (torch not installed: no comparison)")
    for k in (100, 5000):
        u = rng.uniform(0, 1.2, size=(k, 4))
        q = np.array([0.0, 0.1, 0.9, 1.0])

        def numpy_stats():
            qs = np.quantile(u, q, axis=0)
            return np.stack([u.mean(axis=0), u.std(axis=0), qs[0], qs[3], qs[1], qs[2]], axis=1).ravel()

        t = blocks([lambda: utilisation_stats(u), numpy_stats], 200 if k <= 100 else 20, args.trials)
        print(f"   observation statistics at {k} nodes: {1e6 * np.median(t[:, 0]):.1f} us, numpy's mean/std/quantile "
              f"{1e6 * np.median(t[:, 1]):.1f} us ({np.median(t[:, 1] / t[:, 0]):.1f}x), same values to the bit")


def closed_loop(port: int, reqs: list, clients: int, seconds: float, pid: int | None = None):
    """(decisions/s, client p99 s, errors, server CPU s per call) of ``clients`` threads each calling
    back to back (CPU from the server process ``pid``; NaN without)."""
    lat: list[float] = []
    errors = [0]
    lock = threading.Lock()
    end = time.perf_counter() + seconds

    def client(k: int) -> None:
        mine, bad = [], 0
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = engine_pb2_grpc.DecisionEngineStub(channel)
            i = k
            while time.perf_counter() < end:
                t0 = time.perf_counter()
                try:
                    stub.ScoreNodes(reqs[i % len(reqs)], timeout=30)
                    mine.append(time.perf_counter() - t0)
                except grpc.RpcError:
                    bad += 1
                i += 1
        with lock:
            lat.extend(mine)
            errors[0] += bad

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    cpu0 = cpu_seconds(pid) if pid is not None else float("nan")
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    cpu = (cpu_seconds(pid) - cpu0) / len(lat) if pid is not None and lat else float("nan")
    return len(lat) / elapsed, float(np.quantile(lat, 0.99)), errors[0], cpu


def section_clients(served: ServedEngine, noop: ServedEngine, names, args) -> None:
    reqs = requests(names, 100)
    print(f"\n3. decisions/s, closed loop, 100 candidates, {args.seconds:g} s each (clients: threads of this process); "
          "server CPU per call from its process")
    print(f"{'clients':>7} {'engine/s':>9} {'engine p99':>11} {'engine CPU':>11} {'no-op/s':>8} {'no-op p99':>10} "
          f"{'no-op CPU':>10} {'errors':>6}")
    for clients in (1, 4, 16):
        rate, p99, err, cpu = closed_loop(served.port, reqs, clients, args.seconds, served.pid)
        zrate, zp99, zerr, zcpu = closed_loop(noop.port, reqs, clients, args.seconds, noop.pid)
        print(f"{clients:>7} {rate:>9,.0f} {ms(p99):>8} ms {1e6 * cpu:>8,.0f} us {zrate:>8,.0f} {ms(zp99):>7} ms "
              f"{1e6 * zcpu:>7,.0f} us {err + zerr:>6}")


def perf_by_library(pid: int, port: int, reqs, seconds: float, data: Path) -> tuple[int, dict[str, float]]:
    """(calls, CPU microseconds a call by shared library) of the server process ``pid`` over ``seconds``
    of closed-loop ScoreNodes calls from one client, sampled by Linux perf."""
    import subprocess

    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = engine_pb2_grpc.DecisionEngineStub(channel)
        for i in range(200):
            stub.ScoreNodes(reqs[i % len(reqs)], timeout=30)
        perf = subprocess.Popen(["perf", "record", "-F", "4999", "-o", str(data), "-p", str(pid)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)  # perf attached
        calls, end = 0, time.perf_counter() + seconds
        while time.perf_counter() < end:
            stub.ScoreNodes(reqs[calls % len(reqs)], timeout=30)
            calls += 1
        perf.send_signal(2)
        perf.wait()
    report = subprocess.run(["perf", "report", "-i", str(data), "--sort", "dso", "--stdio", "-g", "none", "-F",
                             "sample,dso"], capture_output=True, text=True, check=True).stdout
    rows = [line.split(None, 1) for line in report.splitlines() if line.strip() and not line.startswith("#")]
    samples: dict[str, int] = {}
    for n, dso in rows:  # perf names the compiled (numba) kernels' code "[JIT] tid <thread>"
        dso = "[JIT] compiled kernels" if dso.startswith("[JIT]") else dso.strip()
        samples[dso] = samples.get(dso, 0) + int(n)
    # cpu-clock samples at 4,999 Hz: each one is 1/4,999 s of the process's CPU
    return calls, {dso: 1e6 * n / 4999 / calls for dso, n in samples.items()}


def section_profile(names, args) -> None:
    """Where a served call's CPU goes, engine against no-op, by library (Linux perf)."""
    import shutil
    import tempfile

    print(f"\n7. CPU a served call, by library: one client, 100 candidates, {args.seconds:g} s each, sampled by perf")
    if shutil.which("perf") is None:
        print("   skipped: no perf (Debian's linux-perf)")
        return
    reqs = requests(names, 100)
    with tempfile.TemporaryDirectory() as tmp:
        measured = []
        for noop in (False, True):
            with ServedEngine(NODES, None if noop else args.model, noop=noop) as server:
                measured.append(perf_by_library(server.pid, server.port, reqs, args.seconds, Path(tmp) / "perf.data"))
    (calls, engine), (zcalls, noop) = measured
    print(f"   {'library':<44} {'engine us':>10} {'no-op us':>9} {'difference':>10}")
    for dso in sorted(set(engine) | set(noop), key=lambda d: -(engine.get(d, 0) - noop.get(d, 0))):
        e, z = engine.get(dso, 0.0), noop.get(dso, 0.0)
        if max(e, z) >= 2.0:
            print(f"   {dso[:44]:<44} {e:>10,.0f} {z:>9,.0f} {e - z:>+10,.0f}")
    print(f"   {'all':<44} {sum(engine.values()):>10,.0f} {sum(noop.values()):>9,.0f} "
          f"{sum(engine.values()) - sum(noop.values()):>+10,.0f}   ({calls:,} and {zcalls:,} calls)")


PARTS = {"": "engine",
         "inference": "engine, its actor answering one fixed action",
         "decision": "engine, every call answered from one decision taken at start"}


def _serve_part(conn, nodes: int, model: str, part: str) -> None:
    """A child process: the engine as ``loadgen`` serves it (a ``nodes``-node synthetic snapshot, the
    startup heap frozen, the same front door; no metrics refresh) with ``part`` of the decision taken
    out (``PARTS``): "" none, "inference" the actor's call (the actor answers one fixed action), or
    "decision" the whole decision (what is left: the front door, the service, its metrics, the reply)."""
    from td3sched.engine.decision import DecisionEngine, ModelSlot, PodSpec
    from td3sched.engine.grpc_server import GrpcFrontDoor
    from td3sched.engine.service import EngineService, freeze_startup_heap
    from td3sched.engine.state import ShadowState

    state = ShadowState()
    state.publish(synthetic_snapshot(nodes, 0))
    actor = load_actor(model)
    engine = DecisionEngine(state, ModelSlot(actor))
    engine.warm_up()
    if part == "inference":
        fixed_action = actor.act(np.zeros(OBSERVATION_SIZE, dtype=np.float32))
        actor.act = lambda obs: fixed_action
    elif part == "decision":
        fixed = engine.decide(PodSpec("fixed", 1000.0, 1024.0), list(state.snapshot.names[:100]))
        engine.decide = lambda pod, candidates=None: fixed
    service = EngineService(engine)
    freeze_startup_heap()
    front = GrpcFrontDoor(service, "127.0.0.1", 0)
    conn.send(front.port)
    conn.recv()
    front.stop(0)


def section_served(names, args) -> None:
    """A served decision's latency and CPU by elimination, against the no-op (see the module's docstring)."""
    import multiprocessing

    block_s = 2.0
    print(f"\n8. a served decision by elimination: one client, 100 candidates, {block_s:g} s blocks, each server in "
          f"turn, {args.trials} rounds; medians over the rounds")
    reqs = requests(names, 100)
    ctx = multiprocessing.get_context("spawn")
    servers, pipes = {}, []
    with ServedEngine(noop=True) as noop:
        try:
            for part in PARTS:
                parent, child = ctx.Pipe()
                process = ctx.Process(target=_serve_part, args=(child, NODES, args.model, part), daemon=True)
                process.start()
                if not parent.poll(120):
                    raise RuntimeError(f"the {PARTS[part]} did not start within 120 s")
                servers[PARTS[part]] = (parent.recv(), process.pid)
                pipes.append((parent, process))
            servers = {"no-op": (noop.port, noop.pid), **{PARTS[p]: servers[PARTS[p]] for p in ("decision", "inference", "")}}
            measured = {name: [] for name in servers}
            for trial in range(args.trials):
                order = list(servers)[trial % len(servers):] + list(servers)[:trial % len(servers)]
                for name in order:
                    port, pid = servers[name]
                    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                        stub = engine_pb2_grpc.DecisionEngineStub(channel)
                        for i in range(50):
                            stub.ScoreNodes(reqs[i % len(reqs)], timeout=30)
                        lat, cpu0, end = [], cpu_seconds(pid), time.perf_counter() + block_s
                        while time.perf_counter() < end:
                            t0 = time.perf_counter()
                            stub.ScoreNodes(reqs[len(lat) % len(reqs)], timeout=30)
                            lat.append(time.perf_counter() - t0)
                        measured[name].append((np.median(lat), np.quantile(lat, 0.99),
                                               (cpu_seconds(pid) - cpu0) / len(lat)))
        finally:
            for parent, process in pipes:
                if process.is_alive():
                    parent.send("stop")
                    process.join(10)
    base = np.median(np.array(measured["no-op"]), axis=0)
    print(f"   {'server':<62} {'p50':>7} {'p99':>7} {'CPU a call':>11} {'- no-op':>8}")
    for name, rows in measured.items():
        p50, p99, cpu = np.median(np.array(rows), axis=0)
        print(f"   {name:<62} {1e6 * p50:>5,.0f}us {1e6 * p99:>5,.0f}us {1e6 * cpu:>8,.0f} us {1e6 * (cpu - base[2]):>+7,.0f}")
    cpu = {name: np.median(np.array(rows)[:, 2]) for name, rows in measured.items()}
    print(f"   the decision served: {1e6 * (cpu['engine'] - cpu[PARTS['decision']]):,.0f} us of CPU a call, of which "
          f"the actor's call {1e6 * (cpu['engine'] - cpu[PARTS['inference']]):,.0f} us")


def section_soak(args) -> None:
    print(f"\n4. soak: {args.soak_rate:,.0f} decisions/s for {args.soak_s:g} s, open loop, a ReportBinding every "
          f"tenth call, 100 candidates of {NODES:,}, decision log on (rotated at 16 MiB); then the no-op at the same "
          f"rate for {args.soak_noop_s:g} s: what the transport alone carries on this machine")
    import tempfile

    names = synthetic_snapshot(NODES).names
    with tempfile.TemporaryDirectory() as tmp, ServedEngine(NODES, args.model, log_dir=tmp) as served:
        report = run_load(f"127.0.0.1:{served.port}", args.soak_rate, args.soak_s, requests(names, 100),
                          pid=served.pid, timeout_s=10.0)
        counters = served.stop()
    noop_report = None
    if args.soak_noop_s > 0:
        with ServedEngine(noop=True) as noop:
            noop_report = run_load(f"127.0.0.1:{noop.port}", args.soak_rate, args.soak_noop_s, requests(names, 100),
                                   pid=noop.pid, timeout_s=10.0)
    warmup = min(60.0, args.soak_s / 5)
    growth = report.rss_growth(warmup)
    minute = 60.0 if args.soak_s >= 180 else args.soak_s / 3
    p99s = [report.p99_s(a, a + minute) for a in np.arange(0, args.soak_s - minute / 2, minute)]
    print(f"   engine: sent {report.sent:,}, answered {report.ok:,} ({report.achieved_per_s:,.0f}/s), errors "
          f"{report.errors or 0}; server CPU {1e6 * report.server_cpu_per_call_s:,.0f} us per answered call; "
          f"engine's own p99 (its histogram) <= {1e3 * counters.get('score_nodes_p99_le_s', float('nan')):g} ms")
    if noop_report is not None:
        print(f"   no-op:  sent {noop_report.sent:,}, answered {noop_report.ok:,} ({noop_report.achieved_per_s:,.0f}/s), "
              f"errors {noop_report.errors or 0}; server CPU {1e6 * noop_report.server_cpu_per_call_s:,.0f} us per "
              f"answered call; client p99 {ms(noop_report.p99_s())} ms")
    print(f"   one serving process has at most one core for its interpreter: at {args.soak_rate:,.0f}/s that is "
          f"{1e6 / args.soak_rate:,.0f} us of CPU per call, the client's share of the machine aside")
    rss0 = [b for s, b in report.rss if s >= warmup][0]
    print(f"   server RSS {rss0 / 2**20:.0f} MiB at {warmup:g} s -> {report.rss[-1][1] / 2**20:.0f} MiB at the end: "
          f"{100 * growth:+.1f}%  goal < {100 * GOAL_RSS_GROWTH:g}% {'met' if growth < GOAL_RSS_GROWTH else 'NOT met'}")
    print(f"   client p99 per {minute:g} s: {' '.join(ms(p) for p in p99s)} ms; last/first "
          f"{p99s[-1] / p99s[0]:.2f}, max/min {max(p99s) / min(p99s):.2f}")
    met = report.achieved_per_s >= 0.98 * GOAL_SOAK_RATE and not report.errors
    print(f"   rate and errors goal (>= 98% of {GOAL_SOAK_RATE:,.0f}/s answered, no error): {'met' if met else 'NOT met'}")


def section_twin(args) -> None:
    from td3sched.engine.twin import EngineTwin
    from td3sched.policy import make_policy
    from td3sched.scenario import load_scenario
    from td3sched.simulator.engine import Simulation

    print("\n5. digital twin: served engine vs the same run in process (placements in order; every metric)")
    print(f"{'window':>22} {'door':>9} {'decisions':>9} {'placements':>10} {'same placements':>15} "
          f"{'same metrics':>12} {'served s':>8} {'in-process s':>12}")
    windows = [("tiny", [], "test", 2 * 3600.0)]
    try:
        from td3sched.trace.location import traces_dir

        traces_dir()
        windows.append(("dlrm", ["batch.enabled=false"], "test", args.twin_dlrm_s))
    except FileNotFoundError as exc:
        print(f"   (dlrm skipped: real traces not available: {exc})")
    actor = load_actor(args.model)
    for name, overrides, span, length in windows:
        scenario = load_scenario(name, overrides)
        world = scenario.build(1)
        start, _ = scenario.span(span)
        runs = {}
        for door, like in (("in-process", None), ("in-process", "grpc"), ("grpc", None), ("in-process", "extender"),
                           ("extender", None)):
            t0 = time.perf_counter()
            with EngineTwin(actor, door, like, safety_cpu_util=world.config.safety_cpu_util) as twin:
                metrics = Simulation(world, twin, 1, start, start + length).run()["metrics"]
            runs[(door, like)] = (metrics, twin.placements, twin.decisions, time.perf_counter() - t0)
        label = f"{name} {length / 60:g} min"
        for door in ("grpc", "extender"):
            served, local = runs[(door, None)], runs[("in-process", door)]
            print(f"{label:>22} {door:>9} {served[2]:>9,} {len(served[1]):>10,} {str(served[1] == local[1]):>15} "
                  f"{str(served[0] == local[0]):>12} {served[3]:>8.1f} {local[3]:>12.1f}")
        exact = runs[("in-process", None)]
        t0 = time.perf_counter()
        td3 = Simulation(world, make_policy(f"td3:{args.model}"), 1, start, start + length).run()["metrics"]
        print(f"{label:>22} {'exact':>9} {exact[2]:>9,} {len(exact[1]):>10,} {'':>15} {str(exact[0] == td3):>12} "
              f"{exact[3]:>8.1f} {time.perf_counter() - t0:>12.1f}   (engine in process, scores in [0, 1], vs the td3 policy)")
        for door in ("grpc", "extender"):
            rounded = runs[(door, None)][1]
            agree = next((i for i, (a, b) in enumerate(zip(rounded, exact[1])) if a != b), min(len(rounded), len(exact[1])))
            print(f"{'':>22} {door:>9} rounding to 0-{100 if door == 'grpc' else 10} vs scores in [0, 1]: the first "
                  f"{agree:,} placements agree; cpu_util {runs[(door, None)][0]['cpu_util']:.4f} vs {exact[0]['cpu_util']:.4f}")


def section_fuzz(args) -> None:
    from tests.engine.conftest import make_service, snapshot
    from tests.engine.fuzzing import fuzz_extender, fuzz_score_nodes
    from td3sched.engine.extender import ExtenderFrontDoor
    from td3sched.engine.grpc_server import GrpcFrontDoor

    actor = load_actor(args.model)
    half = args.fuzz // 2
    print(f"\n6. fuzz: {args.fuzz:,} generated requests on loopback servers (contract: tests/engine/fuzzing.py)")
    service, _ = make_service(actor, snapshot(20, age_s=[0] * 19 + [900]))
    door = GrpcFrontDoor(service, "127.0.0.1", 0)
    t0 = time.perf_counter()
    with grpc.insecure_channel(f"127.0.0.1:{door.port}") as channel:
        sent = fuzz_score_nodes(engine_pb2_grpc.DecisionEngineStub(channel), half)
    door.stop(0)
    print(f"   ScoreNodes: {sent:,} requests, 0 crashes ({time.perf_counter() - t0:.0f} s)")
    service, _ = make_service(actor, snapshot(3, cpu_util=[0.95, 0.4, 0.2]))
    ext = ExtenderFrontDoor(service, "127.0.0.1", 0, read_timeout_s=5.0, max_body_bytes=1 << 20)
    t0 = time.perf_counter()
    sent2 = fuzz_extender(ext.port, args.fuzz - half)
    ext.stop()
    print(f"   extender: {sent2:,} requests, 0 crashes ({time.perf_counter() - t0:.0f} s); total {sent + sent2:,}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sections", default=",".join(DEFAULT_SECTIONS),
                        help=f"Comma-separated, of {', '.join(SECTIONS)} (default: all but profile).")
    parser.add_argument("--model", default=str(REPO / "models" / "td3-dlrm"))
    parser.add_argument("--calls", type=int, default=300, help="Alternating call pairs per latency trial (100 nodes).")
    parser.add_argument("--trials", type=int, default=9)
    parser.add_argument("--seconds", type=float, default=5.0, help="Length of each closed-loop throughput run.")
    parser.add_argument("--soak-s", type=float, default=600.0)
    parser.add_argument("--soak-rate", type=float, default=GOAL_SOAK_RATE,
                        help="Decisions/s of the soak (the goal is 1,000; a loaded machine may not serve that).")
    parser.add_argument("--soak-noop-s", type=float, default=120.0,
                        help="Length of the no-op's soak at the same rate (0: none).")
    parser.add_argument("--twin-dlrm-s", type=float, default=600.0, help="Length of the dlrm twin window.")
    parser.add_argument("--fuzz", type=int, default=100_000)
    args = parser.parse_args()
    sections = args.sections.split(",")
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        parser.error(f"--sections: unknown {sorted(unknown)}: expected some of {', '.join(SECTIONS)}")
    print(f"model {Path(args.model).name} ({load_actor(args.model).version}); one intra-op thread; "
          f"load average at start {' '.join(f'{x:.1f}' for x in __import__('os').getloadavg())}")
    started = time.perf_counter()
    if "latency" in sections or "clients" in sections:
        with ServedEngine(NODES, args.model) as served, ServedEngine(noop=True) as noop:
            names = synthetic_snapshot(NODES).names
            if "latency" in sections:
                section_latency(served, noop, names, args)
            if "clients" in sections:
                section_clients(served, noop, names, args)
    if "profile" in sections:
        section_profile(synthetic_snapshot(NODES).names, args)
    if "served" in sections:
        section_served(synthetic_snapshot(NODES).names, args)
    if "onnx" in sections:
        section_onnx(args)
    if "soak" in sections:
        section_soak(args)
    if "twin" in sections:
        section_twin(args)
    if "fuzz" in sections:
        section_fuzz(args)
    print(f"\nwhole run {time.perf_counter() - started:.0f} s; load average at the end "
          f"{' '.join(f'{x:.1f}' for x in __import__('os').getloadavg())}")


if __name__ == "__main__":
    main()
