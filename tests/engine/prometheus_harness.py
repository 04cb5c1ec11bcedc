"""A real Prometheus for the tests (Debian's ``prometheus`` package, installed with apt-get when
missing and the tests run as root) scraping ``NodeExporterStub``: node_exporter-format metrics for
simulated nodes, one ``instance`` label per node (scraped with honor_labels, as from a federation)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

MIB = 2**20


def ensure_prometheus() -> str:
    """The prometheus binary's path; installs Debian's package if missing, skips if that cannot be done."""
    path = shutil.which("prometheus")
    if path:
        return path
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("prometheus is not installed and apt-get cannot install it here (not root, or no apt-get)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "prometheus"]):
        result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if result.returncode != 0:
            pytest.skip(f"cannot install prometheus: {' '.join(cmd)} failed: {result.stderr.strip()[-300:]}")
    path = shutil.which("prometheus")
    if not path:
        pytest.skip("apt-get installed the prometheus package but no prometheus binary is on PATH")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SimulatedNode:
    def __init__(self, name: str, cores: int, cpu_busy: float, mem_gib: float, mem_used: float,
                 disk_busy: float = 0.1, net_bytes_per_s: float = 1e6, speed_bytes: float = 1.25e9):
        self.name, self.cores, self.cpu_busy = name, cores, cpu_busy
        self.mem_bytes, self.mem_used = mem_gib * 1024 * MIB, mem_used
        self.disk_busy, self.net_bytes_per_s, self.speed_bytes = disk_busy, net_bytes_per_s, speed_bytes
        self.oom_kills = 0

    def exposition(self, elapsed_s: float, stamp_ms: int) -> str:
        """The node's metrics ``elapsed_s`` after the exporter started, each sample stamped with
        ``stamp_ms``, the moment its value stands for: Prometheus then computes rates from the
        exporter's own clock, exact however late a scrape runs on a busy machine."""
        inst = f'instance="{self.name}:9100"'
        lines = []
        for cpu in range(self.cores):  # counters grow at the configured rates since the exporter started
            lines.append(f'node_cpu_seconds_total{{{inst},cpu="{cpu}",mode="idle"}} {(1 - self.cpu_busy) * elapsed_s:.6f}')
            lines.append(f'node_cpu_seconds_total{{{inst},cpu="{cpu}",mode="user"}} {self.cpu_busy * elapsed_s:.6f}')
        lines += [
            f"node_memory_MemTotal_bytes{{{inst}}} {self.mem_bytes:.0f}",
            f"node_memory_MemAvailable_bytes{{{inst}}} {self.mem_bytes * (1 - self.mem_used):.0f}",
            f'node_disk_io_time_seconds_total{{{inst},device="sda"}} {self.disk_busy * elapsed_s:.6f}',
            f'node_network_receive_bytes_total{{{inst},device="eth0"}} {self.net_bytes_per_s / 2 * elapsed_s:.3f}',
            f'node_network_transmit_bytes_total{{{inst},device="eth0"}} {self.net_bytes_per_s / 2 * elapsed_s:.3f}',
            f'node_network_receive_bytes_total{{{inst},device="lo"}} {1e9 * elapsed_s:.3f}',
            f'node_network_speed_bytes{{{inst},device="eth0"}} {self.speed_bytes:.0f}',
            f"node_vmstat_oom_kill{{{inst}}} {self.oom_kills}",
        ]
        return "".join(f"{line} {stamp_ms}\n" for line in lines)


class NodeExporterStub:
    """Serves /metrics for ``nodes`` on 127.0.0.1 (change the list to add or drop nodes)."""

    def __init__(self, nodes: list[SimulatedNode]):
        self.nodes = nodes
        self.started = time.time()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                now = time.time()
                body = "".join(n.exposition(now - stub.started, int(now * 1000)) for n in list(stub.nodes)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class PrometheusServer:
    """A Prometheus process scraping ``target`` every ``scrape_interval_s`` (1 s), on a loopback port, data in ``folder``."""

    def __init__(self, binary: str, folder, target: str, port: int | None = None, scrape_interval_s: int = 1):
        self.binary, self.folder, self.target = binary, folder, target
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        (folder / "prometheus.yml").write_text(
            f"global:\n  scrape_interval: {scrape_interval_s}s\n  evaluation_interval: {scrape_interval_s}s\n"
            "scrape_configs:\n  - job_name: nodes\n    honor_labels: true\n"
            f"    static_configs:\n      - targets: ['{target}']\n")
        self.proc: subprocess.Popen | None = None

    def start(self, deadline_s: float = 60.0) -> None:
        self.log = open(self.folder / "prometheus.log", "ab")
        self.proc = subprocess.Popen(
            [self.binary, f"--config.file={self.folder / 'prometheus.yml'}", f"--storage.tsdb.path={self.folder / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"], stdout=self.log, stderr=subprocess.STDOUT)
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.proc.returncode}: see {self.folder / 'prometheus.log'}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"prometheus not ready within {deadline_s} s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None:
            self.log.close()


def wait_for(predicate, deadline_s: float = 60.0, every_s: float = 0.5):
    """Poll ``predicate`` until it returns something truthy (returned) or the deadline passes (None)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(every_s)
    return None
