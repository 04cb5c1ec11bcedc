import pickle
from pathlib import Path

from td3sched.trace.errors import SkipReport, TraceError


def test_trace_error_message_and_attributes():
    err = TraceError(Path("/x/y/openb_pod_list_default.csv"), 17, "cpu_milli", "abc", "a non-negative number")
    assert str(err) == "openb_pod_list_default.csv line 17, column 'cpu_milli': got 'abc', expected a non-negative number"
    assert isinstance(err, ValueError)
    assert (err.path.name, err.line, err.column, err.value, err.expected) == (
        "openb_pod_list_default.csv", 17, "cpu_milli", "abc", "a non-negative number")
    again = pickle.loads(pickle.dumps(err))
    assert str(again) == str(err) and again.line == 17


def test_skip_report_summary():
    rep = SkipReport(path=Path("X"), total_rows=8152)
    assert rep.count == 0
    assert rep.summary() == "skipped 0 of 8152 rows of X"
    rep.add("deletion before creation")
    rep.add("non-numeric cpu_milli", 2)
    rep.add("negative cpu_milli", 0)
    assert rep.count == 3
    assert rep.skipped == {"deletion before creation": 1, "non-numeric cpu_milli": 2}
    assert rep.summary() == "skipped 3 of 8152 rows of X: 2 non-numeric cpu_milli, 1 deletion before creation"
