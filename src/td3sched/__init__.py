"""td3-scheduler: a learned Kubernetes scheduler.

The package follows the data: ``trace`` (raw production traces) -> ``workload`` (pod streams with
usage profiles) -> ``scenario`` (cluster + workload, by name) -> ``simulator`` (the cluster and its
metrics pipeline) -> ``policy`` (node scores) -> ``metrics`` (what a run is judged by).
"""

__version__ = "0.1.0"
