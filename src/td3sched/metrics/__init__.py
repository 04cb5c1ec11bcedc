"""What a run is judged by: fragmentation, utilisation, latency, OOM kills, SLA violations."""
