"""Scheduling history: one row per decision, one versioned Parquet schema for every source.

A decision is a pod, the candidate nodes the scorer saw (with the features the product's score reads),
and the node the pod went to. Three sources write the same schema: the simulator under any policy
(``td3sched simulate --record-history DIR``, ``lifecycle.record``), the engine's decision log
(``lifecycle.engine_log``), and later a cluster's own bindings. The learning lifecycle reads it:
behaviour cloning (``lifecycle.bc``) and fine-tuning.

Schema ``SCHEMA_VERSION`` 6 (docs/lifecycle.md has the table with units and meanings):

    schema_version  int16     6
    source          string    simulator | engine | import
    decision_id     string    unique within its file
    time_s          float64   simulated seconds (simulator) or Unix seconds (engine)
    scenario, seed  string, int64 (null outside the simulator)
    policy          string    the policy spec that decided (the engine: "engine")
    pod_name, pod_namespace, workload   string (workload: the app; null when unknown)
    qos             int8      0 Guaranteed, 1 Burstable, 2 BestEffort
    cpu_milli, mem_mib, disk_gib, rdma_pct   float64   requests
    gpu_count, gpu_milli                     int32
    cpu_limit_milli, mem_limit_mib           float64   null: no limit
    observation     list<float32>   the 35-value observation (rl.observation), null when unknown
    candidates      list<struct<node string, u_cpu, u_mem, u_io, u_net float64, stale bool, score float64,
                                r_cpu, r_mem float64, weight float64>>
                    u: utilisation with the pod on the node (policy.features.utilisation), null when stale;
                    score: what the deciding policy gave the node (its own scale), null when unknown;
                    r: CPU and memory requested with the pod on the node over its allocatable
                    (policy.features.requested_utilisation), null when unknown;
                    weight: how many of the decision's candidates this one stands for (1: itself; null
                    reads as 1), see "Candidates kept" below
    candidates_total int32    the candidates the decision had, kept or not (null: all are kept)
    chosen_node     string    the node the pod was bound to, null when not known
    chosen_index    int32     its index in candidates, null when it is not among them
    model_version   string    the model's short content hash, null without a model
    action          list<float64>   the actor's pre-activations, null without a model
    weights         list<float64>   the score's weights [cpu, mem, io, net], null when the policy has none
    tau             float64   the score's target utilisation, null when the policy has none
    wait_s          float64   seconds the pod waited in the scheduling queue before this decision bound
                              it (the pending term's part of its life); null when not known
    outcome_left_s  float64   when the pod left the node (departure, eviction); null: still
                              there when the record ended, or not known (filled after the decision)
    outcome         string    why it left: departure (it ran to its end), evicted:scale_down,
                              evicted:memory_pressure (policy.base.RELEASE_REASONS); null as outcome_left_s
    outcome_kills   int32     kills of its container while on the node (its memory limit or the node's
                              OOM killer; each one restarts it there); null when not known
    outcome_overload_h  float64   hours its node's real CPU was above the objective's overload threshold
                              (reward.py, 85%) while the pod was on it, counted at the simulator's ticks;
                              null as outcome_kills
    outcome_slo_h   float64   hours a latency-sensitive pod spent above its latency SLO while on the node
                              (its samples above it, and those it served at the cap waiting for a
                              container restart: the objective's slo_hour term), 0 for any other pod;
                              null as outcome_kills
    outcome_node_slo_h  float64   hours the latency-sensitive pods on the node (the pod included) spent above
                              their SLO while the pod was on it: its own part of the node's tail and its
                              neighbours'; null as outcome_kills
    reward          float64   the decision's reward (reward.py: minus the cluster's cost until the next
                              decision, over the maximum node count); null when not known
    elapsed_s       float64   seconds from the decision to the next one (the reward's period); null
                              when not known

The file's Arrow schema metadata holds ``td3sched.history.schema_version``; a reader refuses a file
of an unknown version, or one missing a column, naming the file and what was expected. Version 1 files
(without ``outcome`` and ``outcome_kills``) are read with those columns null, files before version
3 with the candidates' ``r_cpu`` and ``r_mem`` null, and files before version 4 with ``wait_s``,
``outcome_overload_h`` and ``outcome_slo_h`` null, files before version 5 with ``outcome_node_slo_h``
null, and files before version 6 with ``candidates_total`` and the candidates' ``weight`` null. A history
is a folder of such files (or one file): ``read_history`` reads them all, in name order.

Candidates kept (``sample_candidates``): a decision over a large cluster scores thousands of nodes, and a
day of dlrm's decisions with all of theirs runs to gigabytes. A writer keeps at most ``candidates`` of a
decision's (default ``DEFAULT_CANDIDATES``; 0 keeps all): the chosen node; the others the deciding policy scored
best, up to half of what is kept (the near misses, which a clone must rank below the chosen one); and a
uniform sample of the rest, each with ``weight`` the rest's count over the sample's, so that a sum over
the candidates kept, weighted, estimates the sum over all of them without bias (the sampled softmax of
``lifecycle.bc``, the usage sums of ``lifecycle.rebuild``). The sample is drawn from the decision's id
and the writer's ``seed``: the same decisions give the same file.
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA_VERSION = 6
ADDED_IN = {"outcome": 2, "outcome_kills": 2, "wait_s": 4, "outcome_overload_h": 4, "outcome_slo_h": 4,
            "outcome_node_slo_h": 5, "candidates_total": 6}
"""Columns added after version 1, by the version that added them: an older file reads them as null."""
VERSION_KEY = b"td3sched.history.schema_version"
SOURCES = ("simulator", "engine", "import")
QOS_NAMES = ("Guaranteed", "Burstable", "BestEffort")
U_FIELDS = ("u_cpu", "u_mem", "u_io", "u_net")
R_FIELDS = ("r_cpu", "r_mem")
ROWS_PER_GROUP = 4096
"""Decisions per Parquet row group (what a writer holds in memory before it writes)."""
CANDIDATES_PER_GROUP = 1 << 18
"""A row group is written once it holds this many candidates, whatever its rows (a decision over thousands
of nodes is thousands of candidate records): the writer's buffer stays some hundred megabytes."""
DEFAULT_CANDIDATES = 100
"""Candidates a writer keeps of a decision at most (module docstring, "Candidates kept"): as many as
kube-scheduler scores at least (``minFeasibleNodesToFind``, 100) when ``percentageOfNodesToScore`` tells it
to score only some of a large cluster's nodes. tiny's and dlrm-small's decisions (at most 169 nodes) keep
all or most of theirs; dlrm's (up to 3,380 nodes) as few as a thirtieth."""

