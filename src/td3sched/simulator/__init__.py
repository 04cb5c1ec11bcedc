"""The trace-driven cluster simulator: nodes, the metrics pipeline, OOM, autoscaler, latency."""
