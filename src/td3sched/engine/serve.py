"""``td3sched serve --config engine.yaml``: the engine as a process.

Start: the config is validated (``config``), the model loaded and checked (``rl.onnx_actor``), the
fallback arguments resolved, the decision log opened, the Prometheus refresher and (given a kubeconfig)
the pod and node watches started, then the gRPC and HTTP front doors bound (127.0.0.1 unless
configured otherwise). Neither waits for its source: the front doors answer UNAVAILABLE until the
shadow state has a snapshot (the first Prometheus refresh, or the first node list without Prometheus).

Hot reload: every ``reload_interval_s`` the model folder's files (card, state dict, graph) are
checked; when they changed, the new model is loaded and validated, then swapped in atomically
(``decision.ModelSlot``): calls in flight finish on the old one, the new version is in every later
response, log record and metric. A model that fails validation is not served; the old one stays.

SIGTERM / SIGINT: drain. gRPC health turns NOT_SERVING, new calls are refused, calls in flight get
``drain_s`` to finish; then the HTTP extender stops, the refresher and the watches stop and the
decision log writes what it holds and closes.
"""

from __future__ import annotations

import logging
import signal
import ssl
import threading
import time
from pathlib import Path

import numpy as np

from td3sched.engine.config import EngineConfig
from td3sched.engine.decision import DecisionEngine, FragmentationMeasure, ModelSlot
from td3sched.engine.decision_log import DecisionLog
from td3sched.engine.metrics import EngineMetrics
from td3sched.engine.prometheus_source import PrometheusSource
from td3sched.engine.service import EngineService, freeze_startup_heap
from td3sched.engine.state import ShadowState, Staleness
from td3sched.metrics.fragmentation import read_typical_pods
from td3sched.rl.card import CARD_FILE, MODEL_FILE, ONNX_FILE
from td3sched.rl.onnx_actor import load_actor

log = logging.getLogger("td3sched.engine")
DEFAULT_FALLBACK = (np.full(4, 0.25), 0.0)
"""static-weights' defaults, when the model's scenario has no stored best-static result."""


def resolve_fallback(config: EngineConfig, actor) -> tuple[np.ndarray, float, str]:
    """(weights, tau, where from): the config's, else the model scenario's best-static, else the default."""
    if config.fallback is not None:
        return np.array(config.fallback.weights), config.fallback.tau, "config"
    scenario = actor.card.get("scenario") if actor is not None else None
    if scenario:
        from td3sched.search.best_static import load_result

        try:
            result, path = load_result("best-static", scenario, actor.card.get("overrides") or [])
            return np.array(result["weights"], dtype=float), float(result["tau"]), f"best-static {path.name}"
        except (ValueError, FileNotFoundError, KeyError) as exc:
            log.warning("no best-static result for scenario %s (%s): fallback is equal weights, tau 0", scenario, exc)
    return DEFAULT_FALLBACK[0].copy(), DEFAULT_FALLBACK[1], "default"


def fallback_fragmentation(config: EngineConfig) -> tuple[float, FragmentationMeasure | None]:
    """(share, measure) of the fallback's fragmentation term: the config's share with the typical pods of
    its ``typical_pods`` file; (0, None) without a share. A ValueError names the key and the file."""
    f = config.fallback
    if f is None or not f.fragmentation:
        return 0.0, None
    try:
        names, typical = read_typical_pods(f.typical_pods)
    except ValueError as exc:
        raise ValueError(f"fallback.typical_pods: {exc}") from None
    return f.fragmentation, FragmentationMeasure(names, typical)


def model_files_stamp(folder: Path) -> tuple:
    """What a change of model looks like from outside: each file's size, modification time and inode (a
    registry's ``serving`` link moved to another version names other files, even of the same size and time)."""
    stamp = []
    for name in (CARD_FILE, MODEL_FILE, ONNX_FILE):
        try:
            st = (Path(folder) / name).stat()
            stamp.append((name, st.st_size, st.st_mtime_ns, st.st_ino))
        except FileNotFoundError:
            stamp.append((name, None, None, None))
    return tuple(stamp)


