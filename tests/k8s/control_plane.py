"""A real Kubernetes control plane on 127.0.0.1 for the end-to-end tests: etcd, kube-apiserver and a
kube-scheduler (the td3-scheduler with the TD3Score plugin, or the stock one with the engine as its
extender), built from Go modules (``make k8s-bin``: scheduler/go.mod pins the Kubernetes version)
and run as processes. No kubelet: nodes are Node objects whose status (capacity, allocatable) is
written through the API; a pod is scheduled when the scheduler binds it (``spec.nodeName``).

Every process is started with a parent-death signal, so a test run that is killed takes them along;
``Processes.stop_all`` (fixture teardown and atexit) stops them in reverse order.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import secrets
import shutil
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from td3sched.engine.prometheus_source import DEFAULT_QUERIES
from tests.engine.prometheus_harness import free_port, wait_for

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "td3-dlrm"
QUERIES = {name: q.replace("[1m]", "[5s]") for name, q in DEFAULT_QUERIES.items()}
"""Rate windows that hold several of the tests' 1 s scrapes (docs/engine.md)."""
SCHEDULER_MODULE = REPO / "scheduler"


def kubernetes_version() -> str:
    """The k8s.io/kubernetes version scheduler/go.mod requires (the binaries' cache key)."""
    m = re.search(r"^\s*k8s\.io/kubernetes (v\d+\.\d+\.\d+)\s*$", (SCHEDULER_MODULE / "go.mod").read_text(), re.M)
    if not m:
        raise RuntimeError("scheduler/go.mod: no `k8s.io/kubernetes vX.Y.Z` requirement")
    return m.group(1)


def bin_dir() -> Path:
    return REPO / "build" / "k8s" / kubernetes_version()


BINARIES = ("etcd", "kube-apiserver", "kube-scheduler", "td3-scheduler")


def build_binaries(timeout_s: float = 3600) -> tuple[Path, float]:
    """``make k8s-bin`` (a no-op when the cached binaries are current): (their folder, seconds taken)."""
    start = time.monotonic()
    result = subprocess.run(["make", "-s", "k8s-bin"], cwd=REPO, capture_output=True, text=True, timeout=timeout_s)
    if result.returncode != 0:
        raise RuntimeError(f"make k8s-bin failed ({result.returncode}):\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}")
    folder = bin_dir()
    missing = [b for b in BINARIES if not (folder / b).is_file()]
    if missing:
        raise RuntimeError(f"make k8s-bin left no {missing} in {folder}")
    return folder, time.monotonic() - start


