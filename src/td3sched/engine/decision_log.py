"""The decision log: every decision, append-only, crash-safe, rotated, the input of the learning
lifecycle (a later training run reads it).

Format: JSON lines, one record per line, UTF-8. Schema (``SCHEMA_VERSION`` 1):

    {"schema": 1, "seq": 0, "kind": "decision", "time_s": 1764560000.1, "decision_id": "...",
     "pod": {"namespace": "", "name": "web-1", "cpu_milli": 500, "mem_mib": 256, ...},
     "observation": [35 floats] or null, "action": [pre-activations] or null,
     "weights": [4], "tau": 0.3, "model_version": "ab12cd34ef56", "fallback_reason": "",
     "advisory": false,
     "candidates": [{"node": "n1", "score": 73, "stale": false, "u": [cpu, mem, io, net] or null,
                     "r": [cpu, mem] or null}, ...]}

(``r``: the requested CPU and memory utilisation with the pod, null when stale or when the engine does
not know the requests; a record written before the key existed lacks it, which reads as null. A
model with a requests share adds ``"requests"``, one with a balance share ``"balance"``, one with a
fragmentation share ``"fragmentation"``, one with a ceiling ``"ceiling"`` and ``"held_back"``.)
    {"schema": 1, "seq": 1, "kind": "binding", "time_s": ..., "decision_id": "...", "pod": {...}, "node": "n1"}

Crash safety: records are queued by the request threads and written by one writer thread, a batch
at a time, with one ``write`` on a file opened with ``O_APPEND``; ``fsync`` runs every
``fsync_interval_s``. A crash (even SIGKILL) loses at most the records still queued; a record cut
by the crash is the file's last line, without its newline. ``read_log`` skips such a line, and a
reopened log starts on a fresh line, so earlier records are never corrupted.

Rotation: before a record would take the file past ``max_bytes`` it is renamed ``.1`` (``.1`` to
``.2``, ...), and only ``keep`` rotated files are kept: at most ``(keep + 1) x max_bytes`` on disk.
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
from pathlib import Path

SCHEMA_VERSION = 1
_STOP = object()


class DecisionLog:
    def __init__(self, path, max_bytes: int = 64 << 20, keep: int = 5, fsync_interval_s: float = 1.0):
        if max_bytes < 4096 or keep < 1:
            raise ValueError(f"decision log max_bytes={max_bytes}, keep={keep}: expected at least 4096 bytes and 1 file")
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.keep = keep
        self.fsync_interval_s = fsync_interval_s
        self.seq = 0
        self.written = 0
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._open()
        self._writer = threading.Thread(target=self._run, name="decision-log", daemon=True)
        self._writer.start()

    def _open(self) -> None:
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.size = os.fstat(self.fd).st_size
        if self.size:
            with open(self.path, "rb") as f:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":  # a record cut by a crash: start on a fresh line
                    self.size += os.write(self.fd, b"\n")

    def append(self, record: dict) -> None:
        """Queue one record (the writer adds ``schema`` and ``seq``); never blocks on the disk."""
        self._queue.put(record)

    def _rotate(self) -> None:
        os.close(self.fd)
        for i in range(self.keep - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{i}")
            if older.exists():
                os.replace(older, self.path.with_name(f"{self.path.name}.{i + 1}"))
        os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
        self._open()

    def _write(self, lines: list[bytes]) -> None:
        self.size += os.write(self.fd, b"".join(lines))
        self.written += len(lines)

    def _run(self) -> None:
        last_sync = time.monotonic()
        stop = False
        while not stop:
            batch = [self._queue.get()]
            while True:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            lines = []
            for record in batch:
                if record is _STOP:
                    stop = True
                    continue
                try:
                    line = json.dumps({"schema": SCHEMA_VERSION, "seq": self.seq, **record},
                                      separators=(",", ":"), allow_nan=False)
                except (TypeError, ValueError) as exc:  # a record that is not JSON is logged as such
                    line = json.dumps({"schema": SCHEMA_VERSION, "seq": self.seq, "kind": "unloggable",
                                       "error": str(exc)[:200]})
                lines.append(line + "\n")
                self.seq += 1
            chunk: list[bytes] = []
            pending = 0
            for line in (x.encode() for x in lines):  # whole lines, a file never past max_bytes (but by one line)
                if chunk and self.size + pending + len(line) > self.max_bytes:
                    self._write(chunk)
                    chunk, pending = [], 0
                if self.size and self.size + len(line) > self.max_bytes:
                    os.fsync(self.fd)
                    self._rotate()
                chunk.append(line)
                pending += len(line)
            if chunk:
                self._write(chunk)
            if stop or time.monotonic() - last_sync >= self.fsync_interval_s:
                os.fsync(self.fd)
                last_sync = time.monotonic()

    def close(self) -> None:
        """Write everything queued, then close."""
        if self._writer.is_alive():
            self._queue.put(_STOP)
            self._writer.join()
        try:
            os.close(self.fd)
        except OSError:
            pass


def read_log(path) -> tuple[list[dict], int]:
    """(records, lines skipped): every complete, parseable line of one log file."""
    records, skipped = [], 0
    with open(path, "rb") as f:
        for line in f:
            if not line.endswith(b"\n"):
                skipped += 1
                continue
            try:
                records.append(json.loads(line))
            except (json.JSONDecodeError, UnicodeDecodeError):
                skipped += 1
    return records, skipped
