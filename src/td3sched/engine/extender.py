"""kube-scheduler's HTTP extender on the engine (``k8s.io/kube-scheduler/extender/v1``).

Those Go types have no json tags, so the wire names are the Go field names:

    POST /filter      ExtenderArgs {"Pod", "Nodes", "NodeNames"} -> ExtenderFilterResult
                      {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
    POST /prioritize  ExtenderArgs -> HostPriorityList [{"Host", "Score"}], Score in 0-10
                      (MaxExtenderPriority; the scheduler multiplies by 10 x the extender's weight)

Both ``nodeCacheCapable`` modes: a scheduler with ``nodeCacheCapable: true`` sends ``NodeNames`` (and
``Nodes`` null) and gets ``NodeNames`` back; otherwise it sends the full v1.NodeList in ``Nodes``
and gets the passing items back in ``Nodes``. /filter applies the safety filter, under fail-closed
staleness drops stale nodes and, when the served model declares a hold-back ceiling, fails the nodes
the pod's action holds back, naming the reason per failed node in ``FailedNodes`` (a pod with none
left waits in kube-scheduler's queue).
/prioritize is the engine's decision scaled to 0-10 (``Decision.answer``), the best-scored nodes alone at
the top (rounding would tie them with every node within a tenth of their score, among which kube-scheduler
would pick at random); in shadow mode it decides and logs but answers every node with the
neutral score.

Also ``/healthz`` (the process answers), ``/readyz`` (the shadow state has metrics), ``/metrics``.

Bad input gets a 400 whose body names the field (for /filter, an ExtenderFilterResult whose
``Error`` says it), never a crash: bodies over ``max_body_bytes`` get 413, a body without
Content-Length 411, a client that stalls longer than ``read_timeout_s`` is disconnected.
"""

from __future__ import annotations

import json
import logging
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from td3sched.engine.decision import NEUTRAL_SCORE
from td3sched.engine.kubernetes_objects import node_names_from_list, pod_from_k8s
from td3sched.engine.service import EngineService
from td3sched.engine.state import NotReady

log = logging.getLogger("td3sched.engine.extender")
MAX_EXTENDER_PRIORITY = 10
PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def parse_args(body: bytes) -> tuple[dict, list[str], bool]:
    """(ExtenderArgs, candidate names, node-cache-capable) or ValueError naming the field."""
    try:
        args = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"body: not JSON ({exc})") from None
    if not isinstance(args, dict):
        raise ValueError(f"body: expected an ExtenderArgs object, got {type(args).__name__}")
    unknown = sorted(set(args) - {"Pod", "Nodes", "NodeNames"})
    if unknown:
        raise ValueError(f"body: unknown fields {unknown}: expected Pod, Nodes, NodeNames")
    nodes, names = args.get("Nodes"), args.get("NodeNames")
    if names is not None:
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise ValueError("NodeNames: expected a list of node names")
        return args, names, True
    if nodes is None:
        raise ValueError("Nodes, NodeNames: both null: expected the candidate nodes in one of them")
    return args, node_names_from_list(nodes), False


