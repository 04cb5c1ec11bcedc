"""The registry: a promotion killed with SIGKILL at any of its steps leaves the old version serving (or
the new one, once its link is renamed), never a torn one, and the registry usable; a running engine
hot-reloads a promotion, and after a rollback gives exactly the previous version's answers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from td3sched.lifecycle.registry import PROMOTION_FILE, Registry, RegistryError
from td3sched.rl.onnx_actor import load_actor

REPO = Path(__file__).resolve().parents[2]
OLD, NEW = REPO / "models" / "td3-dlrm", REPO / "models" / "td3-openb"
CHILD = Path(__file__).with_name("promote_child.py")


def _child(registry, folder, step, tmp_path) -> tuple[subprocess.Popen, Path, Path]:
    marker, trace = tmp_path / f"marker-{step}", tmp_path / f"trace-{step}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, str(CHILD), str(registry), str(folder), str(step), str(marker),
                             str(trace)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return proc, marker, trace


def _wait(path: Path, proc: subprocess.Popen, deadline_s: float = 120.0) -> str:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if path.exists() and path.read_text():
            return path.read_text()
        if proc.poll() is not None:
            raise AssertionError(f"child exited {proc.returncode}: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.05)
    raise AssertionError("child never reached its step")


def _serving_is_whole(reg: Registry) -> str:
    version = reg.serving()
    actor = load_actor(reg.serving_link)  # what the engine would load: whole, its card and graph agree
    assert actor.version == version
    return version


def test_sigkill_at_every_step_of_a_promotion_leaves_a_consistent_registry(tmp_path):
    base = tmp_path / "dry"
    reg = Registry(base)
    old = reg.register(OLD)
    reg.promote(old, require_gate=False)
    proc, marker, trace = _child(base, NEW, 0, tmp_path)  # a whole promotion: the steps it takes
    assert _wait(marker, proc) == "done" and proc.wait(30) == 0
    steps = trace.read_text().splitlines()
    flip = next(i for i, line in enumerate(steps, 1) if line.split()[1] == "replace" and line.endswith("/serving"))
    assert len(steps) >= 8, steps
    new = reg.serving()
    assert new != old
    for step in range(1, len(steps) + 1):
        root = tmp_path / f"reg-{step}"
        reg = Registry(root)
        reg.register(OLD)
        reg.promote(old, require_gate=False)
        proc, marker, _ = _child(root, NEW, step, tmp_path)
        _wait(marker, proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        serving = _serving_is_whole(reg)
        assert serving == (old if step <= flip else new), (step, steps[step - 1])
        assert [v.version for v in reg.list()] in ([old], [old, new], [new, old])  # no torn version listed
        reg.promote(reg.register(NEW), require_gate=False)  # the registry stays usable after the kill
        assert _serving_is_whole(reg) == new
        assert reg.rollback() == (new, old) and _serving_is_whole(reg) == old


def test_promotion_refuses_an_ungated_version_and_rollback_needs_a_predecessor(tmp_path):
    reg = Registry(tmp_path)
    v = reg.register(OLD)
    with pytest.raises(RegistryError, match=r"not promoted: it was never gated"):
        reg.promote(v)
    with pytest.raises(RegistryError, match=r"nothing is serving"):
        reg.rollback()
    reg.promote(v, require_gate=False)
    with pytest.raises(RegistryError, match=rf"version {v} replaced no version"):
        reg.rollback()
    with pytest.raises(RegistryError, match=r"no version 'abc': expected one of " + v):
        reg.promote("abc")
    assert (reg.folder(v) / PROMOTION_FILE).is_file()


def test_the_engine_reloads_a_promotion_and_a_rollback_gives_the_previous_answers_exactly(tmp_path):
    pytest.importorskip("grpc")
    import grpc

    from td3sched.engine.config import EngineConfig
    from td3sched.engine.serve import RunningEngine
    from td3sched.engine.state import binding_key
    from td3sched.engine.v1 import engine_pb2, engine_pb2_grpc
    from tests.engine.conftest import Clock, snapshot

    reg = Registry(tmp_path / "registry")
    old = reg.register(OLD)
    reg.promote(old, require_gate=False)
    config = EngineConfig(model=reg.serving_link, grpc={"port": 0}, http={"enabled": False}, reload_interval_s=0.1)
    engine = RunningEngine(config)
    clock = Clock(2_000_000.0)  # fixed: the observation's time of day is the same at every call
    engine.state.clock = clock
    snap = snapshot(12, now=clock.t, seed=3)
    engine.state.publish(snap)
    engine.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{engine.grpc.port}")
    stub = engine_pb2_grpc.DecisionEngineStub(channel)

    def answers() -> list[bytes]:
        out = []
        for i in range(6):
            pod = engine_pb2.Pod(name=f"web-{i}", cpu_milli=200 + 300 * i, mem_mib=128 * (i + 1))
            reply = stub.ScoreNodes(engine_pb2.ScoreNodesRequest(pod=pod, candidates=list(snap.names)), timeout=10)
            reply.ClearField("decision_id")  # a counter, not an answer
            out.append(reply.SerializeToString(deterministic=True))
        for i in range(6):  # never bound: each round scores the same cluster, not the last round's pods
            engine.state.unexpect_pod(binding_key("", f"web-{i}"))
        return out

    def serving_version(expected: str) -> bool:
        end = time.monotonic() + 30
        while time.monotonic() < end:
            if engine.engine.models.version == expected:
                return True
            time.sleep(0.05)
        return False

    try:
        before = answers()
        assert len(set(before)) > 1  # the pods get different answers: a real model on real candidates
        new = reg.register(NEW)
        reg.promote(new, require_gate=False)
        assert serving_version(new)
        during = answers()
        assert all(a != b for a, b in zip(before, during))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
        done = subprocess.run([sys.executable, "-m", "td3sched", "rollback", "--registry", str(reg.root)], env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and f"serving {old} (rolled back from {new})" in done.stdout, done.stderr
        assert serving_version(old)
        assert answers() == before
    finally:
        channel.close()
        engine.stop()
