"""``SparkSpout``: the rows of a Spark batch source as a stream, in bounded memory,
replayable (at least once) and rewindable (exactly once).

Configuring it
==============
Subclass it at module level and give the source on the class::

    class Events(SparkSpout):
        path = "/data/events"            # file(s), directory, glob, comma list or list
        format = "parquet"               # parquet, orc, csv, json, text
        options = {}                     # reader options (csv: {"header": "true"})
        fields = ["user", "amount"]      # projection; default: every column of the files

or an SQL query (``sql = "SELECT ..."``), or a callable ``source(spark)`` returning
a DataFrame (a staticmethod); these two need ``fields``. Config overrides, per
component or topology (``--config``): ``spout.spark.path`` / ``.format`` /
``.options`` (merged over the class's) / ``.sql``; the projection stays the
class's: it is the declared output, fixed when the topology is built. Without
``fields`` the outputs are the columns of the first file, read without a JVM
(:mod:`bittern.spark.source`).

Shares, order, ids
==================
A path source is the sorted list of its files; task *i* of *P* reads
``files[i::P]``, one file after the other (one Spark read per file, never the
whole share at once), so the *P* tasks emit every row exactly once and each task
its rows in the same order on every run (Spark's row order within a file, with a
fixed ``local[1]`` master and ``spark.sql.files.maxPartitionBytes``). Row ids are
``(file index in the task's list, row index in the file)``. An SQL or callable
source is one frame; task *i* keeps the rows with ``pmod(xxhash64(all columns),
P) == i`` (ids ``(0, row index)``): its row order must be deterministic (an
``ORDER BY`` makes sure).

Memory
======
A reader thread streams each file with ``toLocalIterator(prefetchPartitions=True)``
(at most two partitions in the JVM, each at most ``spout.spark.max.partition.bytes``
of input) into a queue of ``spout.spark.queue.chunks`` chunks of
``spout.spark.chunk.rows`` rows; the spout emits from it, ``spout.spark.batch``
rows per ``next_tuple``. Under at least once at most ``spout.spark.max.pending``
rows wait for their acks (their values kept for replay). The JVM is this
process's own (``local[1]``, heap ``spout.spark.driver.memory``, flags
``spout.spark.java.options``), started once in the background at ``initialize``
and stopped at ``close``; it also exits when this process dies (PySpark's
gateway ends on its stdin's EOF).

With a cluster master (``spark://``, ``sc://``) the process holds only the Spark
Connect client; its memory is mostly the modules pyspark's client imports (pandas,
pyarrow, grpc: ~110 MB RSS). Set for the read: the server's Arrow batches of at
most ``spout.spark.arrow.batch.rows`` rows (1000; the client turns a whole batch
into Row objects at once), glibc malloc arenas capped at
``spout.spark.malloc.arenas`` (1; 0 leaves them alone: each gRPC thread would
keep an arena of freed memory), and the heap trimmed after each file.

Reliability
===========
* ATLEAST_ONCE: each row is emitted with its id; a failed row is emitted again
  from the pending map (:class:`~bittern.api.reliable.ReliableSpout`).
* EFFECTIVELY_ONCE: the offset ``(file index, row index)`` of the next row goes
  into the spout's ``State`` (key ``"offset"``) at every checkpoint; a restore
  rewinds the reader to it (the file is read again from its start and the rows
  before the offset skipped). ``spout.spark.done.after.checkpoints`` (deprecated:
  the runtime waits for the end to be committed) works as FileSpout's
  ``spout.files.done.after.checkpoints``.
* ATMOST_ONCE: rows are emitted once.

When its share is emitted (and, at least once, acked) the task logs how many rows
of how many files it emitted and calls ``done()`` (the ``__exhausted`` metric;
``bittern run --until-done`` stops when all tasks are done).

Types: :mod:`bittern.spark.typemap`. Checks before anything starts:
:meth:`SparkSpout.preflight`.
"""
from __future__ import annotations

import importlib.util
import os
import queue
import sys
import threading
import time

from ..api.reliable import EXHAUSTED, ReliableSpout
from ..errors import TopologyError
from .cluster import (HelperDir, connect_session, limit_malloc_arenas, parse_master, preflight_master, read_secret,
                      trim_malloc)
from .source import FORMATS, SparkSourceError, check_java, files_columns, resolve_paths, shard
from .typemap import row_converter

__all__ = ["SparkSpout", "SparkSourceError"]

OFFSET_KEY = "offset"
_END = "end"  # queue items: ("rows", gen, unit, [(row, values), ...]) | ("eof", gen, unit) | (_END, gen) | ("error", gen, exc)


