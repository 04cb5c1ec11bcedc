"""The evaluation harness: every (policy, seed) of a scenario span, with intervals, tables, plots and
a report (``td3sched evaluate``).

``prepare`` validates the arguments, ``run_grid`` runs what is not already on disk (local processes
or Ray, resumable), ``write_reports`` writes summary.md/.csv, vs-default.md, head-to-head.md
(each learned policy against every other, when the grid has one), plots/ and report.md/.html from the
run records.
"""

from td3sched.evaluate.grid import GridError, GridResult, GridSpec, Task, prepare, run_grid
from td3sched.evaluate.report import write_reports

__all__ = ["GridError", "GridResult", "GridSpec", "Task", "prepare", "run_grid", "write_reports"]
