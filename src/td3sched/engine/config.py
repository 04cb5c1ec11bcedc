"""``engine.yaml``: the engine's settings, validated at start by one pydantic schema. Unknown keys
are refused; an error names the key (``grpc.port``) and what it allows. Every default is here.

    model: models/td3-dlrm            # a model folder (model.onnx served; export-onnx writes it)
    fallback: {weights: [...], tau: 0} # default: the best-static arguments of the model's scenario
                                      # (+ fragmentation: 0.25, typical_pods: a card: the blend;
                                      #  + spread: 3, the sibling spread)
    shadow: false                     # decide and log; answers advisory / neutral
    safety_cpu_util: 0.9              # /filter: observed CPU above this share of allocatable fails
    grpc: {enabled: true, address: 127.0.0.1, port: 50051, max_workers: 8}
    http: {enabled: true, address: 127.0.0.1, port: 8888, max_body_bytes: 8388608, read_timeout_s: 5}
    tls:  {cert_file: ..., key_file: ..., client_ca_file: ...}   # optional; client_ca_file: mutual TLS
    staleness: {max_age_s: 60, mode: fail-open}
    prometheus: {url: http://127.0.0.1:9090, interval_s: 15, timeout_s: 5, queries: {...},
                 node_label: "", node_names: {}}
    decision_log: {path: decisions.jsonl, max_bytes: 67108864, keep: 5, fsync_interval_s: 1}
    kubernetes: {kubeconfig: kubeconfig, context: null, watch_timeout_s: 300, request_timeout_s: 10,
                 backoff_initial_s: 0.5, backoff_max_s: 30,
                 pool_label: td3sched.io/pool}       # optional: pod and node watches
    kubernetes: {in_cluster: true, service_account_dir: /var/run/secrets/kubernetes.io/serviceaccount}
                                      # ... or as the engine's pod, with its service account
    reload_interval_s: 5              # how often the model folder is checked for a new model
    drain_s: 10                       # SIGTERM: how long calls in flight may take to finish
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from td3sched.engine.kubernetes_objects import DEFAULT_POOL_LABEL, SERVICE_ACCOUNT_DIR
from td3sched.engine.prometheus_source import DEFAULT_QUERIES
from td3sched.policy.siblings import MAX_SPREAD

STRICT = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class GrpcSettings(BaseModel):
    model_config = STRICT
    enabled: bool = True
    address: str = "127.0.0.1"
    """Bind address: loopback unless set otherwise."""
    port: int = Field(50051, ge=0, le=65535)
    max_workers: int = Field(8, ge=1, le=256)


class HttpSettings(BaseModel):
    model_config = STRICT
    enabled: bool = True
    address: str = "127.0.0.1"
    port: int = Field(8888, ge=0, le=65535)
    max_body_bytes: int = Field(8 << 20, ge=1024)
    read_timeout_s: float = Field(5.0, gt=0)


class TlsSettings(BaseModel):
    model_config = STRICT
    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None
    """Set: clients must present a certificate signed by this CA (mutual TLS)."""

    @model_validator(mode="after")
    def _files_exist(self):
        for key in ("cert_file", "key_file", "client_ca_file"):
            path = getattr(self, key)
            if path is not None and not path.is_file():
                raise ValueError(f"{key}: {path}: no such file")
        return self


class StalenessSettings(BaseModel):
    model_config = STRICT
    max_age_s: float = Field(60.0, gt=0)
    """Metrics older than this (or missing) are stale."""
    mode: Literal["fail-open", "fail-closed"] = "fail-open"
    """fail-open: stale nodes score neutral and pass the filter; fail-closed: they are filtered out."""


class PrometheusSettings(BaseModel):
    model_config = STRICT
    url: str
    interval_s: float = Field(15.0, gt=0)
    timeout_s: float = Field(5.0, gt=0)
    queries: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_QUERIES))
    node_label: str = ""
    node_names: dict[str, str] = Field(default_factory=dict)
    disk_gib: float = Field(100.0, gt=0)
    rdma_pct: float = Field(100.0, gt=0)

    @model_validator(mode="after")
    def _queries(self):
        unknown = sorted(set(self.queries) - set(DEFAULT_QUERIES))
        if unknown:
            raise ValueError(f"queries: unknown {unknown}: expected some of {', '.join(DEFAULT_QUERIES)}")
        self.queries = {**DEFAULT_QUERIES, **self.queries}
        return self


class FallbackSettings(BaseModel):
    model_config = STRICT
    weights: list[float] = Field(min_length=4, max_length=4)
    tau: float = Field(0.0, ge=0, le=1)
    fragmentation: float = Field(0.0, ge=0, le=1)
    """The fragmentation share: the static score blended with FGD's (``policy.static_weights``:
    ``(1 - share) x minmax(score) + share x minmax(fgd)``) over the nodes' allocation, which the
    Kubernetes watches give (without them the static score alone); 0: none."""
    typical_pods: Path | None = None
    """The typical pods the share is measured with, per pool by name: a model card holding them (a
    shipped blend's, e.g. models/static-blend-dlrm-small/model.json) or a file of their form (relative: to
    the config file). Required with a share."""
    spread: float = Field(0.0, ge=0, le=MAX_SPREAD)
    """The sibling spread (``policy.siblings``): the score lowered on the nodes that run the pod's siblings,
    the bound pods of its controller, which the Kubernetes pod watch gives (without it, no such term); 0: none."""

    @model_validator(mode="after")
    def _share_needs_typical_pods(self):
        if self.fragmentation > 0 and self.typical_pods is None:
            raise ValueError(f"fragmentation={self.fragmentation:g} needs typical_pods: a model card or typical "
                             "pods file naming the pools' typical pods")
        return self


class DecisionLogSettings(BaseModel):
    model_config = STRICT
    path: Path
    max_bytes: int = Field(64 << 20, ge=4096)
    keep: int = Field(5, ge=1)
    fsync_interval_s: float = Field(1.0, gt=0)


class KubernetesSettings(BaseModel):
    model_config = STRICT
    kubeconfig: Path | None = None
    """The API server, its CA and the credentials (relative: to the config file); the engine lists and
    watches pods and nodes with them (``engine/kubernetes_source.py``). Exactly one of ``kubeconfig``
    and ``in_cluster``."""
    in_cluster: bool = False
    """Connect as the engine's own pod: the API server Kubernetes names in the pod's environment
    (``KUBERNETES_SERVICE_HOST``, ``KUBERNETES_SERVICE_PORT``), the service account's token and the
    cluster's CA from ``service_account_dir`` (the token is read again as the kubelet rotates it).
    The service account needs get, list and watch on pods and nodes (deploy/base/engine-rbac.yaml)."""
    service_account_dir: Path = SERVICE_ACCOUNT_DIR
    """With ``in_cluster``: the folder holding ``token`` and ``ca.crt``."""
    context: str | None = None
    """The kubeconfig's context to use; none: its current-context."""
    watch_timeout_s: float = Field(300.0, ge=1)
    """The API server ends each watch after this (timeoutSeconds); it is resumed from the last resourceVersion."""
    request_timeout_s: float = Field(10.0, gt=0)
    """Deadline of a connection and of a list."""
    backoff_initial_s: float = Field(0.5, gt=0)
    """First wait before reconnecting after an error; doubled after each failed attempt."""
    backoff_max_s: float = Field(30.0, gt=0)
    pool_label: str = Field(DEFAULT_POOL_LABEL, min_length=1)
    """The node label whose value names a node's pool: which of a model's typical pods (its card's, named
    as its training scenario names its pools) measure the node's fragmentation, for a model with a
    fragmentation share. A node without the label is of no known pool (fragmentation 0)."""

    @model_validator(mode="after")
    def _check(self):
        if self.in_cluster == (self.kubeconfig is not None):
            raise ValueError(f"kubeconfig={str(self.kubeconfig) if self.kubeconfig else None!r}, in_cluster="
                             f"{str(self.in_cluster).lower()}: expected exactly one of a kubeconfig file and "
                             "in_cluster: true")
        if self.in_cluster and self.context is not None:
            raise ValueError(f"context={self.context!r}: a kubeconfig's context, but in_cluster is set (no kubeconfig)")
        if self.backoff_max_s < self.backoff_initial_s:
            raise ValueError(f"backoff_max_s={self.backoff_max_s:g}: expected at least backoff_initial_s="
                             f"{self.backoff_initial_s:g}")
        return self