CANDIDATE_V2 = pa.struct([
    ("node", pa.string()),
    *((name, pa.float64()) for name in U_FIELDS),
    ("stale", pa.bool_()),
    ("score", pa.float64()),
])
"""A candidate of versions 1 and 2."""
CANDIDATE_V5 = pa.struct([*CANDIDATE_V2, *((name, pa.float64()) for name in R_FIELDS)])
"""A candidate of versions 3 to 5."""
CANDIDATE = pa.struct([*CANDIDATE_V5, ("weight", pa.float64())])


def candidate_lists(rows: list[CandidateArrays]) -> pa.ListArray:
    """The candidates column of ``rows``, one list a row: the records ``CandidateArrays.rows`` makes, built
    from the arrays whole (a dict a candidate costs more than the rest of a recorded decision)."""
    names = np.concatenate([np.asarray(c.names).astype(str) for c in rows])
    u = np.concatenate([np.asarray(c.u, dtype=np.float64).reshape(-1, len(U_FIELDS)) for c in rows])
    r = np.concatenate([np.asarray(c.r, dtype=np.float64).reshape(-1, len(R_FIELDS)) for c in rows])
    scores = np.concatenate([np.asarray(c.scores, dtype=np.float64) for c in rows])
    weight = np.concatenate([np.zeros(len(c)) if c.weight is None else np.asarray(c.weight, dtype=np.float64)
                             for c in rows])
    unweighted = np.concatenate([np.full(len(c), c.weight is None) for c in rows])
    columns = [pa.array(names, pa.string()), *(pa.array(u[:, j]) for j in range(len(U_FIELDS))),
               pa.array(np.zeros(len(names), dtype=bool)), pa.array(scores),
               *(pa.array(r[:, j]) for j in range(len(R_FIELDS))), pa.array(weight, mask=unweighted)]
    offsets = np.concatenate([[0], np.cumsum([len(c) for c in rows])]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.StructArray.from_arrays(columns, fields=list(CANDIDATE)))