class RunningEngine:
    def __init__(self, config: EngineConfig):
        self.config = config
        actor = load_actor(config.model) if config.model is not None else None
        weights, tau, source = resolve_fallback(config, actor)
        share, measure = fallback_fragmentation(config)
        spread = config.fallback.spread if config.fallback is not None else 0.0
        log.info("model %s, fallback weights %s, tau %g (%s), fragmentation share %g, sibling spread %g",
                 actor.version if actor else "none", weights.tolist(), tau, source, share, spread)
        self.state = ShadowState(time.time, Staleness(config.staleness.max_age_s, config.staleness.mode))
        self.engine = DecisionEngine(self.state, ModelSlot(actor), weights, tau, config.safety_cpu_util, config.shadow,
                                     share, measure, spread)
        self.engine.warm_up()
        dl = config.decision_log
        self.log = DecisionLog(dl.path, dl.max_bytes, dl.keep, dl.fsync_interval_s) if dl is not None else None
        self.metrics = EngineMetrics()
        self.service = EngineService(self.engine, self.log, self.metrics)
        self.source = None
        if config.prometheus is not None:
            p = config.prometheus
            self.source = PrometheusSource(p.url, self.state, p.queries, p.interval_s, p.timeout_s, p.node_label,
                                           p.node_names, p.disk_gib, p.rdma_pct,
                                           on_refresh=lambda ok: self.metrics.refreshes.labels("ok" if ok else "error").inc())
        self.kubernetes = None
        if config.kubernetes is not None:
            try:
                from td3sched.engine.kubernetes_source import KubernetesSource
            except ImportError as exc:
                raise ValueError(f"kubernetes: {exc}") from None
            k, p = config.kubernetes, config.prometheus
            assumed = {"disk_gib": p.disk_gib, "rdma_pct": p.rdma_pct} if p is not None else {}
            self.kubernetes = KubernetesSource(k.kubeconfig, self.service, k.context, k.watch_timeout_s,
                                               k.request_timeout_s, k.backoff_initial_s, k.backoff_max_s, **assumed,
                                               service_account_dir=k.service_account_dir, pool_label=k.pool_label)
        self.grpc = None
        self.http = None
        self.reload_errors = 0
        self._stamp = model_files_stamp(config.model) if config.model is not None else None
        self._stop = threading.Event()
        self._reloader = threading.Thread(target=self._reload_loop, name="model-reload", daemon=True)

    def start(self) -> None:
        from td3sched.engine.extender import ExtenderFrontDoor
        from td3sched.engine.grpc_server import GrpcFrontDoor

        c = self.config
        if self.source is not None:
            self.source.start()
        if self.kubernetes is not None:
            self.kubernetes.start()
        if c.grpc.enabled:
            credentials = None
            if c.tls is not None:
                import grpc

                ca = c.tls.client_ca_file.read_bytes() if c.tls.client_ca_file else None
                credentials = grpc.ssl_server_credentials([(c.tls.key_file.read_bytes(), c.tls.cert_file.read_bytes())],
                                                          root_certificates=ca, require_client_auth=ca is not None)
            self.grpc = GrpcFrontDoor(self.service, c.grpc.address, c.grpc.port, c.grpc.max_workers, credentials)
        if c.http.enabled:
            context = None
            if c.tls is not None:
                context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                context.load_cert_chain(c.tls.cert_file, c.tls.key_file)
                if c.tls.client_ca_file:
                    context.verify_mode = ssl.CERT_REQUIRED
                    context.load_verify_locations(c.tls.client_ca_file)
            self.http = ExtenderFrontDoor(self.service, c.http.address, c.http.port, c.http.max_body_bytes,
                                          c.http.read_timeout_s, context)
        self._reloader.start()
        log.info("serving: grpc %s, http %s", self.grpc.port if self.grpc else "off", self.http.port if self.http else "off")

    def reload_if_changed(self) -> bool:
        """Load and swap the model if its files changed; False (the old model kept) if it fails."""
        if self.config.model is None:
            return False
        stamp = model_files_stamp(self.config.model)
        if stamp == self._stamp:
            return False
        try:
            actor = load_actor(self.config.model)
            self.service.reload(actor)
        except (ValueError, OSError) as exc:  # ModelError is a ValueError
            self.reload_errors += 1
            log.warning("model reload refused, still serving %s: %s", self.engine.models.version, exc)
            return False  # retried at the next interval: a model written file by file settles
        self._stamp = stamp
        log.info("model reloaded: now serving %s", actor.version)
        return True

    def _reload_loop(self) -> None:
        while not self._stop.wait(self.config.reload_interval_s):
            self.reload_if_changed()

    def stop(self) -> None:
        """Drain and stop everything (see the module's docstring)."""
        self._stop.set()
        if self.grpc is not None:
            self.grpc.stop(self.config.drain_s)
        if self.http is not None:
            self.http.stop()
        if self.source is not None:
            self.source.stop()
        if self.kubernetes is not None:
            self.kubernetes.stop()
        if self.log is not None:
            self.log.close()


def serve(config: EngineConfig, ready_file: Path | None = None) -> None:
    """Run until SIGTERM or SIGINT, then drain. ``ready_file`` receives the bound ports as JSON."""
    import json

    engine = RunningEngine(config)
    freeze_startup_heap()
    engine.start()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if ready_file is not None:
        ports = {"grpc": engine.grpc.port if engine.grpc else None, "http": engine.http.port if engine.http else None}
        tmp = Path(f"{ready_file}.tmp")
        tmp.write_text(json.dumps(ports))
        tmp.replace(ready_file)
    while not stop.wait(0.5):
        pass
    log.info("draining")
    engine.stop()