class ExtenderHandler(BaseHTTPRequestHandler):
    server_version = "td3sched-extender"
    protocol_version = "HTTP/1.1"
    # headers and body leave in two writes: with Nagle's algorithm the body waits for the client's
    # delayed ACK of the headers, 40 ms per response on a kept-alive connection (kube-scheduler's)
    disable_nagle_algorithm = True
    service: EngineService
    max_body_bytes: int
    timeout: float

    def log_message(self, format, *args):  # noqa: A002  (quiet: the metrics count requests)
        pass

    def _send(self, status: int, payload, content_type: str = "application/json") -> None:
        body = payload if isinstance(payload, bytes) else json.dumps(payload, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/healthz":
            self._send(200, b"ok\n", "text/plain")
        elif self.path == "/readyz":
            ready = self.service.ready
            self._send(200 if ready else 503, b"ok\n" if ready else b"no node metrics yet\n", "text/plain")
        elif self.path == "/metrics":
            self._send(200, self.service.metrics.exposition(), PROMETHEUS_CONTENT_TYPE)
        else:
            self._send(404, {"Error": f"no such path {self.path!r}: expected /filter, /prioritize, /healthz, "
                                      "/readyz, /metrics"})

    def _body(self) -> bytes | None:
        length = self.headers.get("Content-Length")
        if length is None:
            self._send(411, {"Error": "Content-Length: missing"})
            return None
        try:
            n = int(length)
        except ValueError:
            self._send(400, {"Error": f"Content-Length: {length!r}: expected a number"})
            return None
        if n < 0 or n > self.max_body_bytes:
            self.close_connection = True
            self._send(413, {"Error": f"body: {n} bytes, expected at most {self.max_body_bytes}"})
            return None
        return self.rfile.read(n)

    def do_POST(self):
        api = {"/filter": "filter", "/prioritize": "prioritize"}.get(self.path)
        if api is None:
            self._send(404, {"Error": f"no such path {self.path!r}: expected POST /filter or /prioritize"})
            return
        body = self._body()
        if body is None:
            self.service.rejected(api, "400")
            return
        try:
            args, names, cache_capable = parse_args(body)
            pod = pod_from_k8s(args.get("Pod"))
            status, payload = 200, (self._filter(args, names, cache_capable, pod) if api == "filter"
                                    else self._prioritize(pod, names))
        except NotReady as exc:
            self.service.rejected(api, "503")
            status, payload = 503, {"Error": str(exc)} if api == "filter" else {"Error": str(exc)}
        except ValueError as exc:
            self.service.rejected(api, "400")
            status, payload = 400, {"Error": str(exc)}
        self._send(status, payload)

    def _filter(self, args: dict, names: list[str], cache_capable: bool, pod) -> dict:
        failed = self.service.filter(names, pod)
        passing = [n for n in names if n not in failed]
        result = {"Nodes": None, "NodeNames": None, "FailedNodes": failed, "FailedAndUnresolvableNodes": {},
                  "Error": ""}
        if cache_capable:
            result["NodeNames"] = passing
        else:
            keep = set(passing)
            node_list = dict(args["Nodes"])
            node_list["items"] = [item for item in node_list.get("items") or [] if item["metadata"]["name"] in keep]
            result["Nodes"] = node_list
        return result

    def _prioritize(self, pod, names: list[str]) -> list[dict]:
        if not names:
            return []
        _, d = self.service.score_nodes(pod, names, api="prioritize")
        if d.advisory:
            neutral = int(round(NEUTRAL_SCORE * MAX_EXTENDER_PRIORITY))
            return [{"Host": n, "Score": neutral} for n in names]
        return [{"Host": n, "Score": s} for n, s in zip(names, d.answer(MAX_EXTENDER_PRIORITY).tolist())]


class ExtenderServer(ThreadingHTTPServer):
    """Threads per connection; with TLS, the handshake runs in the connection's thread under the read
    timeout, so a client that stalls in the handshake holds up no one else."""

    daemon_threads = True
    ssl_context = None
    handshake_timeout_s = 5.0

    def finish_request(self, request, client_address):
        if self.ssl_context is not None:
            request.settimeout(self.handshake_timeout_s)
            request = self.ssl_context.wrap_socket(request, server_side=True)
        super().finish_request(request, client_address)

    def handle_error(self, request, client_address):
        """A failed handshake or a dropped client is routine; anything else is logged with its trace."""
        exc = sys.exc_info()[1]
        if isinstance(exc, (ssl.SSLError, ConnectionError, TimeoutError)):
            log.debug("extender: connection from %s ended: %s", client_address, exc)
        else:
            log.exception("extender: request from %s failed", client_address)


class ExtenderFrontDoor:
    """A started HTTP extender; ``port`` is the bound one."""

    def __init__(self, service: EngineService, address: str = "127.0.0.1", port: int = 0,
                 max_body_bytes: int = 8 << 20, read_timeout_s: float = 5.0, ssl_context=None):
        handler = type("Handler", (ExtenderHandler,), {"service": service, "max_body_bytes": max_body_bytes,
                                                      "timeout": read_timeout_s})
        self.httpd = ExtenderServer((address, port), handler)
        self.httpd.ssl_context = ssl_context
        self.httpd.handshake_timeout_s = read_timeout_s
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="extender", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop accepting; requests being handled finish on their own threads."""
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join()