def candidate_type(version: int) -> pa.StructType:
    """The candidates' struct in files of schema ``version``."""
    return CANDIDATE_V2 if version < 3 else CANDIDATE_V5 if version < 6 else CANDIDATE

SCHEMA = pa.schema([
    pa.field("schema_version", pa.int16(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("decision_id", pa.string(), nullable=False),
    pa.field("time_s", pa.float64(), nullable=False),
    pa.field("scenario", pa.string()),
    pa.field("seed", pa.int64()),
    pa.field("policy", pa.string()),
    pa.field("pod_name", pa.string(), nullable=False),
    pa.field("pod_namespace", pa.string()),
    pa.field("workload", pa.string()),
    pa.field("qos", pa.int8(), nullable=False),
    pa.field("cpu_milli", pa.float64(), nullable=False),
    pa.field("mem_mib", pa.float64(), nullable=False),
    pa.field("disk_gib", pa.float64(), nullable=False),
    pa.field("rdma_pct", pa.float64(), nullable=False),
    pa.field("gpu_count", pa.int32(), nullable=False),
    pa.field("gpu_milli", pa.int32(), nullable=False),
    pa.field("cpu_limit_milli", pa.float64()),
    pa.field("mem_limit_mib", pa.float64()),
    pa.field("observation", pa.list_(pa.float32())),
    pa.field("candidates", pa.list_(CANDIDATE), nullable=False),
    pa.field("candidates_total", pa.int32()),
    pa.field("chosen_node", pa.string()),
    pa.field("chosen_index", pa.int32()),
    pa.field("model_version", pa.string()),
    pa.field("action", pa.list_(pa.float64())),
    pa.field("weights", pa.list_(pa.float64())),
    pa.field("tau", pa.float64()),
    pa.field("wait_s", pa.float64()),
    pa.field("outcome_left_s", pa.float64()),
    pa.field("outcome", pa.string()),
    pa.field("outcome_kills", pa.int32()),
    pa.field("outcome_overload_h", pa.float64()),
    pa.field("outcome_slo_h", pa.float64()),
    pa.field("outcome_node_slo_h", pa.float64()),
    pa.field("reward", pa.float64()),
    pa.field("elapsed_s", pa.float64()),
], metadata={VERSION_KEY: str(SCHEMA_VERSION).encode()})

COLUMNS = tuple(SCHEMA.names)


class HistoryError(ValueError):
    """A history file or row that cannot be used, naming the file (or row) and what was expected."""


@dataclass(frozen=True)
class CandidateArrays:
    """A row's candidates as arrays (names [k], utilisation [k, 4], scores [k], requested CPU and memory
    [k, 2], weights [k]): a recorder's row waits for its pod to leave, and on a cluster of thousands of
    nodes a day's rows as lists of dicts would hold gigabytes. A writer takes either, and writes these as
    their arrays stand (``candidate_lists``); ``rows`` makes the schema's records of them."""

    names: np.ndarray
    u: np.ndarray
    scores: np.ndarray
    r: np.ndarray
    weight: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.names)

    def take(self, idx: np.ndarray, weight: np.ndarray) -> "CandidateArrays":
        return CandidateArrays(self.names[idx], self.u[idx], self.scores[idx], self.r[idx], weight)

    def rows(self) -> list[dict]:
        """The schema's records (``weight`` null when all were kept: each stands for itself); a writer
        writes the same values column by column (``candidate_lists``)."""
        w = [None] * len(self.names) if self.weight is None else [float(x) for x in self.weight]
        return [{"node": str(n), "u_cpu": float(u[0]), "u_mem": float(u[1]), "u_io": float(u[2]),
                 "u_net": float(u[3]), "stale": False, "score": float(s), "r_cpu": float(r[0]), "r_mem": float(r[1]),
                 "weight": x}
                for n, u, s, r, x in zip(self.names, self.u, self.scores, self.r, w)]


def sample_candidates(scores: np.ndarray, chosen: int | None, keep: int,
                      rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray] | None:
    """(indices in candidate order, weights) of the candidates to keep of a decision whose policy scored
    them ``scores`` (NaN: unknown, never among the best) and chose the one at ``chosen`` (None: none): the
    chosen one, the others scored best up to ``keep // 2`` of those kept (and one fewer than leaves the
    rest a draw), and a uniform sample of the rest, each weighted by the rest's count over the sample's
    (module docstring). None: keep them all (``keep`` 0, or no more candidates than it)."""
    n = len(scores)
    if keep <= 0 or n <= keep:
        return None
    sure = np.zeros(n, dtype=bool)
    if chosen is not None:
        sure[chosen] = True
    known = np.flatnonzero(~np.isnan(scores) & ~sure)
    best = known[np.argsort(-scores[known], kind="stable")[:min(keep // 2, keep - 2)]]
    sure[best] = True
    rest = np.flatnonzero(~sure)
    draw = keep - int(sure.sum())
    sampled = rng.choice(rest, size=draw, replace=False)
    idx = np.sort(np.concatenate([np.flatnonzero(sure), sampled]))
    weight = np.ones(n)
    weight[sampled] = len(rest) / draw
    return idx, weight[idx]


def sample_row(row: dict, keep: int, seed: int = 0) -> dict:
    """``row`` with at most ``keep`` candidates (``sample_candidates``, drawn from the decision's id and
    ``seed``) and ``candidates_total`` set; the same row when it is set already."""
    cands = row["candidates"]
    arrays = isinstance(cands, CandidateArrays)
    total = row.get("candidates_total")
    if total is None and 0 < keep < len(cands):  # else all kept: no scores to read, no draw
        total = len(cands)
        scores = cands.scores if arrays else np.array([np.nan if c.get("score") is None else c["score"]
                                                       for c in cands], dtype=np.float64)
        rng = np.random.default_rng([seed, zlib.crc32(str(row["decision_id"]).encode())])
        idx, weight = sample_candidates(scores, row["chosen_index"], keep, rng)
        cands = cands.take(idx, weight) if arrays else [{**cands[i], "weight": w}
                                                        for i, w in zip(idx.tolist(), weight.tolist())]
        chosen = row["chosen_index"]
        row = {**row, "chosen_index": None if chosen is None else int(np.searchsorted(idx, chosen))}
    return {**row, "candidates": cands, "candidates_total": int(len(cands) if total is None else total)}


def _check_row(row: dict, where: str) -> None:
    missing = [c for c in COLUMNS if c not in row and c not in ("schema_version", "candidates_total")]
    if missing:
        raise HistoryError(f"{where}: decision {row.get('decision_id')!r} lacks {missing}")
    if row["source"] not in SOURCES:
        raise HistoryError(f"{where}: source {row['source']!r}: expected one of {', '.join(SOURCES)}")
    if row["qos"] not in (0, 1, 2):
        raise HistoryError(f"{where}: decision {row['decision_id']!r}: qos {row['qos']!r}: expected 0, 1 or 2 "
                           f"({', '.join(QOS_NAMES)})")
    k = len(row["candidates"])
    total = row.get("candidates_total")
    if total is not None and total < k:
        raise HistoryError(f"{where}: decision {row['decision_id']!r}: candidates_total {total}: expected at least "
                           f"its {k} candidates kept")
    i = row["chosen_index"]
    cands = row["candidates"]
    if i is not None and not (0 <= i < k and (cands.names[i] if isinstance(cands, CandidateArrays)
                                              else cands[i]["node"]) == row["chosen_node"]):
        raise HistoryError(f"{where}: decision {row['decision_id']!r}: chosen_index {i} does not name chosen_node "
                           f"{row['chosen_node']!r} among its {k} candidates")


def _table(rows: list[dict]) -> pa.Table:
    """Rows of the schema as a table; when every row holds its candidates as arrays (a recorder's), the
    candidates column is built from them whole (``candidate_lists``)."""
    cands = [row["candidates"] for row in rows]
    if not all(isinstance(c, CandidateArrays) for c in cands):
        return pa.Table.from_pylist([{**row, "candidates": c.rows()} if isinstance(c, CandidateArrays) else row
                                     for row, c in zip(rows, cands)], schema=SCHEMA)
    at = SCHEMA.get_field_index("candidates")
    table = pa.Table.from_pylist(rows, schema=SCHEMA.remove(at))  # each row's other fields
    return table.add_column(at, SCHEMA.field(at), candidate_lists(cands)).replace_schema_metadata(SCHEMA.metadata)


class HistoryWriter:
    """Writes decisions to one Parquet file: rows are buffered and written a row group at a time to a
    temporary file beside ``path``, renamed over it by ``close`` (a failed run leaves no file). Each row
    keeps at most ``candidates`` of its candidates (module docstring, "Candidates kept"; 0: all), drawn
    with ``seed``; a row whose ``candidates_total`` is set is taken as already kept so."""

    def __init__(self, path, rows_per_group: int = ROWS_PER_GROUP,
                 candidates_per_group: int = CANDIDATES_PER_GROUP, candidates: int = DEFAULT_CANDIDATES,
                 seed: int = 0):
        self.candidates, self.seed = check_candidates(candidates), int(seed)
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        self.rows_per_group = rows_per_group
        self.candidates_per_group = candidates_per_group
        self._rows: list[dict] = []
        self._candidates = 0
        self._writer = pq.ParquetWriter(self.tmp, SCHEMA)
        self.written = 0

    def append(self, row: dict) -> None:
        _check_row(row, str(self.path))
        row = sample_row(row, self.candidates, self.seed)
        self._rows.append({"schema_version": SCHEMA_VERSION, **row})
        self._candidates += len(row["candidates"])
        if len(self._rows) >= self.rows_per_group or self._candidates >= self.candidates_per_group:
            self.flush()

    def flush(self) -> None:
        if self._rows:
            self._writer.write_table(_table(self._rows))
            self.written += len(self._rows)
            self._rows, self._candidates = [], 0

    def close(self) -> None:
        """Write what is buffered, fsync and rename the file into place."""
        self.flush()
        self._writer.close()
        with open(self.tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        """Drop the file (a failed run)."""
        try:
            self._writer.close()
        finally:
            self.tmp.unlink(missing_ok=True)


def check_candidates(value) -> int:
    """``value`` as the candidates a writer keeps of a decision (0: all); a ``ValueError`` naming it
    otherwise. At least 2: the chosen node and one other."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0 or value == 1:
        raise ValueError(f"candidates kept per decision {value!r}: expected 0 (all) or a whole number >= 2")
    return int(value)


def write_history(path, rows: list[dict], candidates: int = DEFAULT_CANDIDATES) -> Path:
    """Write ``rows`` (dicts with every column but schema_version; ``candidates_total`` optional) to the
    Parquet file ``path``, each keeping at most ``candidates`` of its candidates (``HistoryWriter``)."""
    writer = HistoryWriter(path, candidates=candidates)
    try:
        for row in rows:
            writer.append(row)
    except BaseException:
        writer.abort()
        raise
    writer.close()
    return writer.path


def history_files(path) -> list[Path]:
    """The Parquet files of a history: ``path`` itself, or the ``*.parquet`` files of a folder (name order)."""
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise HistoryError(f"history {path}: not found: expected a folder of .parquet files (simulate "
                           "--record-history writes one) or one such file")
    files = sorted(p for p in path.glob("*.parquet") if not p.name.startswith("."))
    if not files:
        raise HistoryError(f"history {path}: no .parquet file in it: expected the files of simulate "
                           "--record-history or history-from-log")
    return files


def check_schema(schema: pa.Schema, where: str) -> int:
    """The file's schema version; a ``HistoryError`` for an unknown version or a column missing (of those
    its version has) or retyped."""
    raw = (schema.metadata or {}).get(VERSION_KEY)
    known = {str(v).encode(): v for v in range(1, SCHEMA_VERSION + 1)}
    if raw not in known:
        got = raw.decode(errors="replace") if raw else "none"
        raise HistoryError(f"{where}: history schema version {got}: expected 1 to {SCHEMA_VERSION} "
                           f"(metadata {VERSION_KEY.decode()})")
    version = known[raw]
    for field in SCHEMA:
        if ADDED_IN.get(field.name, 1) > version:
            continue
        if field.name not in schema.names:
            raise HistoryError(f"{where}: column {field.name!r} missing: expected the columns {', '.join(COLUMNS)}")
        got = schema.field(field.name).type
        expected = pa.list_(candidate_type(version)) if field.name == "candidates" else field.type
        if got != expected:
            raise HistoryError(f"{where}: column {field.name!r} is {got}: expected {expected}")
    return version


def _with_null_fields(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """An older file's candidates with the fields its version lacks null."""
    chunks = []
    for chunk in column.chunks:
        values = chunk.values
        fields = values.flatten()
        fields += [pa.nulls(len(values), f.type) for f in list(CANDIDATE)[len(fields):]]
        struct = pa.StructArray.from_arrays(fields, fields=list(CANDIDATE), mask=values.is_null())
        chunks.append(pa.ListArray.from_arrays(chunk.offsets, struct, mask=chunk.is_null()))
    return pa.chunked_array(chunks, pa.list_(CANDIDATE))


def read_history(path, columns: list[str] | tuple[str, ...] | None = None) -> pa.Table:
    """Every decision of a history (a file or a folder of files), checked against the schema, in time
    order (stable: a file's rows are written when the pod's outcome is known, not in decision order).
    ``columns``: only those (and ``time_s``, for the order), which spares reading the candidates of a
    long history when a caller needs its times or scenarios."""
    wanted = list(COLUMNS) if columns is None else list(dict.fromkeys([*columns, "time_s"]))
    unknown = [c for c in wanted if c not in COLUMNS]
    if unknown:
        raise ValueError(f"history columns {unknown}: expected some of {', '.join(COLUMNS)}")
    schema = pa.schema([SCHEMA.field(c) for c in wanted])
    tables = []
    for file in history_files(path):
        try:
            version = check_schema(pq.read_schema(file), str(file))
            present = [c for c in wanted if ADDED_IN.get(c, 1) <= version]
            table = pq.read_table(file, columns=present)
        except (pa.ArrowInvalid, OSError) as exc:
            raise HistoryError(f"{file}: not a readable Parquet file ({exc})") from None
        for name in wanted:
            if name not in present:  # an older file: the column reads as null
                table = table.append_column(SCHEMA.field(name), pa.nulls(len(table), SCHEMA.field(name).type))
        if "candidates" in wanted and version < 6:
            i = table.schema.get_field_index("candidates")
            table = table.set_column(i, SCHEMA.field("candidates"), _with_null_fields(table.column(i)))
        tables.append(table.select(wanted).cast(schema))
    table = pa.concat_tables(tables)
    order = np.argsort(table.column("time_s").to_numpy(), kind="stable")
    return table.take(pa.array(order))


class Decisions:
    """A history as arrays for learning: the decisions with an observation, fresh candidates only and
    a chosen node among them.

    ``obs`` [D, 35] float32; ``u`` [C, 4] float64 (the candidates of every decision, one after
    another); ``offsets`` [D + 1] (decision d's candidates are ``u[offsets[d]:offsets[d + 1]]``);
    ``weight`` [C] how many of its decision's candidates each stands for (1 where all were kept: module
    docstring, "Candidates kept"; None: all 1);
    ``chosen`` [D] (the chosen candidate's index within its decision); ``time_s`` [D]; ``r`` [C, 2]
    the candidates' requested CPU and memory utilisation (NaN where the history does not know them;
    None: all NaN); ``scores`` [C] what the deciding policy scored each candidate (NaN where unknown,
    and for imported rows, whose scores are the import's replay, not the cluster scheduler's); ``qos``
    [D] the pod's QoS class (0 Guaranteed, 1 Burstable, 2 BestEffort; None: all Guaranteed)."""

    def __init__(self, obs, u, offsets, chosen, time_s, dropped: int = 0, r=None, scores=None, qos=None,
                 weight=None):
        self.obs, self.u, self.offsets, self.chosen, self.time_s = obs, u, offsets, chosen, time_s
        self.weight = np.ones(len(u)) if weight is None else weight
        self.r = np.full((len(u), 2), np.nan) if r is None else r
        self.scores = np.full(len(u), np.nan) if scores is None else scores
        self.qos = np.zeros(len(chosen), dtype=np.int8) if qos is None else qos
        self.dropped = dropped
        """Decisions of the table left out (no observation, no chosen candidate, or a stale one chosen)."""

    def __len__(self) -> int:
        return len(self.chosen)

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    def subset(self, keep: np.ndarray) -> "Decisions":
        """The decisions where ``keep`` (a bool mask or indices) holds."""
        idx = np.flatnonzero(keep) if np.asarray(keep).dtype == bool else np.asarray(keep, dtype=np.int64)
        sizes = self.sizes[idx]
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        rows = np.concatenate([np.arange(self.offsets[d], self.offsets[d + 1]) for d in idx]).astype(np.int64) \
            if len(idx) else np.zeros(0, dtype=np.int64)
        return Decisions(self.obs[idx], self.u[rows], offsets, self.chosen[idx], self.time_s[idx], self.dropped,
                         self.r[rows], self.scores[rows], self.qos[idx], self.weight[rows])

    def with_obs(self, obs: np.ndarray) -> "Decisions":
        """The same decisions with other observations (normalised ones, for training)."""
        return Decisions(obs, self.u, self.offsets, self.chosen, self.time_s, self.dropped, self.r, self.scores,
                         self.qos, self.weight)

    def require_requests(self) -> None:
        """A ``HistoryError`` unless every candidate's requested utilisation is known (what a score with
        a requests share reads)."""
        if np.isnan(self.r).any():
            raise HistoryError("the history's candidates lack their requested utilisation (r_cpu, r_mem), which "
                               "the requests and balance action modes score with: expected a history of schema "
                               "version 3 or later from the simulator (simulate --record-history) or import-history")

    @classmethod
    def from_table(cls, table: pa.Table) -> "Decisions":
        """Vectorised over the candidates (Arrow to NumPy, no Python object per candidate): a
        production history has thousands of candidates per decision."""
        from td3sched.rl.observation import OBSERVATION_SIZE

        n = table.num_rows
        cands = table.column("candidates").combine_chunks()
        offs = cands.offsets.to_numpy().astype(np.int64)
        offs = offs - offs[0]
        flat = cands.flatten()
        u = np.column_stack([flat.field(f).to_numpy(zero_copy_only=False).astype(np.float64) for f in U_FIELDS]) \
            if len(flat) else np.zeros((0, 4))
        r = np.column_stack([flat.field(f).to_numpy(zero_copy_only=False).astype(np.float64) for f in R_FIELDS]) \
            if len(flat) else np.zeros((0, 2))
        scores = flat.field("score").to_numpy(zero_copy_only=False).astype(np.float64) if len(flat) else np.zeros(0)
        stale = flat.field("stale").to_numpy(zero_copy_only=False).astype(bool) if len(flat) else np.zeros(0, bool)
        weight = flat.field("weight").fill_null(1.0).to_numpy(zero_copy_only=False).astype(np.float64) \
            if len(flat) else np.zeros(0)
        fresh = ~stale & ~np.isnan(u).any(axis=1)
        before = np.concatenate([[0], np.cumsum(fresh)])  # before[j]: fresh candidates ahead of flat index j
        chosen = table.column("chosen_index").combine_chunks().fill_null(-1).to_numpy().astype(np.int64)
        obs_col = table.column("observation").combine_chunks()
        has_obs = obs_col.is_valid().to_numpy(zero_copy_only=False)
        lengths = obs_col.value_lengths().fill_null(OBSERVATION_SIZE).to_numpy()
        if np.any(lengths != OBSERVATION_SIZE):
            bad = int(np.flatnonzero(lengths != OBSERVATION_SIZE)[0])
            raise HistoryError(f"decision {table.column('decision_id')[bad].as_py()!r}: observation of "
                               f"{lengths[bad]} values: expected {OBSERVATION_SIZE}")
        obs_all = obs_col.flatten().to_numpy(zero_copy_only=False).astype(np.float32).reshape(-1, OBSERVATION_SIZE)
        at = offs[:-1] + np.maximum(chosen, 0)
        ok = has_obs & (chosen >= 0) & (chosen < np.diff(offs))
        ok[ok] &= fresh[at[ok]]
        rows = np.flatnonzero(ok)
        if len(rows) == 0:
            raise HistoryError(f"history of {n} decisions has none to learn from: expected decisions "
                               "with an observation and a chosen node among fresh candidates")
        sizes = before[offs[rows + 1]] - before[offs[rows]]
        row_of = np.repeat(np.arange(n), np.diff(offs))
        keep = fresh & ok[row_of]
        imported = (table.column("source").to_numpy(zero_copy_only=False) == "import")[row_of]
        scores = np.where(imported, np.nan, scores)
        obs_row = np.cumsum(has_obs) - 1  # a row's index among the rows with an observation
        return cls(obs_all[obs_row[rows]], u[keep], np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
                   (before[at[rows]] - before[offs[rows]]).astype(np.int64),
                   table.column("time_s").to_numpy()[rows].astype(np.float64), int(n - len(rows)), r[keep],
                   scores[keep], table.column("qos").to_numpy()[rows].astype(np.int8), weight[keep])
