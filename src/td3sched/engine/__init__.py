"""The decision engine: the trained policy as a service a kube-scheduler calls for every pod.

The simulator, the gRPC server and the HTTP extender are three front doors to the same rooms: the
observation (``rl.observation``), the action decoding (``rl.actions``), the score
(``policy.static_weights.weighted_closeness``), the assign cache (``policy.assign_cache``) and the
safety filter (``simulator.filter.safety_ok``) are imported here, never copied. The data path:

    prometheus_source.py  node_exporter metrics through PromQL, refreshed in the background
    simulator_source.py   the same state filled from a running simulation
    state.py              the shadow state: node snapshot, assign cache, staleness
    decision.py           pod + candidates -> observation -> action (ONNX, or the fallback) -> scores
    decision_log.py       every decision, append-only and crash-safe
    metrics.py            the engine's Prometheus metrics
    service.py            one decision path behind every front door: decide, count, log, time
    grpc_server.py        ScoreNodes, GetSchedulingWeights, ReportBinding, health (proto/)
    extender.py           kube-scheduler's HTTP extender: /filter, /prioritize, /healthz, /readyz, /metrics
    config.py             engine.yaml, validated
    serve.py              td3sched serve: sources, servers, hot reload, SIGTERM drain

gRPC, prometheus_client and grpcio-tools come with ``pip install 'td3sched[engine]'``.
"""