class SparkSpout(ReliableSpout):
    """Rows of a Spark source; see the module docstring."""

    path = None
    format = "parquet"
    options: dict = {}
    sql = None
    source = None
    fields = None
    outputs: list = []

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        own = cls.__dict__
        if "outputs" in own:
            return
        if cls.fields:
            cls.outputs = list(cls.fields)
        elif any(k in own for k in ("path", "sql", "source", "format", "options")):
            if cls.sql or cls.source is not None:
                raise TopologyError(f"{cls.__qualname__}: an SQL or callable Spark source needs `fields` "
                                    "(the output fields; they cannot be known without starting Spark)")
            if cls.path:
                files = resolve_paths(cls.path)
                fmt = str(cls.format).lower()
                cls.outputs = files_columns(files[:1], fmt, cls.options)[0]

    # -- configuration ----------------------------------------------------------------------
    @classmethod
    def source_config(cls, config):
        """``(kind, value, format, options)`` with the config overrides applied; kind is
        "path", "sql" or "callable"."""
        config = config or {}
        options = dict(cls.options or {})
        options.update(config.get("spout.spark.options") or {})
        fmt = str(config.get("spout.spark.format") or cls.format or "parquet").lower()
        path = config.get("spout.spark.path") or cls.path
        sql = config.get("spout.spark.sql") or cls.sql
        if path:
            return "path", path, fmt, options
        if sql:
            return "sql", sql, fmt, options
        if cls.source is not None:
            return "callable", cls.source, fmt, options
        raise SparkSourceError(f"{cls.__qualname__} has no source: set `path` (or spout.spark.path), "
                               "`sql` (or spout.spark.sql) or `source`")

    @classmethod
    def preflight(cls, config):
        """Run by the CLI before anything starts, without a JVM: pyspark and pyarrow are
        installed, Java 17+ is there, the files exist, the format is one Spark reads and
        the files are of it, and the declared fields are columns of every file. Raises
        SparkSourceError. (In cluster mode this runs on the submitting machine: the
        paths must be visible there too.)"""
        kind, value, fmt, options = cls.source_config(config)
        for module in ("pyspark", "pyarrow"):
            if importlib.util.find_spec(module) is None:
                raise SparkSourceError(f"SparkSpout needs {module}: pip install 'bittern[spark]'")
        mode = parse_master((config or {}).get("spout.spark.master"))[0]
        if mode != "connect":  # (the standalone mode's driver helper is a JVM on this machine)
            check_java()
        preflight_master(config)
        if kind != "path":
            return
        if fmt not in FORMATS:
            raise SparkSourceError(f"spark source: unknown format {fmt!r} (path sources read one of "
                                   f"{', '.join(FORMATS)}; use an SQL or callable source for others)")
        wanted = list(cls.outputs or [])
        files = resolve_paths(value)
        for f, cols in zip(files, files_columns(files, fmt, options)):
            missing = [c for c in wanted if c not in cols]
            if missing:
                raise SparkSourceError(f"{cls.__qualname__}: field {missing[0]!r} is not a column of {f} "
                                       f"(columns: {', '.join(cols)})")

    # -- lifecycle --------------------------------------------------------------------------
    def initialize(self, config, context):
        config = dict(config or {})
        self.conf = config
        mode = config.get("topology.reliability.mode")
        self.checkpointed = mode == "EFFECTIVELY_ONCE"
        self.batch = max(1, int(config.get("spout.spark.batch", 100)))
        self.max_pending = max(1, int(config.get("spout.spark.max.pending", 10000)))
        self.chunk_rows = max(1, int(config.get("spout.spark.chunk.rows", 1000)))
        self.done_after_checkpoints = int(config.get("spout.spark.done.after.checkpoints", 0))
        self.master = str(config.get("spout.spark.master") or "local[1]")
        self.mode = parse_master(self.master)
        self.topology_name = getattr(context, "topology_name", None) or "local"
        self._helper = None
        self._retry_at = None
        self._failures = 0
        if context is None:
            self.task_index, self.task_count, self.component = 0, 1, type(self).__name__
        else:
            tasks = context.get_component_tasks(context.component) or [context.task_id]
            self.task_index, self.task_count, self.component = context.task_index, len(tasks), context.component
        self.kind, value, self.fmt, self.read_options = self.source_config(config)
        if self.kind == "path":
            self.units = shard(resolve_paths(value), self.task_index, self.task_count)
        else:
            self.units = [value]
        self._queue = queue.Queue(maxsize=max(1, int(config.get("spout.spark.queue.chunks", 4))))
        self._spark = None
        self._spark_lock = threading.Lock()
        self._gen = 0
        self._stop = threading.Event()
        self._thread = None
        self._chunk, self._chunk_pos, self._chunk_unit = [], 0, 0
        self._reader_done = self._said_done = False
        self._saves_since_end = 0
        self._emitted = 0
        self._error = None
        self._started_at = time.monotonic()
        if not hasattr(self, "_offset"):
            self._offset = (0, 0)
        if self.mode[0] != "local":
            # before the gRPC threads start (see the module docstring, Memory)
            limit_malloc_arenas(int(config.get("spout.spark.malloc.arenas", 1)))
        # the JVM starts now, in the background: start-up is not held up by it
        threading.Thread(target=self._session_quietly, name="spark-session", daemon=True).start()
        if not self.checkpointed or getattr(self, "state", None) is not None:
            self._restart(self._offset)

    def init_state(self, state):
        """Under EFFECTIVELY_ONCE, at start-up and after every restore: rewind to the
        offset ``state`` holds (the start if none)."""
        self.state = state
        if hasattr(self, "checkpointed") and not self.checkpointed:
            return  # the other modes: an empty State, never saved; the reader runs already
        saved = state.get(OFFSET_KEY)
        self._offset = (0, 0) if saved is None else (int(saved["index"]), int(saved["row"]))
        if saved is not None and saved.get("path") is not None and hasattr(self, "units"):
            if self._offset[0] >= len(self.units) or self.units[self._offset[0]] != saved["path"]:
                raise SparkSourceError(f"{type(self).__name__}: the restored offset is in {saved['path']}, "
                                       f"which is not file {self._offset[0]} of this task's files")
        self._said_done = False
        self._saves_since_end = 0
        if hasattr(self, "units"):
            self._restart(self._offset)

    def pre_save(self, checkpoint_id):
        state = getattr(self, "state", None)
        if state is not None:
            index, row = self._offset
            path = self.units[index] if self.kind == "path" and index < len(self.units) else None
            state.put(OFFSET_KEY, {"index": index, "row": row, "path": path})
        if self._reader_done:
            self._saves_since_end += 1
            self._maybe_done()

    def close(self):
        self._stop.set()
        self._gen += 1
        t = self._thread
        if t is not None:
            t.join(timeout=10)
        self._stop_spark()

    # -- Spark ------------------------------------------------------------------------------
    def session_config(self):
        """The Spark settings of this spout's session (``spout.spark.conf`` adds any)."""
        c = self.conf
        out = {
            "spark.master": self.master,
            "spark.app.name": f"bittern-{self.component}-{self.task_index}",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.memory": str(c.get("spout.spark.driver.memory", "512m")),
            "spark.driver.extraJavaOptions": str(c.get("spout.spark.java.options",
                                                       "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")),
            "spark.sql.files.maxPartitionBytes": str(int(c.get("spout.spark.max.partition.bytes", 32 << 20))),
            "spark.sql.session.timeZone": "UTC",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
        }
        out.update({str(k): str(v) for k, v in (c.get("spout.spark.conf") or {}).items()})
        return out

    def _session(self):
        with self._spark_lock:
            if self._spark is None and self.mode[0] != "local":
                self._spark = self._remote_session()
            if self._spark is None:
                os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
                os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
                os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
                from pyspark.sql import SparkSession
                t0 = time.monotonic()
                b = SparkSession.builder
                for k, v in self.session_config().items():
                    b = b.config(k, v)
                spark = b.getOrCreate()
                spark.sparkContext.setLogLevel("ERROR")
                self.jvm_start_secs = time.monotonic() - t0
                self.logger.info("Spark session of task %d started in %.1fs", self.task_index, self.jvm_start_secs)
                self._spark = spark
            return self._spark

    def _session_quietly(self):
        """``_session`` started early in the background; a failure there reaches the
        reader thread, which calls ``_session`` again and hands its error on."""
        try:
            self._session()
        except Exception:  # noqa: BLE001
            pass

    def _remote_session(self):
        """A Spark Connect client session: to the server of ``sc://`` or to this
        topology's driver helper (``spark://``, started if none runs)."""
        t0 = time.monotonic()
        secret = read_secret(self.conf)
        c = self.conf
        if self.mode[0] == "standalone":
            if self._helper is None:
                self._helper = HelperDir(self.topology_name, self.master)
            java = str(c.get("spout.spark.java.options", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"))
            extra = {str(k): str(v) for k, v in (c.get("spout.spark.conf") or {}).items()}
            doc = self._helper.attach({"master": self.master, "topology": self.topology_name,
                                       "secret_file": c.get("spout.spark.secret.file") or None,
                                       "driver_memory": str(c.get("spout.spark.driver.memory", "512m")),
                                       "java_options": java, "conf": extra,
                                       "linger": float(c.get("spout.spark.driver.linger.seconds", 10))})
            spark = connect_session("127.0.0.1", doc["port"], {}, doc["token"],
                                    f"the driver helper of {self.master} ({self._helper.path})",
                                    int(c.get("spout.spark.connect.retries", 4)))
            where = f"the shared application on {self.master} (driver helper {self._helper.path})"
        else:
            _, host, port, params = self.mode
            spark = connect_session(host, port, params, secret, f"spout.spark.master {self.master}",
                                    int(c.get("spout.spark.connect.retries", 4)))
            where = f"Spark Connect {self.master.split('/;')[0]}"
            for k, v in (c.get("spout.spark.conf") or {}).items():
                spark.conf.set(str(k), str(v))
        spark.conf.set("spark.sql.files.maxPartitionBytes", str(int(c.get("spout.spark.max.partition.bytes", 32 << 20))))
        spark.conf.set("spark.sql.session.timeZone", "UTC")
        # the server sends the rows in Arrow batches of at most this many rows; the client
        # turns a whole batch into Row objects at once (a spout.spark.conf value wins)
        if "spark.sql.execution.arrow.maxRecordsPerBatch" not in (c.get("spout.spark.conf") or {}):
            batch_rows = max(1, int(c.get("spout.spark.arrow.batch.rows", 1000)))
            spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(batch_rows))
        self.jvm_start_secs = time.monotonic() - t0
        self.logger.info("Spark session of task %d started in %.1fs (%s)", self.task_index, self.jvm_start_secs, where)
        return spark

    def _stop_spark(self, final=True):
        with self._spark_lock:
            spark, self._spark = self._spark, None
            if self._helper is not None and final:
                self._helper.unregister(os.getpid())
            if spark is None:
                return
            if self.mode[0] != "local":
                try:
                    spark.stop()
                except Exception as e:  # noqa: BLE001 - the server may be gone: nothing to release
                    self.logger.info("stopping the Spark Connect session: %s", e)
                return
            try:
                from pyspark import SparkContext
                gw = SparkContext._gateway
                proc = getattr(gw, "proc", None)
                spark.stop()
                if gw is not None:
                    gw.shutdown()
                    SparkContext._gateway = SparkContext._jvm = None
                if proc is not None:
                    proc.stdin.close()
                    try:
                        proc.wait(timeout=10)
                    except Exception:  # noqa: BLE001 - it did not go: make it
                        proc.kill()
            except Exception as e:  # noqa: BLE001 - closing anyway
                self.logger.warning("stopping Spark: %s", e)

    def frame(self, spark, unit):
        """The DataFrame of one unit of this task's share (a file, or the query's share),
        projected to the outputs."""
        if self.kind == "path":
            df = spark.read.format(self.fmt).options(**{k: str(v) for k, v in self.read_options.items()}).load(unit)
        elif self.kind == "sql":
            df = spark.sql(unit)
        else:
            df = unit(spark)
        if self.kind != "path" and self.task_count > 1:
            from pyspark.sql import functions as F
            df = df.where(F.pmod(F.xxhash64(*df.columns), F.lit(self.task_count)) == self.task_index)
        fields = list(self.outputs_fields())
        missing = [f for f in fields if f not in df.columns]
        if missing:
            raise SparkSourceError(f"{type(self).__name__}: field {missing[0]!r} is not a column of "
                                   f"{unit if self.kind != 'callable' else 'the frame'} (columns: {', '.join(df.columns)})")
        return df.select(*fields)

    @classmethod
    def outputs_fields(cls):
        outs = cls.outputs or []
        return [o for o in outs if isinstance(o, str)]

    # -- the reader thread ------------------------------------------------------------------
    def _restart(self, offset):
        """Stop the current reader (if any) and start one at ``offset``."""
        self._gen += 1
        gen = self._gen
        old = self._thread
        if old is not None:
            self._stop.set()
            old.join(timeout=30)
        self._stop = threading.Event()
        while True:  # what the old reader queued is from before the rewind
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._chunk, self._chunk_pos, self._chunk_unit = [], 0, offset[0]
        self._reader_done = False
        self._error = None
        self._thread = threading.Thread(target=self._read, args=(gen, offset, self._stop),
                                        name=f"spark-reader-{gen}", daemon=True)
        self._thread.start()

    def _put(self, item, stop):
        while not stop.is_set():
            try:
                self._queue.put(item, timeout=0.2)
                return True
            except queue.Full:
                pass
        return False

    def _read(self, gen, offset, stop):
        try:
            spark = self._session()
            start_unit, skip = offset
            for u in range(start_unit, len(self.units)):
                if stop.is_set():
                    return
                df = self.frame(spark, self.units[u])
                conv = row_converter(df.schema)
                it = df.toLocalIterator(prefetchPartitions=True)
                try:
                    chunk, r = [], 0
                    first = skip if u == start_unit else 0
                    for row in it:
                        if r >= first:
                            chunk.append((r, conv(row)))
                            if len(chunk) >= self.chunk_rows:
                                if not self._put(("rows", gen, u, chunk), stop):
                                    return
                                chunk = []
                        elif stop.is_set():
                            return
                        r += 1
                    if chunk and not self._put(("rows", gen, u, chunk), stop):
                        return
                finally:
                    close = getattr(it, "close", None)
                    if close is not None:
                        close()
                if self.mode[0] != "local":
                    trim_malloc()  # a file's Arrow batches are freed: hand their pages back
                if not self._put(("eof", gen, u), stop):
                    return
            self._put((_END, gen), stop)
        except BaseException as e:  # noqa: BLE001 - handed to the spout's thread
            self._put(("error", gen, e), stop)

    def _next_row(self):
        """``(unit, row, values)``, None if nothing is ready, EXHAUSTED at the end."""
        if self._error is not None:
            # reported once (an error record, like any task's); never done() with rows
            # missing: the read starts again at the offset with a new session
            if time.monotonic() < self._retry_at:
                return None
            self.logger.warning("%s task %d: reading again from file %d row %d after: %s",
                                self.component, self.task_index, self._offset[0], self._offset[1], self._error)
            self._stop_spark(final=False)
            self._restart(self._offset)
            return None
        while self._chunk_pos >= len(self._chunk):
            if self._reader_done:
                return EXHAUSTED
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return None
            if item[1] != self._gen:
                continue
            kind = item[0]
            if kind == "rows":
                self._chunk_unit, self._chunk, self._chunk_pos = item[2], item[3], 0
                self._failures = 0
            elif kind == "eof":
                self._offset = (item[2] + 1, 0)
            elif kind == _END:
                self._reader_done = True
                self._saves_since_end = 0
                self.logger.info("%s task %d: emitted all %d rows of its %d %s in %.1fs; done",
                                 self.component, self.task_index, self._emitted, len(self.units),
                                 "files" if self.kind == "path" else "query share",
                                 time.monotonic() - self._started_at)
                return EXHAUSTED
            else:
                self._error = item[2]
                self._failures += 1
                self._retry_at = time.monotonic() + min(30.0, 2.0 ** min(self._failures, 5))
                text = str(self._error).strip()
                raise SparkSourceError(f"{self.component} task {self.task_index}: reading its share from "
                                       f"{self.master} failed at file {self._offset[0]} row {self._offset[1]}: "
                                       f"{type(self._error).__name__}: {text.splitlines()[0][:300] if text else ''}"
                                       ) from self._error
        r, values = self._chunk[self._chunk_pos]
        self._chunk_pos += 1
        self._offset = (self._chunk_unit, r + 1)
        self._emitted += 1
        return self._chunk_unit, r, values

    # -- emitting ---------------------------------------------------------------------------
    def next_item(self):
        if len(self.pending) >= self.max_pending:
            return None
        item = self._next_row()
        if item is None or item is EXHAUSTED:
            return item
        u, r, values = item
        return (u, r), values

    def next_tuple(self):
        if self._said_done:
            return
        if self.checkpointed:
            emit = self.emit
            for _ in range(self.batch):
                item = self._next_row()
                if item is None:
                    return
                if item is EXHAUSTED:
                    self._maybe_done()
                    return
                emit(item[2])
            return
        for _ in range(self.batch):
            before = len(self.pending) + len(self.replay_queue)
            super().next_tuple()
            if getattr(self, "_rs_exhausted", False) or len(self.pending) + len(self.replay_queue) == before:
                return

    def done(self):
        self._said_done = True
        super().done()

    def _maybe_done(self):
        if self._said_done or not self._reader_done:
            return
        if self._saves_since_end >= self.done_after_checkpoints:
            self.done()
