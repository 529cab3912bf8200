"""A transactional Parquet sink (pyarrow, no JVM) that Spark, pandas and pyarrow read directly.

For checkpoint (or, outside exactly once, commit group) *n* and task *t*, in
``directory`` or in its Hive-style partition directory (``day=2026-11-26/``)::

    .staging-<prefix>-<n>-<t>.parquet    row groups written as rows come in; lost or aborted in a crash
    .pending-<prefix>-<n>-<t>.parquet    pre_commit: footer written, file fsync'd, renamed, directory fsync'd
    <prefix>-<n>-<t>.parquet             commit: renamed (atomic per file), directory fsync'd

Spark (Hadoop's listing) and ``pyarrow.dataset`` skip names that start with ``.`` or
``_``, so only committed files, each complete, are ever read. The two-phase protocol is
:class:`~bittern.sinks.base.TransactionalSink`'s, like ``FileSink``'s; with
partitioning a checkpoint is one file per partition it touched, each renamed on its
own, and a checkpoint whose commit a crash interrupted halfway still has pending files,
so ``recover`` sees it as pre-committed and finishes it.

Schema: the columns are the input stream's declared fields (or ``fields=``) minus the
``partition_by`` fields (which live in the directory names only, as Spark expects).
A column's type is the one declared in ``schema`` (``{"amount": "int64"}``, names in
:data:`TYPE_NAMES`, or pyarrow types), else inferred from its first non-null value
(bool, int -> int64, float -> double, str -> string, bytes -> binary, lists and dicts
as pyarrow infers them), else taken from a committed file of the same prefix (so a
restarted task keeps the types); a column still without a value when the first file
is written is a string column. A later value that does not fit (a str in an int64
column, a float in an int one; an int in a double column is fine) raises
:class:`ParquetSchemaError`, one line naming the component and the field, and the
checkpoint it belongs to can no longer be pre-committed: nothing of it becomes visible.

Memory: rows are buffered per partition in columns; when a partition holds
``row_group_rows`` rows, or all partitions together do (the largest is written), the
buffer becomes a row group of the staged file. Each partition with staged rows keeps
one file open.

``ParquetSinkBolt`` is the bolt to use: its class attributes (or ``sink.parquet.*``
config keys) configure the sink, ``bittern submit`` checks that the output directory
is writable before anything starts, and outside exactly once it rolls a file every
``roll_rows`` rows, ``roll_bytes`` (uncompressed) bytes or ``roll_seconds``, acking the
tuples once their file is committed (fsync'd, renamed, directory fsync'd).
"""
from __future__ import annotations

import logging
import os
import re

from ..ckptfile import fsync_path
from .base import Inventory, SinkBolt, SinkError, TransactionalSink, task_of
from .files import fsync_dir
from .parquet_types import (TYPE_NAMES, ParquetSchemaError, arrow_type, check_writable, converter, fast_types,
                            hive_escape, infer_type, load_pyarrow)

log = logging.getLogger("bittern.sinks")

__all__ = ["ParquetSchemaError", "ParquetSink", "ParquetSinkBolt", "TYPE_NAMES", "check_writable"]


class _Part:
    """The rows of one checkpoint in one partition directory."""

    __slots__ = ("n", "rel", "buf", "rows", "writer", "path")

    def __init__(self, n, rel):
        self.n, self.rel, self.buf, self.rows, self.writer, self.path = n, rel, [], 0, None, None


