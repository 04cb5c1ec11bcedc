"""openb pod/node loader tests.

Excerpts adapted from alibaba/clusterdata cluster-trace-gpu-v2023 (Alibaba Group, published for
research or study purpose; Weng et al., USENIX ATC 2023).
"""

import numpy as np
import pytest

from td3sched.trace import TraceError, load_openb_nodes, load_openb_pods

POD_HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
              "deletion_time,scheduled_time")
PODS = [
    "openb-pod-0000,12000,16384,1,1000,,LS,Running,0,12537496,0",
    "openb-pod-0001,6000,12288,1,460,,LS,Running,427061,12902960,427061",
    "openb-pod-0035,16000,32768,1,1000,V100M16|V100M32,BE,Pending,9967058,9968575,",
]
NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"
NODES = ["openb-node-0000,32000,262144,0,", "openb-node-0228,128000,786432,8,G3"]


def text(header, rows):
    return "\n".join([header, *rows]) + "\n"


def test_pods_canonical(write):
    t = load_openb_pods(write("pods.csv", text(POD_HEADER, PODS)))
    f = t.frame
    assert list(f.columns) == ["name", "cpu_milli", "mem_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos",
                               "phase", "creation_s", "deletion_s", "scheduled_s"]
    assert list(f["mem_mib"]) == [16384, 12288, 32768]
    assert f["gpu_spec"].isna().tolist() == [True, True, False] and f["gpu_spec"].iloc[2] == "V100M16|V100M32"
    assert np.isnan(f["scheduled_s"].iloc[2])


@pytest.mark.parametrize(
    "row, column, value, reason",
    [
        ("openb-pod-0001,abc,12288,1,460,,LS,Running,427061,12902960,427061", "cpu_milli", "abc",
         "non-numeric cpu_milli"),
        ("openb-pod-0001,-6000,12288,1,460,,LS,Running,427061,12902960,427061", "cpu_milli", "-6000",
         "negative cpu_milli"),
        ("openb-pod-0001,6000,12288,1,460,,XX,Running,427061,12902960,427061", "qos", "XX", "unexpected qos"),
        ("openb-pod-0001,6000,12288,1,460,,LS,Running,427061,400000,427061", "deletion_time", "400000",
         "deletion before creation"),
    ],
)
def test_pods_malformed(write, row, column, value, reason):
    path = write("openb_pod_list_default.csv", text(POD_HEADER, [PODS[0], row, PODS[2]]))
    with pytest.raises(TraceError) as exc:
        load_openb_pods(path)
    err = exc.value
    assert (err.line, err.column, err.value) == (3, column, value)
    assert str(err).startswith(f"openb_pod_list_default.csv line 3, column '{column}': got '{value}', expected ")
    t = load_openb_pods(path, lenient=True)
    assert list(t.frame["name"]) == ["openb-pod-0000", "openb-pod-0035"]
    assert t.skipped.skipped == {reason: 1}


def test_pods_missing_column(write):
    path = write("pods.csv", text(POD_HEADER.replace("qos", "q0s"), PODS))
    with pytest.raises(TraceError) as exc:
        load_openb_pods(path)
    assert exc.value.line == 1 and exc.value.column == "qos" and "q0s" in str(exc.value)


def test_nodes(write):
    f = load_openb_nodes(write("nodes.csv", text(NODE_HEADER, NODES))).frame
    assert list(f.columns) == ["sn", "cpu_milli", "mem_mib", "gpu", "model"]
    assert f["model"].isna().tolist() == [True, False]
    path = write("nodes_bad.csv", text(NODE_HEADER, [NODES[0], "openb-node-0228,0,786432,8,G3"]))
    with pytest.raises(TraceError, match=r"nodes_bad.csv line 3, column 'cpu_milli': got '0', expected an integer >= 1"):
        load_openb_nodes(path)
    assert load_openb_nodes(path, lenient=True).skipped.skipped == {"cpu_milli out of range": 1}


def test_real_pods(traces):
    t = load_openb_pods()
    f = t.frame
    assert len(f) == 8_152 and t.skipped.count == 0
    assert f["qos"].value_counts().to_dict() == {"LS": 4_647, "BE": 3_398, "Burstable": 100, "Guaranteed": 7}
    assert (f["num_gpu"] == 0).sum() == 1_088
    assert (f["deletion_s"] >= f["creation_s"]).all()


def test_real_nodes(traces):
    f = load_openb_nodes().frame
    assert len(f) == 1_523
    assert (f["gpu"] == 0).sum() == 310
    assert f["cpu_milli"].min() == 8_000 and f["cpu_milli"].max() == 128_000
    assert f["mem_mib"].min() == 32 * 1024 and f["mem_mib"].max() == 1024 * 1024
    assert len(load_openb_nodes(traces / "alibaba-gpu-v2023/openb_node_list_gpu_node.csv")) == 1_213
