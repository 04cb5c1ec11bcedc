"""``td3sched serve`` as a process on real Prometheus metrics: config errors name the key; SIGTERM
drains and exits cleanly with every decision logged; SIGKILL during log writes leaves a readable
log that a restarted engine appends to; a hot reload under load loses no request."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import grpc
import pytest
import yaml

from td3sched.engine.config import EngineConfig, load_config
from td3sched.engine.decision_log import DecisionLog, read_log
from td3sched.engine.prometheus_source import DEFAULT_QUERIES
from td3sched.engine.serve import RunningEngine
from td3sched.engine.v1 import engine_pb2, engine_pb2_grpc

from tests.engine.conftest import MODEL, REPO
from tests.engine.prometheus_harness import (NodeExporterStub, PrometheusServer, SimulatedNode, ensure_prometheus,
                                             wait_for)

QUERIES = {name: q.replace("[1m]", "[5s]") for name, q in DEFAULT_QUERIES.items()}
NAMES = ["node-a", "node-b", "node-c"]
DEADLINE_S = 10.0


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    binary = ensure_prometheus()
    exporter = NodeExporterStub([SimulatedNode("node-a", 4, 0.5, 16, 0.25), SimulatedNode("node-b", 8, 0.25, 32, 0.5),
                                 SimulatedNode("node-c", 2, 0.3, 8, 0.4)])
    prom = PrometheusServer(binary, tmp_path_factory.mktemp("prometheus"), f"127.0.0.1:{exporter.port}")
    prom.start()
    yield prom
    prom.stop()
    exporter.stop()


def write_config(folder: Path, prom, model=MODEL, **extra) -> Path:
    config = {"model": str(model), "grpc": {"port": 0}, "http": {"port": 0}, "reload_interval_s": 0.2,
              "prometheus": {"url": prom.url, "interval_s": 0.5, "queries": QUERIES},
              "decision_log": {"path": str(folder / "decisions.jsonl"), "fsync_interval_s": 0.1}, **extra}
    path = folder / "engine.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def pod(name="web"):
    return engine_pb2.Pod(name=name, cpu_milli=250, mem_mib=256)


@pytest.mark.parametrize("text, message", [
    ("grpc: {port: 70000}", "grpc.port: Input should be less than or equal to 65535 (got 70000)"),
    ("staleness: {mode: sometimes}", "staleness.mode: Input should be 'fail-open' or 'fail-closed'"),
    ("prometheus: {interval_s: 5}", "prometheus.url: Field required"),
    ("grcp: {port: 1}", "grcp: Extra inputs are not permitted"),
    ("prometheus: {url: x, queries: {cpu: up}}", "queries: unknown ['cpu']"),
    ("- a list", "expected a mapping of settings"),
    ("kubernetes: {}", "kubernetes: Value error, kubeconfig=None, in_cluster=false: expected exactly one of a "
                       "kubeconfig file and in_cluster: true"),
    ("kubernetes: {kubeconfig: k, in_cluster: true}", "kubeconfig='k', in_cluster=true: expected exactly one"),
    ("kubernetes: {in_cluster: true, context: a}", "context='a': a kubeconfig's context, but in_cluster is set"),
])
def test_config_errors_name_the_key(tmp_path, text, message):
    path = tmp_path / "engine.yaml"
    path.write_text(text)
    with pytest.raises(ValueError) as err:
        load_config(path)
    assert message in str(err.value) and str(path) in str(err.value)


def test_defaults_bind_loopback_and_fail_open():
    config = EngineConfig()
    assert config.grpc.address == config.http.address == "127.0.0.1"
    assert config.staleness.mode == "fail-open" and config.safety_cpu_util == 0.9 and not config.shadow


class EngineProcess:
    def __init__(self, config: Path):
        self.ready = config.parent / "ports.json"
        if self.ready.exists():
            self.ready.unlink()
        env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
        self.proc = subprocess.Popen([sys.executable, "-m", "td3sched.cli", "serve", "--config", str(config),
                                      "--ready-file", str(self.ready)], env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        ports = wait_for(lambda: self.ready.exists() and json.loads(self.ready.read_text()), deadline_s=60, every_s=0.1)
        assert ports, f"engine did not start: {self.output()}"
        self.channel = grpc.insecure_channel(f"127.0.0.1:{ports['grpc']}")
        self.stub = engine_pb2_grpc.DecisionEngineStub(self.channel)
        self.http_port = ports["http"]

    def output(self) -> str:
        if self.proc.poll() is None:
            self.proc.kill()
        return self.proc.communicate(timeout=30)[0][-3000:]

    def score(self, name="web"):
        return self.stub.ScoreNodes(engine_pb2.ScoreNodesRequest(pod=pod(name), candidates=NAMES), timeout=DEADLINE_S)

    def wait_ready(self):
        def ok():
            try:
                reply = self.score("probe")
                return reply if not reply.fallback else None  # rates need their window filled first
            except grpc.RpcError as exc:
                assert exc.code() == grpc.StatusCode.UNAVAILABLE, exc
                return None
        reply = wait_for(ok, deadline_s=60, every_s=0.2)
        assert reply is not None, "engine never got fresh metrics from Prometheus"


def test_serve_decides_on_prometheus_metrics_and_sigterm_drains_with_everything_logged(tmp_path, prometheus):
    engine = EngineProcess(write_config(tmp_path, prometheus))
    try:
        engine.wait_ready()
        replies = [engine.score(f"web-{i}") for i in range(20)]
        engine.stub.ReportBinding(engine_pb2.ReportBindingRequest(pod=pod("web-0"), node="node-b",
                                                                  decision_id=replies[0].decision_id), timeout=DEADLINE_S)
        engine.channel.close()
        engine.proc.send_signal(signal.SIGTERM)
        assert engine.proc.wait(timeout=60) == 0, engine.output()
    finally:
        if engine.proc.poll() is None:
            engine.proc.kill()
    records, skipped = read_log(tmp_path / "decisions.jsonl")
    assert skipped == 0
    decisions = {r["decision_id"]: r for r in records if r["kind"] == "decision"}
    assert all(r.decision_id in decisions for r in replies)
    first = decisions[replies[0].decision_id]
    assert first["pod"]["name"] == "web-0" and len(first["observation"]) == 35
    assert [c["node"] for c in first["candidates"]] == NAMES
    assert [c["score"] for c in first["candidates"]] == [s.score for s in replies[0].scores]
    assert first["model_version"] == replies[0].model_version and first["fallback_reason"] == ""
    binding = [r for r in records if r["kind"] == "binding"]
    assert binding[0]["node"] == "node-b" and binding[0]["decision_id"] == replies[0].decision_id
    assert [r["seq"] for r in records] == list(range(len(records)))


def test_sigkill_during_log_writes_leaves_a_readable_log_that_a_restart_appends_to(tmp_path, prometheus):
    config = write_config(tmp_path, prometheus)
    engine = EngineProcess(config)
    engine.wait_ready()
    stop = threading.Event()
    sent = []

    def hammer():
        while not stop.is_set():
            try:
                engine.score(f"w{len(sent)}")
                sent.append(1)
            except grpc.RpcError:
                return

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for t in threads:
        t.start()
    log_path = tmp_path / "decisions.jsonl"
    assert wait_for(lambda: log_path.exists() and log_path.stat().st_size > 200_000, deadline_s=120, every_s=0.05)
    engine.proc.send_signal(signal.SIGKILL)
    engine.proc.wait(timeout=30)
    stop.set()
    for t in threads:
        t.join()
    engine.channel.close()
    records, skipped = read_log(log_path)
    assert skipped <= 1 and len(records) > 50  # at most the record being written is cut
    assert [r["seq"] for r in records] == list(range(len(records)))
    again = EngineProcess(config)
    try:
        again.wait_ready()
        again.score("after-restart")
        again.channel.close()
        again.proc.send_signal(signal.SIGTERM)
        assert again.proc.wait(timeout=60) == 0
    finally:
        if again.proc.poll() is None:
            again.proc.kill()
    after, skipped_after = read_log(log_path)
    assert skipped_after == skipped and after[: len(records)] == records
    assert any(r.get("pod", {}).get("name") == "after-restart" for r in after[len(records):])


def test_hot_reload_under_load_loses_no_request(tmp_path, prometheus):
    folder = tmp_path / "model"
    shutil.copytree(MODEL, folder)
    config = load_config(write_config(tmp_path, prometheus, model=folder, grpc={"port": 0, "max_workers": 4}))
    engine = RunningEngine(config)
    engine.start()
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{engine.grpc.port}")
        stub = engine_pb2_grpc.DecisionEngineStub(channel)
        assert wait_for(lambda: engine.state.ready and not engine.engine.decide(
            __import__("td3sched.engine.decision", fromlist=["PodSpec"]).PodSpec("p"), NAMES).fallback, deadline_s=60)
        old = engine.engine.models.version
        versions, errors, stop = [], [], threading.Event()

        def load():
            while not stop.is_set():
                try:
                    versions.append(stub.ScoreNodes(engine_pb2.ScoreNodesRequest(pod=pod(), candidates=NAMES),
                                                    timeout=DEADLINE_S).model_version)
                except grpc.RpcError as exc:
                    errors.append(exc)

        clients = [threading.Thread(target=load) for _ in range(3)]
        for t in clients:
            t.start()
        assert wait_for(lambda: len(versions) > 20, every_s=0.05)
        other = REPO / "models" / "td3-openb"
        for name in ("model.pt", "model.onnx", "model.json"):  # file by file: the reloader must wait for a whole set
            shutil.copyfile(other / name, folder / f".{name}.tmp")
            os.replace(folder / f".{name}.tmp", folder / name)
        new = wait_for(lambda: engine.engine.models.version if engine.engine.models.version != old else None)
        assert new is not None
        n = len(versions)
        assert wait_for(lambda: len(versions) > n + 20, every_s=0.05)
        stop.set()
        for t in clients:
            t.join()
        channel.close()
    finally:
        engine.stop()
    assert not errors
    assert versions[0] == old and versions[-1] == new and set(versions) == {old, new}
    switch = versions.index(new)
    assert all(v == new for v in versions[switch + 3:])  # at most the calls in flight at the swap finish on the old
    assert engine.metrics.model_info.labels(new)._value.get() == 1


def test_decision_log_rotates_and_keeps_a_bounded_number_of_files(tmp_path):
    log = DecisionLog(tmp_path / "d.jsonl", max_bytes=4096, keep=2, fsync_interval_s=0.05)
    for i in range(400):
        log.append({"kind": "decision", "i": i, "pad": "x" * 40})
    log.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["d.jsonl", "d.jsonl.1", "d.jsonl.2"]
    seqs = []
    for name in ("d.jsonl.2", "d.jsonl.1", "d.jsonl"):
        records, skipped = read_log(tmp_path / name)
        assert skipped == 0
        seqs += [r["seq"] for r in records]
    assert seqs == list(range(seqs[0], 400)) and seqs[0] > 0  # the oldest files were dropped, the rest in order


def test_a_torn_last_record_is_skipped_and_the_next_run_starts_a_new_line(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"schema":1,"seq":0,"kind":"decision"}\n{"schema":1,"seq":1,"ki')
    log = DecisionLog(path)
    log.append({"kind": "decision", "nan": float("nan")})  # not JSON: logged as unloggable, never lost silently
    log.close()
    records, skipped = read_log(path)
    assert skipped == 1 and [r["kind"] for r in records] == ["decision", "unloggable"]


def _certificates(folder: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, made with openssl."""
    if not shutil.which("openssl"):
        pytest.skip("openssl is not installed: no certificates for the TLS test")

    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=folder, timeout=60)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
        "-subj", "/CN=test-ca")
    (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("server", "client"):
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{name}.crt", "-days", "2", "-extfile", "san.ext")
    return {n: folder / n for n in ("ca.crt", "server.crt", "server.key", "client.crt", "client.key")}


def test_mutual_tls_on_both_front_doors(tmp_path):
    import ssl
    import urllib.request

    certs = _certificates(tmp_path)
    config = EngineConfig(model=MODEL, grpc={"port": 0}, http={"port": 0},
                          tls={"cert_file": certs["server.crt"], "key_file": certs["server.key"],
                               "client_ca_file": certs["ca.crt"]})
    engine = RunningEngine(config)
    engine.start()
    try:
        creds = grpc.ssl_channel_credentials(certs["ca.crt"].read_bytes(), certs["client.key"].read_bytes(),
                                             certs["client.crt"].read_bytes())
        with grpc.secure_channel(f"127.0.0.1:{engine.grpc.port}", creds) as channel:
            with pytest.raises(grpc.RpcError) as err:  # no metrics source here: the engine answers UNAVAILABLE
                engine_pb2_grpc.DecisionEngineStub(channel).ScoreNodes(
                    engine_pb2.ScoreNodesRequest(pod=pod(), candidates=NAMES), timeout=DEADLINE_S)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        anonymous = grpc.ssl_channel_credentials(certs["ca.crt"].read_bytes())
        with grpc.secure_channel(f"127.0.0.1:{engine.grpc.port}", anonymous) as channel:
            with pytest.raises(grpc.RpcError) as err:  # no client certificate: refused in the handshake
                engine_pb2_grpc.DecisionEngineStub(channel).ScoreNodes(
                    engine_pb2.ScoreNodesRequest(pod=pod(), candidates=NAMES), timeout=DEADLINE_S)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE and "no node metrics" not in err.value.details(), \
                err.value.details()
        context = ssl.create_default_context(cafile=certs["ca.crt"])
        context.load_cert_chain(certs["client.crt"], certs["client.key"])
        url = f"https://127.0.0.1:{engine.http.port}/healthz"
        with urllib.request.urlopen(url, context=context, timeout=DEADLINE_S) as resp:
            assert resp.status == 200
        with pytest.raises(OSError):  # no client certificate
            urllib.request.urlopen(url, context=ssl.create_default_context(cafile=certs["ca.crt"]), timeout=DEADLINE_S)
        with urllib.request.urlopen(url, context=context, timeout=DEADLINE_S) as resp:  # still serving after that
            assert resp.status == 200
    finally:
        engine.stop()