def _dying_with_parent(argv: list[str]) -> list[str]:
    """``argv`` run so that it is SIGKILLed when this process dies, even by SIGKILL (PR_SET_PDEATHSIG,
    set by util-linux's setpriv, which every Debian has, just before it execs ``argv``). Not a
    ``preexec_fn``: Python code between fork and exec in a process with live gRPC threads (the
    tests' engines) can hang the child before it ever execs; without one, subprocess spawns with
    vfork and no fork handler runs."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--", *argv] if setpriv else argv


class Process:
    """A started process with its output in ``log``."""

    def __init__(self, name: str, argv: list[str], log: Path, env: dict | None = None):
        self.name, self.argv, self.log_path = name, argv, log
        self.log = open(log, "ab")
        self.log_start = self.log.tell()  # a log shared with an earlier process of the same name
        self.proc = subprocess.Popen(_dying_with_parent(argv), stdout=self.log, stderr=subprocess.STDOUT, env=env)

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def tail(self, n: int = 3000) -> str:
        """The last ``n`` bytes this process wrote, with its exit status when it has exited."""
        self.log.flush()
        own = self.log_path.read_bytes()[self.log_start:][-n:].decode(errors="replace")
        code = self.proc.poll()
        return own + ("" if code is None else f"\n[{self.name} exited with status {code}]")

    def stop(self, timeout_s: float = 15) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class Processes:
    """Every process the harness started; stopped in reverse order, also at interpreter exit."""

    def __init__(self):
        self.started: list[Process] = []
        atexit.register(self.stop_all)

    def start(self, name: str, argv: list[str], log: Path, env: dict | None = None) -> Process:
        p = Process(name, argv, log, env)
        self.started.append(p)
        return p

    def stop(self, p: Process) -> None:
        p.stop()
        if p in self.started:
            self.started.remove(p)

    def stop_all(self) -> None:
        while self.started:
            self.started.pop().stop()


def _http_ok(url: str, context=None, headers: dict | None = None) -> bool:
    try:
        req = urllib.request.Request(url, headers=headers or {})
        with urllib.request.urlopen(req, timeout=2, context=context) as resp:
            return resp.status == 200
    except (OSError, urllib.error.URLError):
        return False


class ApiError(RuntimeError):
    def __init__(self, status: int, body: str, where: str):
        super().__init__(f"{where}: HTTP {status}: {body[:500]}")
        self.status = status


class ControlPlane:
    """etcd and kube-apiserver on loopback ports; a JSON client with an admin token."""

    def __init__(self, folder: Path, bins: Path, processes: Processes, apiserver_args: tuple[str, ...] = ()):
        self.folder, self.bins, self.processes = folder, bins, processes
        self.apiserver_args = tuple(apiserver_args)
        """More kube-apiserver flags (``--watch-cache=false``: watches read etcd, whose compaction answers 410)."""
        self.token = secrets.token_hex(16)
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.cert_dir = folder / "certs"

    def start(self) -> None:
        f = self.folder
        client, peer = free_port(), free_port()
        self.etcd = self.processes.start("etcd", [
            str(self.bins / "etcd"), f"--data-dir={f / 'etcd'}", f"--listen-client-urls=http://127.0.0.1:{client}",
            f"--advertise-client-urls=http://127.0.0.1:{client}", f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}", f"--initial-cluster=default=http://127.0.0.1:{peer}",
            "--listen-metrics-urls=", "--log-level=warn"], f / "etcd.log")
        self.etcd_url = f"http://127.0.0.1:{client}"
        if not wait_for(lambda: _http_ok(f"http://127.0.0.1:{client}/health"), deadline_s=60, every_s=0.2):
            raise RuntimeError(f"etcd not healthy within 60 s:\n{self.etcd.tail()}")
        (f / "tokens.csv").write_text(f"{self.token},admin,admin,system:masters\n")
        # the audit log of pod creations, bindings and deletions (import-history reads it), nothing else
        self.audit_log = f / "audit.log"
        (f / "audit-policy.yaml").write_text(yaml.safe_dump({
            "apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
            "rules": [{"level": "Request", "verbs": ["create", "delete"],
                       "resources": [{"group": "", "resources": ["pods", "pods/binding"]}]},
                      {"level": "None"}]}))
        key = f / "service-account.key"
        subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True, timeout=60)
        self.apiserver = self.processes.start("kube-apiserver", [
            str(self.bins / "kube-apiserver"), f"--etcd-servers=http://127.0.0.1:{client}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.port}",
            f"--cert-dir={self.cert_dir}", f"--token-auth-file={f / 'tokens.csv'}", "--authorization-mode=RBAC",
            f"--service-account-key-file={key}", f"--service-account-signing-key-file={key}",
            "--service-account-issuer=https://kubernetes.default.svc", "--service-cluster-ip-range=10.96.0.0/24",
            # admission plugins that wait on objects only the controller manager makes, and the one that
            # taints new nodes not-ready until a kubelet (there is none) reports them Ready
            "--disable-admission-plugins=ServiceAccount,DefaultStorageClass,StorageObjectInUseProtection,"
            "PersistentVolumeClaimResize,DefaultIngressClass,ResourceQuota,TaintNodesByCondition",
            "--enable-priority-and-fairness=false", f"--audit-policy-file={f / 'audit-policy.yaml'}",
            f"--audit-log-path={self.audit_log}", "--audit-log-mode=blocking", "--v=1", *self.apiserver_args],
            f / "kube-apiserver.log")
        self._wait_apiserver()
        self.kubeconfig = f / "kubeconfig"
        self.kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": self.url,
                                                      "certificate-authority": str(self.cert_dir / "apiserver.crt")}}],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin"}}]}))

    def _wait_apiserver(self) -> None:
        end = time.monotonic() + 120
        while time.monotonic() < end:
            if not self.apiserver.running:
                raise RuntimeError(f"kube-apiserver exited:\n{self.apiserver.tail()}")
            if self.cert_dir.joinpath("apiserver.crt").exists() and _http_ok(
                    f"{self.url}/readyz", self.ssl_context(), {"Authorization": f"Bearer {self.token}"}):
                return
            time.sleep(0.3)
        raise RuntimeError(f"kube-apiserver not ready within 120 s:\n{self.apiserver.tail()}")

    def stop_apiserver(self) -> None:
        """kube-apiserver goes away (SIGTERM); etcd and its data stay."""
        self.processes.stop(self.apiserver)

    def start_apiserver(self) -> None:
        """kube-apiserver again, on the same port, certificate and etcd, once stopped."""
        if self.apiserver.running:
            raise RuntimeError("kube-apiserver is running: stop_apiserver first")
        self.apiserver = self.processes.start("kube-apiserver", self.apiserver.argv, self.apiserver.log_path)
        self._wait_apiserver()

    def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision (through etcd's JSON gateway): a watch
        resumed from an older resourceVersion is then answered 410 Gone. The revision."""
        def post(path: str, body: dict) -> dict:
            req = urllib.request.Request(f"{self.etcd_url}{path}", data=json.dumps(body).encode(), method="POST")
            with urllib.request.urlopen(req, timeout=30) as resp:
                return json.loads(resp.read())
        revision = int(post("/v3/kv/range", {"key": "AA=="})["header"]["revision"])
        post("/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.cert_dir / "apiserver.crt"))

    # --- a small JSON client -------------------------------------------------------------------
    def request(self, method: str, path: str, body=None, content_type: str = "application/json",
                timeout_s: float = 30.0):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{self.url}{path}", data=data, method=method, headers={
            "Authorization": f"Bearer {self.token}", "Content-Type": content_type, "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout_s, context=self.ssl_context()) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise ApiError(exc.code, exc.read().decode(errors="replace"), f"{method} {path}") from None

    def create_namespace(self, name: str) -> None:
        self.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                    "metadata": {"name": name}})

    def create_node(self, name: str, cpu_milli: int, mem_mib: int, pods: int = 110, extra: dict | None = None,
                    labels: dict | None = None) -> None:
        """A Node with its status written as a kubelet would: capacity = allocatable, no taints;
        ``extra``: more resources ({"nvidia.com/gpu": "8"}); ``labels``: more labels."""
        self.request("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": name, "labels": {"kubernetes.io/hostname": name, "td3sched.test/fake": "true", **(labels or {})}}})
        resources = {"cpu": f"{cpu_milli}m", "memory": f"{mem_mib}Mi", "pods": str(pods), "ephemeral-storage": "100Gi",
                     **(extra or {})}
        self.write_node_status(name, resources)

    def write_node_status(self, name: str, resources: dict) -> None:
        """The node's capacity and allocatable (quantity strings), Ready, as a kubelet reports them."""
        self.request("PATCH", f"/api/v1/nodes/{name}/status", {"status": {
            "capacity": resources, "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "FakeNode", "message": "no kubelet: a test node"}]}},
            content_type="application/merge-patch+json")

    def create_pod(self, namespace: str, name: str, scheduler: str, cpu: str, memory: str,
                   extra: dict | None = None) -> None:
        """A pod of one container with these requests (``extra``: more, which are also its limits)."""
        resources = {"requests": {"cpu": cpu, "memory": memory, **(extra or {})}}
        if extra:
            resources["limits"] = dict(extra)
        self.request("POST", f"/api/v1/namespaces/{namespace}/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0, "containers": [{
                "name": "main", "image": "registry.k8s.io/pause:3.10", "resources": resources}]}})

    def delete_node(self, name: str) -> None:
        self.request("DELETE", f"/api/v1/nodes/{name}")

    def bind_pod(self, namespace: str, name: str, node: str) -> None:
        """Bind the pod to the node as a scheduler does: a Binding to the pod's binding subresource."""
        self.request("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/binding", {
            "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}})

    def delete_pod(self, namespace: str, name: str) -> None:
        self.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}",
                     {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})

    def pods(self, namespace: str) -> list[dict]:
        return self.request("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]

    def bindings(self, namespace: str) -> dict[str, str]:
        """pod name -> node, of the pods bound so far."""
        return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in self.pods(namespace) if p["spec"].get("nodeName")}

    def delete_pods(self, namespace: str) -> None:
        """Every pod of the namespace, at once (grace 0: there is no kubelet to confirm)."""
        for p in self.pods(namespace):
            try:
                self.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{p['metadata']['name']}",
                             {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})
            except ApiError as exc:
                if exc.status != 404:
                    raise