class EngineConfig(BaseModel):
    model_config = STRICT
    model: Path | None = None
    """Model folder; none: every decision falls back (reason no_model)."""
    fallback: FallbackSettings | None = None
    """None: the best-static arguments of the model's scenario (models/best-static), else equal weights, tau 0."""
    shadow: bool = False
    safety_cpu_util: float = Field(0.90, gt=0, le=1)
    grpc: GrpcSettings = GrpcSettings()
    http: HttpSettings = HttpSettings()
    tls: TlsSettings | None = None
    staleness: StalenessSettings = StalenessSettings()
    prometheus: PrometheusSettings | None = None
    decision_log: DecisionLogSettings | None = None
    kubernetes: KubernetesSettings | None = None
    """Pod and node watches on the API server: bindings feed the assign cache, nodes and their allocatable
    make the state's node set. None: bindings come from ReportBinding only, nodes from the metrics."""
    reload_interval_s: float = Field(5.0, gt=0)
    drain_s: float = Field(10.0, ge=0)


def load_config(path) -> EngineConfig:
    """The validated config in ``path``; a ValueError names the file, the key and what it allows."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{path}: no such config file") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not YAML ({exc})") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a mapping of settings, got {type(raw).__name__}")
    try:
        config = EngineConfig.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}"
                             + (f" (got {e['input']!r})" if e["type"] != "missing" and not isinstance(e["input"], dict)
                                else "") for e in exc.errors())
        raise ValueError(f"{path}: {problems}") from None
    base = path.parent  # relative paths are relative to the config file
    if config.model is not None and not config.model.is_absolute():
        config.model = base / config.model
    fallback = config.fallback
    if fallback is not None and fallback.typical_pods is not None and not fallback.typical_pods.is_absolute():
        fallback.typical_pods = base / fallback.typical_pods
    if config.decision_log is not None and not config.decision_log.path.is_absolute():
        config.decision_log.path = base / config.decision_log.path
    if config.kubernetes is not None and config.kubernetes.kubeconfig is not None:
        kubeconfig = config.kubernetes.kubeconfig
        if not kubeconfig.is_absolute():
            kubeconfig = config.kubernetes.kubeconfig = base / kubeconfig
        if not kubeconfig.is_file():
            raise ValueError(f"{path}: kubernetes.kubeconfig: {kubeconfig}: no such file")
    return config
