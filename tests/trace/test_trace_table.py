import numpy as np
import pytest

from td3sched.trace.table import Column, check_rows, finish, read_table
from td3sched.trace.errors import TraceError

COLS = [
    Column("name", "str"),
    Column("n", "int", nonnegative=True),
    Column("x", "float", lower=0, upper=100, nullable=True),
    Column("kind", "str", choices=frozenset({"A", "B"})),
]
GOOD = "name,n,x,kind,extra\na,1,0.5,A,z\nb,2,,B,z\nc,3,100,A,z\n"


def test_reads_types_and_line_index(write):
    frame, rep = read_table(write("t.csv", GOOD), COLS)
    assert list(frame.columns) == ["name", "n", "x", "kind"]
    assert frame["n"].dtype == np.int64 and frame["x"].dtype == np.float64
    assert frame.index.name == "line" and list(frame.index) == [2, 3, 4]
    assert np.isnan(frame["x"].iloc[1])
    assert rep.count == 0 and rep.total_rows == 3
    assert list(finish(frame, {"n": "count"}).columns) == ["name", "count", "x", "kind"]


def test_missing_column_names_column_and_found(write):
    path = write("t.csv", "name,x,kind\na,1,A\n")
    with pytest.raises(TraceError) as exc:
        read_table(path, COLS, lenient=True)  # a missing column fails even when lenient
    err = exc.value
    assert err.line == 1 and err.column == "n" and err.value == ["name", "x", "kind"]
    assert "t.csv line 1, column 'n'" in str(err) and "'kind'" in str(err)


@pytest.mark.parametrize(
    "cell_row, column, value, reason",
    [
        ("b,abc,1,A", "n", "abc", "non-numeric n"),
        ("b,-2,1,A", "n", "-2", "negative n"),
        ("b,2.5,1,A", "n", "2.5", "non-integer n"),
        ("b,,1,A", "n", "", "missing n"),
        ("b,2,101,A", "x", "101", "x out of range"),
        ("b,2,inf,A", "x", "inf", "non-numeric x"),
        ("b,2,1,C", "kind", "C", "unexpected kind"),
        (",2,1,A", "name", "", "missing name"),
    ],
)
def test_bad_cell_strict_and_lenient(write, cell_row, column, value, reason):
    path = write("bad.csv", f"name,n,x,kind\na,1,1,A\n{cell_row}\nc,3,3,B\n")
    with pytest.raises(TraceError) as exc:
        read_table(path, COLS)
    err = exc.value
    assert (err.path.name, err.line, err.column, err.value) == ("bad.csv", 3, column, value)
    assert f"bad.csv line 3, column '{column}': got '{value}'" in str(err)
    frame, rep = read_table(path, COLS, lenient=True)
    assert list(frame["name"]) == ["a", "c"] and list(frame.index) == [2, 4]
    assert rep.skipped == {reason: 1} and rep.total_rows == 3


def test_strict_reports_first_bad_row_in_file_order(write):
    path = write("t.csv", "name,n,x,kind\na,1,1,A\nb,1,1,Z\nc,-1,1,A\n")
    with pytest.raises(TraceError) as exc:
        read_table(path, COLS)
    assert exc.value.line == 3 and exc.value.column == "kind"


def test_wrong_field_count_and_blank_lines(write):
    path = write("t.csv", "name,n,x,kind\na,1,1,A\nb,1,1,A,9,9\n\nc,2,2,B\n\n\n")
    with pytest.raises(TraceError) as exc:
        read_table(path, COLS)
    assert exc.value.line == 3 and "4 fields" in str(exc.value)
    frame, rep = read_table(path, COLS, lenient=True)
    assert list(frame["name"]) == ["a", "c"] and list(frame.index) == [2, 5]  # trailing blanks ignored
    assert rep.skipped == {"wrong number of fields": 1, "blank line": 1}
    with pytest.raises(TraceError) as exc:
        read_table(write("u.csv", "name,n,x,kind\na,1,1,A\n\nc,2,2,B\n"), COLS)
    assert exc.value.line == 3 and "blank line" in str(exc.value)


def test_headerless_lines_start_at_one(write):
    cols = [Column("id", "str"), Column("v", "float", nonnegative=True)]
    path = write("h.csv", "m1,1\nm2,x\n")
    with pytest.raises(TraceError) as exc:
        read_table(path, cols, header=False, names=["id", "v"])
    assert exc.value.line == 2 and exc.value.column == "v"
    with pytest.raises(TraceError) as exc:
        read_table(write("h2.csv", "m1,1\nm2,2,3\n"), cols, header=False, names=["id", "v"])
    assert exc.value.line == 2


def test_empty_file(write):
    with pytest.raises(TraceError, match="empty file"):
        read_table(write("e.csv", ""), COLS)


def test_check_rows_strict_and_lenient(write):
    cols = [Column("a", "float"), Column("b", "float", nullable=True)]
    frame, rep = read_table(write("c.csv", "a,b\n1,2\n5,3\n4,\n7,6\n"), cols)
    bad = frame["b"] < frame["a"]
    with pytest.raises(TraceError) as exc:
        check_rows(frame, bad, rep, column="b", expected="b >= a", reason="b below a", lenient=False)
    assert (exc.value.line, exc.value.column, exc.value.value) == (3, "b", "3")
    kept = check_rows(frame, bad, rep, column="b", expected="b >= a", reason="b below a", lenient=True)
    assert list(kept.index) == [2, 4]  # the NaN row passes: comparisons with NaN are False
    assert rep.skipped == {"b below a": 2}
    assert "skipped 2 of 4 rows of c.csv: 2 b below a" == rep.summary()


def test_column_expected_text():
    assert Column("c", "float", nonnegative=True).expected == "a non-negative number"
    assert Column("c", "int", lower=1).expected == "an integer >= 1"
    assert Column("c", "float", lower=0, upper=100, nullable=True).expected == "a number in [0, 100] or empty"
    assert Column("c", "str", choices={"B", "A"}).expected == "one of 'A', 'B'"
    with pytest.raises(ValueError):
        Column("c", "double")
