"""A transactional SQLite sink: rows reach the target table only for complete checkpoints.

Three tables in the database file::

    <table>                      the output; created (untyped columns) if missing
    bittern_pending__<table>     staged rows, tagged (bittern_sink, bittern_task,
                                 bittern_checkpoint), in arrival order (rowid)
    bittern_commits              one row per (sink, task, checkpoint) that reached
                                 phase 1: state 'precommitted' or 'committed', rows

Tuples are buffered in memory while a checkpoint is open (spilled to the pending
table in short transactions past ``spill_rows``). Phase 1 (``pre_commit``) is one
transaction: the remaining rows go to the pending table and the checkpoint is
recorded as 'precommitted'. Phase 2 (``commit``) is one transaction: the rows
move to the target table and the record turns 'committed', so a commit either
happened completely or not at all, and repeating it finds 'committed' and does
nothing. Pending rows without a 'precommitted' record are staged output of a
task that died before phase 1; ``recover`` deletes them.

Several sink tasks (threads or processes) can share one file: the database runs
in WAL mode (readers never block the writer), every write transaction is
``BEGIN IMMEDIATE`` (the write lock is taken up front, so there are no lock
upgrade deadlocks) and a busy timeout makes a task wait for another's short
transaction instead of failing. ``synchronous=FULL`` makes every commit durable.

``sink_id`` names this sink in the bookkeeping; it defaults to
``<topology>/<component>`` from the context. A new run of a topology that starts
checkpoint ids from 1 again needs a fresh ``sink_id`` (or database): committed
checkpoint ids are never written twice.
"""
from __future__ import annotations

import sqlite3
import time
from collections.abc import Mapping
from contextlib import contextmanager

from .base import Inventory, SinkError, TransactionalSink, task_of

COMMITS_TABLE = "bittern_commits"


def quote_ident(name):
    if not isinstance(name, str) or not name or "\x00" in name:
        raise SinkError(f"invalid SQL identifier {name!r}")
    return '"' + name.replace('"', '""') + '"'