class ParquetSink(TransactionalSink):
    """See the module docstring."""

    def __init__(self, directory, prefix="part", fields=None, schema=None, partition_by=(), task=None,
                 row_group_rows=65536, compression="snappy"):
        super().__init__()
        if not prefix or "/" in prefix or os.sep in prefix or prefix[0] in "._":
            raise SinkError(f"ParquetSink prefix must be a plain file-name part not starting with . or _, "
                            f"got {prefix!r}")
        if int(row_group_rows) < 1:
            raise SinkError(f"ParquetSink row_group_rows must be >= 1, got {row_group_rows!r}")
        self.directory = os.fspath(directory)
        self.prefix, self.task = prefix, task
        self.fields = list(fields) if fields is not None else None
        self.declared = dict(schema or {})
        self.partition_by = [partition_by] if isinstance(partition_by, str) else list(partition_by or ())
        self.row_group_rows = int(row_group_rows)
        self.compression = compression
        self.name = "ParquetSink"
        self._parts = {}      # n -> {rel dir: _Part}
        self._pending = {}    # n -> [pending paths] (pre-committed by this incarnation)
        self._found = {}      # (state, n) -> [paths], from the last _scan
        self._bad = {}        # n -> ParquetSchemaError: n may not be pre-committed
        self._rels = {}       # partition values -> rel dir
        self._buffered = 0
        self._bytes = 0       # uncompressed bytes of the row groups staged since the last pre_commit
        self._schema = None   # pyarrow schema, fixed when the first file is written

    def __repr__(self):
        return f"<ParquetSink {self.directory}/{self.prefix} task {self.task}>"

    # -- names --------------------------------------------------------------------------
    def file_name(self, state, n):
        body = f"{self.prefix}-{n}-{self.task}.parquet"
        return {"staged": f".staging-{body}", "pending": f".pending-{body}", "final": body}[state]

    # -- opening: columns, types, checks ------------------------------------------------
    def _open(self, context, config):
        load_pyarrow()  # (a one-line error without pyarrow)
        self.task = task_of(context, self.task)
        comp = getattr(context, "component", None)
        self.name = f"ParquetSink {comp!r}" if comp else "ParquetSink"
        if self.fields is None:
            self.fields = self._stream_fields(context)
        for f in self.partition_by:
            if f not in self.fields:
                raise ParquetSchemaError(f"{self.name}: partition field {f!r} is not a field of its input "
                                         f"(fields: {', '.join(self.fields)})")
        for f in self.declared:
            if f not in self.fields:
                raise ParquetSchemaError(f"{self.name}: schema declares field {f!r}, which is not a field of "
                                         f"its input (fields: {', '.join(self.fields)})")
            if f in self.partition_by:
                raise ParquetSchemaError(f"{self.name}: field {f!r} is a partition field; it is stored in the "
                                         "directory names, not typed in the file")
        self._pidx = [self.fields.index(f) for f in self.partition_by]
        self._didx = [i for i, f in enumerate(self.fields) if f not in self.partition_by]
        self.columns = [self.fields[i] for i in self._didx]
        if not self.columns:
            raise ParquetSchemaError(f"{self.name}: every field is a partition field; nothing is left to store")
        self._types = [arrow_type(self.declared[c], f"{self.name} field {c!r}") if c in self.declared else None
                       for c in self.columns]
        self._conv = [converter(t) if t is not None else None for t in self._types]
        self._fast = [fast_types(t) if t is not None else frozenset() for t in self._types]
        check_writable(self.directory, self.name)
        os.makedirs(self.directory, exist_ok=True)
        p, t = re.escape(self.prefix), re.escape(str(self.task))
        self._patterns = (("staged", re.compile(rf"^\.staging-{p}-(\d+)-{t}\.parquet$")),
                          ("pending", re.compile(rf"^\.pending-{p}-(\d+)-{t}\.parquet$")),
                          ("final", re.compile(rf"^{p}-(\d+)-{t}\.parquet$")))
        self._any_final = re.compile(rf"^{p}-\d+-\d+\.parquet$")

    def _stream_fields(self, context):
        sources = context.get_this_sources() if context is not None and hasattr(context, "get_this_sources") \
            else {}
        found = []
        for comp, stream in sources:
            fields = context.get_component_outputs(comp).get(stream)
            if fields is not None and fields not in found:
                found.append(fields)
        if len(found) != 1:
            raise ParquetSchemaError(f"{self.name}: pass fields= (its inputs declare "
                                     f"{'no fields' if not found else 'different fields'})")
        return list(found[0])

    # -- writing ------------------------------------------------------------------------
    def _write(self, n, values):
        if len(values) != len(self.fields):
            raise ParquetSchemaError(f"{self.name}: a tuple has {len(values)} values for {len(self.fields)} "
                                     f"fields ({', '.join(self.fields)})")
        if self._pidx:
            key = tuple(values[i] for i in self._pidx)
            rel = self._rels.get(key)
            if rel is None:
                rel = self._rels[key] = os.path.join(
                    *(f"{f}={hive_escape(v)}" for f, v in zip(self.partition_by, key)))
        else:
            rel = ""
        row = [values[i] for i in self._didx]
        fast = self._fast
        for j, v in enumerate(row):
            if v is not None and type(v) not in fast[j]:
                row[j] = self._convert(n, j, v)
        parts = self._parts.get(n)
        if parts is None:
            parts = self._parts[n] = {}
        part = parts.get(rel)
        if part is None:
            part = parts[rel] = _Part(n, rel)
        part.buf.append(row)
        part.rows += 1
        self._buffered += 1
        if part.rows >= self.row_group_rows:
            self._flush(part)
        elif self._buffered >= self.row_group_rows:
            self._flush(max((p for ps in self._parts.values() for p in ps.values()), key=lambda p: p.rows))

    def _convert(self, n, j, v):
        """A value off the fast path: the column's first (its type inferred), or one to
        convert or check."""
        c = self._conv[j]
        if c is None:
            self._types[j] = t = infer_type(v)
            c = self._conv[j] = converter(t)
            self._fast[j] = fast_types(t)
        try:
            return c(v)
        except (TypeError, ValueError) as e:
            self._refuse(n, j, v, e)

    def _refuse(self, n, j, value, exc):
        text = repr(value)
        text = text if len(text) <= 40 else text[:37] + "..."
        why = f" ({exc})" if str(exc) else ""
        err = ParquetSchemaError(f"{self.name}: field {self.columns[j]!r} is {self._types[j]}, got {text} "
                                 f"({type(value).__name__}){why}; nothing of its checkpoint (or commit group) {n} "
                                 f"becomes visible")
        self._bad.setdefault(n, err)
        raise err

    def _table(self, part):
        pa, _ = load_pyarrow()
        if self._schema is None:
            for j, t in enumerate(self._types):
                if t is None:
                    log.warning("%s: field %r had no value yet; stored as string (declare its type with "
                                "schema=)", self.name, self.columns[j])
                    self._types[j] = pa.string()
                    self._conv[j], self._fast[j] = converter(pa.string()), fast_types(pa.string())
            self._schema = pa.schema([pa.field(c, t) for c, t in zip(self.columns, self._types)])
        arrays = []
        for j, col in enumerate(zip(*part.buf)):
            try:
                arrays.append(pa.array(col, type=self._types[j]))
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as e:
                raise ParquetSchemaError(f"{self.name}: field {self.columns[j]!r} is {self._types[j]}, and a "
                                         f"value does not fit: {str(e).splitlines()[0]}") from None
        return pa.Table.from_arrays(arrays, schema=self._schema)

    def _flush(self, part):
        n = part.n
        if not part.rows:
            return
        _, pq = load_pyarrow()
        try:
            table = self._table(part)
        except ParquetSchemaError as e:
            self._bad.setdefault(n, e)
            raise
        if part.writer is None:
            d = os.path.join(self.directory, part.rel)
            os.makedirs(d, exist_ok=True)
            part.path = os.path.join(d, self.file_name("staged", n))
            # "wb": a file left under this name by an earlier incarnation was aborted by recover
            part.writer = pq.ParquetWriter(part.path, self._schema, compression=self.compression)
        part.writer.write_table(table, row_group_size=table.num_rows)
        self._bytes += table.nbytes
        self._buffered -= part.rows
        part.buf, part.rows = [], 0

    @property
    def staged_bytes(self):
        """Uncompressed bytes of the row groups written since the last pre-commit."""
        return self._bytes

    @property
    def buffered_rows(self):
        return self._buffered

    # -- the protocol's primitives ------------------------------------------------------
    def pre_commit(self, checkpoint_id):
        with self._lock:
            bad = [m for m in self._bad if m <= checkpoint_id]
            if bad:
                raise self._bad[min(bad)]
            super().pre_commit(checkpoint_id)

    def _pre_commit(self, n):
        parts = self._parts.pop(n, {})
        dirs, done = set(), []
        for part in parts.values():
            self._flush(part)
            if part.writer is None:
                continue
            part.writer.close()
            part.writer = None
            fsync_path(part.path)
            pending = os.path.join(os.path.dirname(part.path), self.file_name("pending", n))
            os.replace(part.path, pending)
            dirs.add(os.path.dirname(pending))
            done.append(pending)
        for d in dirs:
            fsync_dir(d)
        self._bytes = 0
        if done:
            self._pending.setdefault(n, []).extend(done)
            return True
        return bool(self._pending.get(n))

    def _commit(self, n):
        paths = self._pending.pop(n, None) or self._found.pop(("pending", n), [])
        dirs = set()
        for pending in paths:
            if not os.path.exists(pending):
                continue  # committed before a crash interrupted the commit
            final = os.path.join(os.path.dirname(pending), self.file_name("final", n))
            if os.path.exists(final):
                raise SinkError(f"{self!r}: checkpoint {n} is pending but {final} already exists")
            os.replace(pending, final)
            dirs.add(os.path.dirname(final))
        for d in dirs:
            fsync_dir(d)

    def _abort(self, n):
        self._bad.pop(n, None)
        paths = []
        for part in self._parts.pop(n, {}).values():
            self._buffered -= part.rows
            if part.writer is not None:
                part.writer.close()
                paths.append(part.path)
        paths += self._pending.pop(n, [])
        paths += self._found.pop(("staged", n), []) + self._found.pop(("pending", n), [])
        dirs = set()
        for path in paths:
            try:
                os.unlink(path)
                dirs.add(os.path.dirname(path))
            except FileNotFoundError:
                pass
        for d in dirs:
            fsync_dir(d)

    def _scan(self):
        found, final, sample = {}, set(), None
        for root, dirs, files in os.walk(self.directory):
            dirs[:] = [d for d in dirs if not d.startswith((".", "_"))]
            for name in files:
                for state, pattern in self._patterns:
                    m = pattern.match(name)
                    if m:
                        n = int(m.group(1))
                        if state == "final":
                            final.add(n)
                        else:
                            found.setdefault((state, n), []).append(os.path.join(root, name))
                        break
                if sample is None and self._any_final.match(name):
                    sample = os.path.join(root, name)
        self._found = found
        if self._schema is None and sample is not None:
            self._adopt_types(sample)
        pending = {n for s, n in found if s == "pending"}
        return Inventory(staged={n for s, n in found if s == "staged"}, precommitted=pending,
                         committed=final - pending)

    def _adopt_types(self, path):
        """Undeclared columns take their types from a committed file (a restarted task keeps
        the types its first incarnation inferred)."""
        _, pq = load_pyarrow()
        try:
            schema = pq.read_schema(path)
        except Exception as e:  # noqa: BLE001 - a foreign or damaged file: infer instead
            log.warning("%s: cannot read the schema of %s (%s); types are inferred", self.name, path, e)
            return
        for j, c in enumerate(self.columns):
            if self._types[j] is None and c in schema.names:
                self._types[j] = schema.field(c).type
                self._conv[j], self._fast[j] = converter(self._types[j]), fast_types(self._types[j])

    def _discard_volatile(self):
        for parts in self._parts.values():
            for part in parts.values():
                if part.writer is not None:
                    part.writer.close()
        self._parts.clear()
        self._pending.clear()
        self._bad.clear()
        self._buffered = self._bytes = 0

    def _close(self):
        self._discard_volatile()

    # -- reading ------------------------------------------------------------------------
    def committed_files(self):
        """This task's visible files (every partition), in checkpoint order."""
        out = []
        for root, dirs, files in os.walk(self.directory):
            dirs[:] = [d for d in dirs if not d.startswith((".", "_"))]
            for name in files:
                m = self._patterns[2][1].match(name)
                if m:
                    out.append((int(m.group(1)), os.path.join(root, name)))
        return [p for _, p in sorted(out)]


