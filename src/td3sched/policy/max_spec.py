"""The largest node of Alibaba's openb cluster, by which the FGD artifact's baseline scores normalise.

hkust-adsl/kubernetes-scheduler-simulator, ``pkg/type/open-gpu-share/utils/const.go``: ``MaxSpecCpu``
128000 milli-CPU, ``MaxSpecGpu`` 8000 milli-GPU (8 GPUs). ``dotprod``, ``best-fit`` and
``gpu-clustering`` divide by these, so their scores are on the same scale on every node.
"""

MAX_SPEC_CPU_MILLI = 128_000
MAX_SPEC_GPU_MILLI = 8_000