class SqliteSink(TransactionalSink):
    def __init__(self, path, table, columns, *, sink_id=None, task=None, busy_timeout=30.0,
                 spill_rows=10_000):
        super().__init__()
        columns = list(columns)
        if not columns:
            raise SinkError("SqliteSink needs at least one column")
        if len(set(columns)) != len(columns):
            raise SinkError(f"SqliteSink columns repeat a name: {columns}")
        for c in columns:
            quote_ident(c)
            if c.lower().startswith("bittern_"):
                raise SinkError(f"column {c!r}: names starting with bittern_ are reserved")
        self.path = str(path)
        self.table = table
        self.columns = columns
        self.sink_id = sink_id
        self.task = task
        self.busy_timeout = float(busy_timeout)
        self.spill_rows = int(spill_rows)
        self.pending_table = f"bittern_pending__{table}"
        self._conn = None
        self._buffer = {}   # n -> [row tuple]
        self._buffered = 0

        t, p = quote_ident(table), quote_ident(self.pending_table)
        cols = ", ".join(quote_ident(c) for c in columns)
        marks = ", ".join("?" for _ in columns)
        where = "bittern_sink = ? AND bittern_task = ? AND bittern_checkpoint = ?"
        self._sql_create = [
            f"CREATE TABLE IF NOT EXISTS {t} ({cols})",
            f"CREATE TABLE IF NOT EXISTS {p} (bittern_sink TEXT NOT NULL, bittern_task INTEGER NOT NULL, "
            f"bittern_checkpoint INTEGER NOT NULL, {cols})",
            f"CREATE INDEX IF NOT EXISTS {quote_ident(self.pending_table + '_by_checkpoint')} "
            f"ON {p} (bittern_sink, bittern_task, bittern_checkpoint)",
            f"CREATE TABLE IF NOT EXISTS {COMMITS_TABLE} (sink TEXT NOT NULL, task INTEGER NOT NULL, "
            f"checkpoint INTEGER NOT NULL, state TEXT NOT NULL, rows INTEGER NOT NULL, updated REAL NOT NULL, "
            f"PRIMARY KEY (sink, task, checkpoint))",
        ]
        self._sql_stage = f"INSERT INTO {p} (bittern_sink, bittern_task, bittern_checkpoint, {cols}) " \
                          f"VALUES (?, ?, ?, {marks})"
        self._sql_count = f"SELECT count(*) FROM {p} WHERE {where}"
        self._sql_move = f"INSERT INTO {t} ({cols}) SELECT {cols} FROM {p} WHERE {where} ORDER BY rowid"
        self._sql_drop = f"DELETE FROM {p} WHERE {where}"
        self._sql_staged = f"SELECT DISTINCT bittern_checkpoint FROM {p} WHERE bittern_sink = ? AND bittern_task = ?"

    def __repr__(self):
        return f"<SqliteSink {self.path}:{self.table} sink {self.sink_id!r} task {self.task}>"

    # -- connection ---------------------------------------------------------------------
    @contextmanager
    def _tx(self):
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            raise
        conn.execute("COMMIT")

    def _key(self, n):
        return (self.sink_id, self.task, n)

    def _state(self, conn, n):
        row = conn.execute(f"SELECT state FROM {COMMITS_TABLE} WHERE sink = ? AND task = ? AND checkpoint = ?",
                           self._key(n)).fetchone()
        return row[0] if row else None

    def _row(self, values):
        if isinstance(values, Mapping):
            try:
                return tuple(values[c] for c in self.columns)
            except KeyError as e:
                raise SinkError(f"{self!r}: row {values!r} has no column {e.args[0]!r}") from None
        row = tuple(values)
        if len(row) != len(self.columns):
            raise SinkError(f"{self!r}: row {row!r} has {len(row)} values for columns {self.columns}")
        return row

    def _flush(self, conn, n):
        rows = self._buffer.pop(n, None)
        if rows:
            key = self._key(n)
            conn.executemany(self._sql_stage, (key + r for r in rows))
            self._buffered -= len(rows)

    # -- primitives ---------------------------------------------------------------------
    def _open(self, context, config):
        self.task = task_of(context, self.task)
        if self.sink_id is None:
            topo = getattr(context, "topology_name", None)
            comp = getattr(context, "component", None)
            self.sink_id = f"{topo}/{comp}" if topo and comp else self.table
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None,
                               check_same_thread=False)
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            self._conn = conn
            with self._tx():
                for sql in self._sql_create:
                    conn.execute(sql)
        except BaseException:
            self._conn = None
            conn.close()
            raise

    def _write(self, n, values):
        self._buffer.setdefault(n, []).append(self._row(values))
        self._buffered += 1
        if self._buffered >= self.spill_rows:
            with self._tx() as conn:
                for m in list(self._buffer):
                    self._flush(conn, m)

    def _pre_commit(self, n):
        with self._tx() as conn:
            self._flush(conn, n)
            count = conn.execute(self._sql_count, self._key(n)).fetchone()[0]
            if not count:
                return False
            state = self._state(conn, n)
            if state is not None:
                raise SinkError(f"{self!r}: checkpoint {n} is already {state}")
            conn.execute(f"INSERT INTO {COMMITS_TABLE} (sink, task, checkpoint, state, rows, updated) "
                         f"VALUES (?, ?, ?, 'precommitted', ?, ?)", self._key(n) + (count, time.time()))
        return True

    def _commit(self, n):
        with self._tx() as conn:
            if self._state(conn, n) != "precommitted":
                return  # committed already, or nothing was written in n
            self._move_rows(conn, n)
            self._mark_committed(conn, n)

    def _move_rows(self, conn, n):
        conn.execute(self._sql_move, self._key(n))
        conn.execute(self._sql_drop, self._key(n))

    def _mark_committed(self, conn, n):
        conn.execute(f"UPDATE {COMMITS_TABLE} SET state = 'committed', updated = ? "
                     f"WHERE sink = ? AND task = ? AND checkpoint = ?", (time.time(),) + self._key(n))

    def _abort(self, n):
        rows = self._buffer.pop(n, None)
        if rows:
            self._buffered -= len(rows)
        with self._tx() as conn:
            conn.execute(self._sql_drop, self._key(n))  # pending rows are never committed output
            conn.execute(f"DELETE FROM {COMMITS_TABLE} WHERE sink = ? AND task = ? AND checkpoint = ? "
                         f"AND state = 'precommitted'", self._key(n))

    def _scan(self):
        inv = Inventory()
        conn = self._conn
        for n, state in conn.execute(f"SELECT checkpoint, state FROM {COMMITS_TABLE} WHERE sink = ? AND task = ?",
                                     (self.sink_id, self.task)):
            (inv.committed if state == "committed" else inv.precommitted).add(n)
        for (n,) in conn.execute(self._sql_staged, (self.sink_id, self.task)):
            if n not in inv.precommitted:
                inv.staged.add(n)
        return inv

    def _discard_volatile(self):
        self._buffer.clear()
        self._buffered = 0

    def _close(self):
        self._discard_volatile()
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- reading ------------------------------------------------------------------------
    def rows(self):
        """The target table's rows in insertion order (all tasks)."""
        cols = ", ".join(quote_ident(c) for c in self.columns)
        return self._conn.execute(f"SELECT {cols} FROM {quote_ident(self.table)} ORDER BY rowid").fetchall()