class ParquetSinkBolt(SinkBolt):
    """A ``SinkBolt`` writing Parquet; configure it on the class::

        class Out(ParquetSinkBolt):
            directory = "/data/daily"            # or sink.parquet.dir
            partition_by = ["day"]
            schema = {"events": "int64", "total": "int64"}

    Config keys (per component or topology) override the class: ``sink.parquet.dir``,
    ``.prefix``, ``.row.group.rows``, ``.compression``, ``.roll.rows``,
    ``.roll.seconds``, ``.roll.bytes``. Outside exactly once a file is committed (and its
    tuples acked) every ``roll_rows`` rows, ``roll_bytes`` uncompressed bytes or
    ``roll_seconds`` (at most a third of ``topology.message.timeout.secs``), whichever
    comes first."""

    directory = None
    prefix = "part"
    fields = None
    schema: dict = {}
    partition_by = ()
    row_group_rows = 65536
    compression = "snappy"
    roll_rows = 100_000
    roll_seconds = 10.0
    roll_bytes = 128 << 20

    @classmethod
    def settings(cls, config):
        config = config or {}

        def get(key, default):
            v = config.get(f"sink.parquet.{key}")
            return default if v is None or v == "" else v
        directory = get("dir", cls.directory)
        if not directory:
            raise SinkError(f"{cls.__qualname__}: no output directory: set `directory` on the class or "
                            "sink.parquet.dir")
        return {"directory": os.fspath(directory), "prefix": get("prefix", cls.prefix),
                "row_group_rows": int(get("row.group.rows", cls.row_group_rows)),
                "compression": get("compression", cls.compression),
                "roll_rows": int(get("roll.rows", cls.roll_rows)),
                "roll_seconds": float(get("roll.seconds", cls.roll_seconds)),
                "roll_bytes": int(get("roll.bytes", cls.roll_bytes))}

    @classmethod
    def preflight(cls, config):
        """Run by ``bittern submit``/``run`` before anything starts: pyarrow is there, the
        schema's type names are known, the output directory is writable."""
        s = cls.settings(config)
        load_pyarrow()
        for field, spec in (cls.schema or {}).items():
            arrow_type(spec, f"{cls.__qualname__}: field {field!r}")
        check_writable(s["directory"], f"{cls.__qualname__}")

    def make_sink(self, config, context):
        s = self.settings(config)
        return ParquetSink(s["directory"], s["prefix"], fields=self.fields, schema=self.schema,
                           partition_by=self.partition_by, row_group_rows=s["row_group_rows"],
                           compression=s["compression"])

    def initialize(self, config, context):
        super().initialize(config, context)
        if self._direct:
            s = self.settings(config)
            self.FLUSH_TUPLES = max(1, s["roll_rows"])
            timeout = float(config.get("topology.message.timeout.secs", 30) or 30)
            self._every = min(s["roll_seconds"], timeout / 3.0)
            self._roll_bytes = s["roll_bytes"]

    def process(self, tup):
        super().process(tup)
        if self._direct and self._held and self.sink.staged_bytes >= self._roll_bytes:
            self._flush_sink()