class Scheduler:
    """A kube-scheduler process (``binary``) on ``config`` (a KubeSchedulerConfiguration as a dict)."""

    def __init__(self, name: str, binary: Path, config: dict, plane: ControlPlane, processes: Processes):
        self.port = free_port()
        folder = plane.folder
        config = {**config, "clientConnection": {**config.get("clientConnection", {}),
                                                 "kubeconfig": str(plane.kubeconfig)}}
        path = folder / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config))
        self.processes = processes
        self.process = processes.start(name, [
            str(binary), f"--config={path}", "--bind-address=127.0.0.1", f"--secure-port={self.port}",
            f"--cert-dir={folder / (name + '-certs')}",
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics", "--v=2"], folder / f"{name}.log")
        self.context = ssl.create_default_context()
        self.context.check_hostname = False
        self.context.verify_mode = ssl.CERT_NONE  # its own self-signed serving certificate, on loopback
        if not wait_for(lambda: not self.process.running or _http_ok(f"https://127.0.0.1:{self.port}/healthz",
                                                                      self.context), deadline_s=90, every_s=0.3) \
                or not self.process.running:
            raise RuntimeError(f"{name} not healthy within 90 s:\n{self.process.tail()}")

    def metrics(self) -> str:
        req = urllib.request.Request(f"https://127.0.0.1:{self.port}/metrics")
        with urllib.request.urlopen(req, timeout=10, context=self.context) as resp:
            return resp.read().decode()

    def metric(self, name: str, **labels) -> float:
        """Sum of the samples of ``name`` whose labels include ``labels`` (0 when none)."""
        total = 0.0
        for line in self.metrics().splitlines():
            m = re.match(r"^(\w+)(?:\{(.*)\})? (\S+)$", line)
            if not m or m.group(1) != name:
                continue
            have = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
            if all(have.get(k) == v for k, v in labels.items()):
                total += float(m.group(3))
        return total

    def stop(self) -> None:
        self.processes.stop(self.process)


class Engine:
    """``td3sched serve`` as a process: gRPC and extender ports, the decision log."""

    def __init__(self, folder: Path, prom, processes: Processes, **extra):
        folder.mkdir(parents=True, exist_ok=True)
        self.folder, self.processes = folder, processes
        self.log_path = folder / "decisions.jsonl"
        self.config = {"model": str(MODEL), "grpc": {"port": 0}, "http": {"port": 0},
                       "prometheus": {"url": prom.url, "interval_s": 1.0, "queries": QUERIES},
                       "decision_log": {"path": str(self.log_path), "fsync_interval_s": 0.1}, **extra}
        self.start()

    def start(self) -> None:
        path = self.folder / "engine.yaml"
        path.write_text(yaml.safe_dump(self.config))
        ready = self.folder / "ports.json"
        ready.unlink(missing_ok=True)
        self.process = self.processes.start("engine", [sys.executable, "-m", "td3sched.cli", "serve", "--config",
                                                       str(path), "--ready-file", str(ready)],
                                            self.folder / "engine.log", env=engine_env())
        ports = wait_for(lambda: not self.process.running or (ready.exists() and json.loads(ready.read_text())),
                         deadline_s=90, every_s=0.1)
        if not ports or not self.process.running:
            raise RuntimeError(f"engine did not start:\n{self.process.tail()}")
        self.grpc_port, self.http_port = ports["grpc"], ports["http"]
        self.config["grpc"]["port"], self.config["http"]["port"] = self.grpc_port, self.http_port  # same on restart

    def wait_fresh(self, node_names: list[str]) -> None:
        """Until the engine scores every node from fresh metrics (rates need their window filled)."""
        import grpc

        from td3sched.engine.v1 import engine_pb2, engine_pb2_grpc

        with grpc.insecure_channel(f"127.0.0.1:{self.grpc_port}") as channel:
            stub = engine_pb2_grpc.DecisionEngineStub(channel)

            def fresh():
                try:
                    reply = stub.ScoreNodes(engine_pb2.ScoreNodesRequest(
                        pod=engine_pb2.Pod(name="probe", cpu_milli=100, mem_mib=100), candidates=node_names), timeout=5)
                except grpc.RpcError:
                    return False
                return not reply.fallback and not any(s.stale for s in reply.scores)
            if not wait_for(fresh, deadline_s=90, every_s=0.5):
                raise RuntimeError(f"the engine never had fresh metrics for {node_names}:\n{self.process.tail()}")

    def records(self) -> list[dict]:
        from td3sched.engine.decision_log import read_log

        return read_log(self.log_path)[0] if self.log_path.exists() else []

    def stop(self) -> None:
        self.processes.stop(self.process)


def wait_rates_settled(prom, nodes, deadline_s: float = 60.0, queries: dict | None = None) -> None:
    """Until every node's busy CPU reads what the exporter publishes (within 1%): a rate over a window
    not yet full of scrapes is extrapolated and reads a busier node than there is."""
    expected = {n.name: n.cores * n.cpu_busy for n in nodes}

    def settled():
        url = f"{prom.url}/api/v1/query?" + urllib.parse.urlencode({"query": (queries or QUERIES)["cpu_busy_cores"]})
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                result = json.loads(resp.read())["data"]["result"]
        except OSError:
            return False
        got = {r["metric"]["instance"].rsplit(":", 1)[0]: float(r["value"][1]) for r in result}
        return set(got) == set(expected) and all(abs(got[n] - v) <= 0.01 * v for n, v in expected.items())
    if not wait_for(settled, deadline_s=deadline_s, every_s=0.5):
        raise RuntimeError(f"Prometheus' CPU rates did not settle to the exporter's values within {deadline_s} s")


def shipped_config(name: str) -> dict:
    return yaml.safe_load((REPO / "scheduler" / "config" / name).read_text())


def plugin_config(engine_address: str, prom, **args) -> dict:
    """scheduler/config/td3-scheduler.yaml with the test's addresses and 1 s metrics."""
    config = shipped_config("td3-scheduler.yaml")
    plugin_args = config["profiles"][0]["pluginConfig"][0]["args"]
    plugin_args.update({"engineAddress": engine_address, "prometheusURL": prom.url, "metricsIntervalSeconds": 1,
                        "queries": QUERIES})
    plugin_args.update(args)
    return config


def extender_config(extender_url: str) -> dict:
    """scheduler/config/extender-scheduler.yaml pointing at the test's engine."""
    config = shipped_config("extender-scheduler.yaml")
    config["extenders"][0]["urlPrefix"] = extender_url
    return config


def go_available() -> str | None:
    return shutil.which("go")


def engine_env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), str(REPO),
                                                                     os.environ.get("PYTHONPATH")]))}
