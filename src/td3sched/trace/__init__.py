"""Raw production traces -> validated pandas DataFrames with canonical column names and units.

Each loader takes ``path=None`` (the shared copy under :func:`traces_dir`) and ``lenient=False``:
strict loads raise :class:`TraceError` naming the file, line, column and value of the first bad row;
lenient loads drop bad rows and count them by reason in ``.skipped`` (a :class:`SkipReport`).
Attributions for every trace are in the loader modules' docstrings (and in the traces' MANIFEST.md).
"""

from .aggregates import daily_shape
from .alibaba2018 import MachineMeta, MachineUsage, load_machine_meta, load_machine_usage
from .bitbrains import VmProfiles, VmTrace, default_cache_dir, load_profiles, load_vm
from .dlrm import DlrmTrace, load_dlrm
from .errors import SkipReport, TraceError
from .location import traces_dir
from .openb import OpenbNodes, OpenbPods, load_openb_nodes, load_openb_pods
from .table import Column, TraceTable, check_rows, read_table

__all__ = [
    "Column",
    "DlrmTrace",
    "MachineMeta",
    "MachineUsage",
    "OpenbNodes",
    "OpenbPods",
    "SkipReport",
    "TraceError",
    "TraceTable",
    "VmProfiles",
    "VmTrace",
    "check_rows",
    "daily_shape",
    "default_cache_dir",
    "load_dlrm",
    "load_machine_meta",
    "load_machine_usage",
    "load_openb_nodes",
    "load_openb_pods",
    "load_profiles",
    "load_vm",
    "read_table",
    "traces_dir",
]
