"""Transactional sinks: every crash point of the two-phase commit, for the file and
the SQLite sink, and Trident's txid/opaque rules.

A crash is simulated by abandoning the sink object between two calls (no close)
and opening a new one over the same directory or database, which is what a
restarted task does: open, then recover with what the checkpoint store says.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import random
import sqlite3
import threading
from collections import Counter
from types import SimpleNamespace

import pytest

from bittern.api.tuple import Tuple
from bittern.sinks import (DictStore, EncodedStore, FileSink, OpaqueValue, SinkBolt, SinkError, SqliteSink,
                           TxidOrderError, TxidValue)

COLUMNS = ["task", "ck", "i"]


def ctx(task):
    return SimpleNamespace(task_id=task, topology_name="topo", component="out")


class FileKit:
    kind = "file"
    durable_staging = True     # staged output is on disk (recover reports it aborted)

    def __init__(self, root):
        self.dir = str(root / "out")

    def make(self, task=1, **kw):
        s = FileSink(self.dir, "part", **kw)
        s.open(ctx(task), {})
        return s

    def visible(self):
        rows = []
        for name in sorted(os.listdir(self.dir)):
            if name.startswith("part-") and name.endswith(".jsonl"):
                with open(os.path.join(self.dir, name), encoding="utf-8") as f:
                    rows.extend(tuple(json.loads(line)) for line in f)
        return rows

    def leftovers(self):
        """Hidden (staged or pending) files of any task."""
        return sorted(n for n in os.listdir(self.dir) if n.startswith("."))


class SqliteKit:
    kind = "sqlite"
    durable_staging = False    # staged rows are in memory until spill_rows (a crash drops them)

    def __init__(self, root):
        self.path = str(root / "out.db")

    def make(self, task=1, **kw):
        s = SqliteSink(self.path, "results", COLUMNS, **kw)
        s.open(ctx(task), {})
        return s

    def _query(self, sql):
        conn = sqlite3.connect(self.path)
        try:
            return conn.execute(sql).fetchall()
        finally:
            conn.close()

    def visible(self):
        return self._query("SELECT task, ck, i FROM results ORDER BY rowid")

    def leftovers(self):
        pending = self._query("SELECT bittern_task, bittern_checkpoint FROM bittern_pending__results")
        marks = self._query("SELECT task, checkpoint FROM bittern_commits WHERE state != 'committed'")
        return sorted(set(pending) | set(marks))


@pytest.fixture(params=["file", "sqlite"])
def kit(request, tmp_path):
    return FileKit(tmp_path) if request.param == "file" else SqliteKit(tmp_path)


def rows(task, ck, count, start=0):
    return [(task, ck, i) for i in range(start, start + count)]


def staged(kit, *ids):
    """What recover reports aborted among staged-only checkpoints ``ids``."""
    return list(ids) if kit.durable_staging else []


def write_all(sink, ck, values):
    for v in values:
        sink.write(ck, list(v))


def crash(sink):
    """Abandon ``sink`` without closing it (the process died)."""
    del sink


# -- crash points of the two-phase commit ------------------------------------------------

def test_staged_not_precommitted_is_aborted(kit):
    s = kit.make()
    s.recover([], None)
    write_all(s, 1, rows(1, 1, 5))
    crash(s)
    s = kit.make()
    report = s.recover([], None)
    assert report.aborted == staged(kit, 1) and report.committed == []
    assert kit.visible() == [] and kit.leftovers() == []


def test_staged_after_a_complete_checkpoint_is_aborted(kit):
    s = kit.make()
    s.recover([], None)
    write_all(s, 1, rows(1, 1, 3))
    s.pre_commit(1)
    s.commit(1)
    write_all(s, 2, rows(1, 2, 3))
    crash(s)
    s = kit.make()
    report = s.recover([1], 1)
    assert report.aborted == staged(kit, 2) and report.already_committed == [1]
    assert kit.visible() == rows(1, 1, 3) and kit.leftovers() == []


def test_precommitted_and_complete_is_committed_once(kit):
    s = kit.make()
    s.recover([], None)
    write_all(s, 1, rows(1, 1, 4))
    s.pre_commit(1)
    assert kit.visible() == []               # durable, not visible
    crash(s)                                  # died before commit(1) arrived
    s = kit.make()
    report = s.recover([1], 1)
    assert report.committed == [1] and report.aborted == []
    assert kit.visible() == rows(1, 1, 4)
    assert s.commit(1) == []                  # the late notification: a no-op
    crash(s)
    s = kit.make()
    assert s.recover([1], 1).committed == []  # recovering again commits nothing twice
    assert kit.visible() == rows(1, 1, 4) and kit.leftovers() == []


def test_precommitted_but_not_complete_is_aborted(kit):
    s = kit.make()
    s.recover([], None)
    write_all(s, 1, rows(1, 1, 2))
    s.pre_commit(1)
    s.commit(1)
    write_all(s, 2, rows(1, 2, 2))
    s.pre_commit(2)
    write_all(s, 3, rows(1, 3, 2))
    crash(s)                                  # 2 never completed: roll back to 1
    s = kit.make()
    report = s.recover([1], 1)
    assert report.aborted == [2] + staged(kit, 3) and report.committed == []
    assert kit.visible() == rows(1, 1, 2) and kit.leftovers() == []


def test_committed_then_crash(kit):
    s = kit.make()
    s.recover([], None)
    write_all(s, 1, rows(1, 1, 3))
    s.pre_commit(1)
    assert s.commit(1) == [1]
    crash(s)
    s = kit.make()
    report = s.recover([1], 1)
    assert report.committed == [] and report.already_committed == [1]
    assert kit.visible() == rows(1, 1, 3)


def test_commit_twice_is_once(kit):
    s = kit.make()
    s.recover([], None)
    write_all(s, 1, rows(1, 1, 3))
    s.pre_commit(1)
    assert s.commit(1) == [1]
    assert s.commit(1) == []
    assert kit.visible() == rows(1, 1, 3)


def test_commit_covers_a_lost_notification(kit):
    s = kit.make()
    s.recover([], None)
    write_all(s, 1, rows(1, 1, 2))
    s.pre_commit(1)
    write_all(s, 2, rows(1, 2, 2))
    s.pre_commit(2)
    assert s.pending == [1, 2]
    assert s.commit(2) == [1, 2]             # commit(1) never arrived
    assert kit.visible() == rows(1, 1, 2) + rows(1, 2, 2)


def test_recover_commits_a_checkpoint_subsumed_by_a_later_complete_one(kit):
    s = kit.make()
    s.recover([], None)
    write_all(s, 1, rows(1, 1, 2))
    s.pre_commit(1)                           # 1 was declined by the coordinator...
    write_all(s, 2, rows(1, 2, 2))
    s.pre_commit(2)                           # ...but 2 completed: it covers 1's input
    crash(s)
    s = kit.make()
    assert s.recover([2], 2).committed == [1, 2]
    assert kit.visible() == rows(1, 1, 2) + rows(1, 2, 2)


def test_replay_after_abort_does_not_duplicate(kit):
    s = kit.make()
    s.recover([], None)
    write_all(s, 1, rows(1, 1, 5))
    s.pre_commit(1)
    s.abort(1)                                 # rolled back past 1 while alive
    write_all(s, 1, rows(1, 1, 3))             # the replay of checkpoint 1 (less this time)
    s.pre_commit(1)
    s.commit(1)
    assert kit.visible() == rows(1, 1, 3) and kit.leftovers() == []


def test_replay_after_crash_does_not_duplicate(kit):
    s = kit.make()
    s.recover([], None)
    write_all(s, 1, rows(1, 1, 2))
    s.pre_commit(1)
    s.commit(1)
    write_all(s, 2, rows(1, 2, 4))
    s.pre_commit(2)
    crash(s)
    for _ in range(2):                         # the replay itself crashes once
        s = kit.make()
        s.recover([1], 1)
        assert s.current_checkpoint == 2
        write_all(s, 2, rows(1, 2, 4))
        crash(s)
    s = kit.make()
    s.recover([1], 1)
    write_all(s, 2, rows(1, 2, 4))
    s.pre_commit(2)
    s.commit(2)
    assert kit.visible() == rows(1, 1, 2) + rows(1, 2, 4)
    assert kit.leftovers() == []


def test_staged_abort_of_open_checkpoint(kit):
    s = kit.make()
    s.recover([], None)
    write_all(s, 1, rows(1, 1, 2))
    s.abort(1)
    s.abort(1)                                 # idempotent
    s.pre_commit(1)
    s.commit(1)
    assert kit.visible() == [] and kit.leftovers() == []


def test_empty_checkpoint_leaves_nothing(kit):
    s = kit.make()
    s.recover([], None)
    s.pre_commit(1)
    assert s.commit(1) == []
    write_all(s, 2, rows(1, 2, 1))
    s.pre_commit(2)
    s.commit(2)
    assert kit.visible() == rows(1, 2, 1) and kit.leftovers() == []


def test_multiple_tasks_recover_only_their_own(kit):
    a, b = kit.make(1), kit.make(2)
    a.recover([], None)
    b.recover([], None)
    write_all(a, 1, rows(1, 1, 3))
    write_all(b, 1, rows(2, 1, 2))
    a.pre_commit(1)
    b.pre_commit(1)
    write_all(b, 2, rows(2, 2, 2))
    write_all(a, 2, rows(1, 2, 2))
    a.pre_commit(2)
    crash(a)
    crash(b)
    a = kit.make(1)
    assert a.recover([1], 1).committed == [1]
    assert sorted(kit.visible()) == rows(1, 1, 3)     # task 2's pending 1 waits for task 2
    b = kit.make(2)
    report = b.recover([1], 1)
    assert report.committed == [1] and report.aborted == staged(kit, 2)
    assert sorted(kit.visible()) == sorted(rows(1, 1, 3) + rows(2, 1, 2))
    assert kit.leftovers() == []


def test_contract_violations_are_refused(kit):
    s = kit.make()
    with pytest.raises(SinkError, match="before recover"):
        s.write(1, [1, 1, 1])
    s.recover([], None)
    with pytest.raises(SinkError, match="integer >= 1"):
        s.write(0, [1, 0, 0])
    write_all(s, 1, rows(1, 1, 1))
    s.pre_commit(1)
    with pytest.raises(SinkError, match="already pre-committed"):
        s.write(1, [1, 1, 9])
    with pytest.raises(SinkError, match="before pre_commit"):
        s.commit(2)
    s.pre_commit(1)                            # repeated: a no-op
    write_all(s, 2, rows(1, 2, 1))
    s.pre_commit(2)
    with pytest.raises(SinkError, match="already pre-committed"):
        s.pre_commit(1)
    s.commit(2)
    with pytest.raises(SinkError, match="already committed"):
        s.abort(2)
    assert kit.visible() == rows(1, 1, 1) + rows(1, 2, 1)


def test_rollback_to_an_older_checkpoint_reports_irrevocable_output(kit):
    s = kit.make()
    s.recover([], None)
    write_all(s, 1, rows(1, 1, 1))
    s.pre_commit(1)
    s.commit(1)
    write_all(s, 2, rows(1, 2, 1))
    s.pre_commit(2)
    s.commit(2)
    crash(s)
    s = kit.make()
    report = s.recover([1, 2], 1)              # restoring to 1 on purpose
    assert report.beyond_restore == [2]
    with pytest.raises(SinkError, match="already committed"):
        s.write(2, [1, 2, 0])                  # would overwrite visible output


@pytest.mark.parametrize("seed", range(12))
def test_random_crashes_deliver_every_item_exactly_once(kit, seed):
    """A replaying source, checkpoints every few items, completion notices that
    arrive late or never, and crashes between any two calls: the visible output is
    every item exactly once."""
    rng = random.Random(seed)
    total, per_ck = 120, 7
    completed = []                 # the checkpoint store: complete ids
    offsets = {0: 0}               # checkpoint -> source offset saved with it
    sink = kit.make()
    sink.recover([], None)
    offset, n, pending_notices = 0, 1, []

    def restart():
        nonlocal sink, offset, n, pending_notices
        crash(sink)
        last = completed[-1] if completed else None
        sink = kit.make()
        sink.recover(list(completed), last)
        offset = offsets[last or 0]
        n = (last or 0) + 1        # the coordinator reuses ids after a rollback
        pending_notices = []

    while offset < total or pending_notices:
        if rng.random() < 0.04:
            restart()
            continue
        if offset < total:
            for i in range(offset, min(offset + per_ck, total)):
                sink.write(n, [1, 0, i])
                if rng.random() < 0.01:
                    break
            else:
                i = min(offset + per_ck, total) - 1
            offset = i + 1
            if rng.random() < 0.05:
                restart()
                continue
            sink.pre_commit(n)
            offsets[n] = offset
            if rng.random() < 0.05:
                restart()          # died after saving n: n never completes
                continue
            completed.append(n)    # every task saved n: complete
            pending_notices.append(n)
            n += 1
        if pending_notices and rng.random() < 0.6:
            notice = pending_notices.pop(rng.randrange(len(pending_notices)))
            if rng.random() < 0.8:  # some notices are lost; a later one covers them
                sink.commit(notice)
            if rng.random() < 0.05:
                restart()
                continue
        if offset >= total and pending_notices:
            sink.commit(max(pending_notices))
            pending_notices = []
    sink.commit(completed[-1])     # the last notice (a lost one is covered by the next)
    items = [r[2] for r in kit.visible()]
    assert Counter(items) == Counter(range(total))
    assert kit.leftovers() == []


# -- the file sink -----------------------------------------------------------------------

def test_file_sink_names_and_contents(tmp_path):
    s = FileSink(tmp_path, "clicks")
    s.open(ctx(7), {})
    s.recover([], None)
    s.write(1, ["a", 1, {"k": "é"}])
    assert os.listdir(tmp_path) == [".staging-clicks-1-7.tmp"]
    s.pre_commit(1)
    assert os.listdir(tmp_path) == [".pending-clicks-1-7"]
    s.write(2, ["b", 2, None])
    s.commit(1)
    assert sorted(os.listdir(tmp_path)) == [".staging-clicks-2-7.tmp", "clicks-1-7.jsonl"]
    with open(tmp_path / "clicks-1-7.jsonl", encoding="utf-8") as f:
        assert f.read() == '["a",1,{"k":"é"}]\n'
    assert s.committed_files() == [str(tmp_path / "clicks-1-7.jsonl")]
    s.close()


def test_file_sinks_with_other_prefixes_share_a_directory(tmp_path):
    a, b = FileSink(tmp_path, "a"), FileSink(tmp_path, "b")
    a.open(ctx(1), {})
    b.open(ctx(1), {})
    a.recover([], None)
    b.recover([], None)
    a.write(1, [1])
    b.write(1, [2])
    a.pre_commit(1)
    b.pre_commit(1)
    a.commit(1)
    b2 = FileSink(tmp_path, "b")
    b2.open(ctx(1), {})
    assert b2.recover([], None).aborted == [1]
    assert sorted(os.listdir(tmp_path)) == ["a-1-1.jsonl"]


def test_file_sink_rejects_bad_prefix(tmp_path):
    for bad in ("", "x/y", ".hidden"):
        with pytest.raises(SinkError):
            FileSink(tmp_path, bad)


# -- the SQLite sink ---------------------------------------------------------------------

class CrashInCommit(SqliteSink):
    def _mark_committed(self, conn, n):
        raise KeyboardInterrupt("died inside the commit transaction")


def test_sqlite_crash_inside_the_commit_transaction(tmp_path):
    kit = SqliteKit(tmp_path)
    s = CrashInCommit(kit.path, "results", COLUMNS)
    s.open(ctx(1), {})
    s.recover([], None)
    write_all(s, 1, rows(1, 1, 5))
    s.pre_commit(1)
    with pytest.raises(KeyboardInterrupt):
        s.commit(1)                            # rows were moved, then the process died
    assert kit.visible() == []                 # the transaction never happened
    crash(s)
    s = kit.make()
    assert s.recover([1], 1).committed == [1]
    assert kit.visible() == rows(1, 1, 5) and kit.leftovers() == []


def test_sqlite_spilled_rows_of_a_dead_task_are_aborted(tmp_path):
    kit = SqliteKit(tmp_path)
    s = kit.make(spill_rows=3)
    s.recover([], None)
    write_all(s, 1, rows(1, 1, 10))
    assert len(kit.leftovers()) == 1           # spilled to the pending table
    crash(s)
    s = kit.make(spill_rows=3)
    assert s.recover([], None).aborted == [1]
    assert kit.leftovers() == []
    write_all(s, 1, rows(1, 1, 7))
    s.pre_commit(1)
    s.commit(1)
    assert kit.visible() == rows(1, 1, 7)      # spilled and buffered rows, in order


def test_sqlite_bookkeeping_and_dict_rows(tmp_path):
    kit = SqliteKit(tmp_path)
    s = kit.make(task=4)
    s.recover([], None)
    s.write(1, {"i": 0, "ck": 1, "task": 4})
    s.write(1, [4, 1, 1])
    with pytest.raises(SinkError, match="values for columns"):
        s.write(1, [4, 1])
    s.pre_commit(1)
    assert kit._query("SELECT sink, task, checkpoint, state, rows FROM bittern_commits") == \
        [("topo/out", 4, 1, "precommitted", 2)]
    s.commit(1)
    assert kit._query("SELECT state FROM bittern_commits") == [("committed",)]
    assert kit.visible() == rows(4, 1, 2)
    assert s.rows() == rows(4, 1, 2)
    assert kit._query("PRAGMA journal_mode") == [("wal",)]
    s.close()


def test_sqlite_sinks_with_other_ids_share_a_table(tmp_path):
    kit = SqliteKit(tmp_path)
    a = kit.make(1, sink_id="run-a")
    b = kit.make(1, sink_id="run-b")
    a.recover([], None)
    b.recover([], None)
    write_all(a, 1, rows(1, 1, 2))
    write_all(b, 1, rows(1, 1, 3, start=10))
    a.pre_commit(1)
    b.pre_commit(1)
    b.commit(1)
    crash(a)
    a = kit.make(1, sink_id="run-a")
    assert a.recover([], None).aborted == [1]  # a's checkpoint 1 never completed
    assert kit.visible() == rows(1, 1, 3, start=10)


def _sqlite_task(path, task, checkpoints, per_ck, barrier=None):
    s = SqliteSink(path, "results", COLUMNS, busy_timeout=60)
    s.open(ctx(task), {})
    if barrier is not None:
        barrier.wait()
    s.recover([], None)
    for n in range(1, checkpoints + 1):
        for i in range(per_ck):
            s.write(n, [task, n, i])
        s.pre_commit(n)
        if n > 1:
            s.commit(n - 1)                    # completion arrives one checkpoint late
    s.commit(checkpoints)
    s.close()


def test_sqlite_concurrent_tasks_in_threads(tmp_path):
    kit = SqliteKit(tmp_path)
    tasks, cks, per_ck = 4, 12, 15
    barrier = threading.Barrier(tasks)
    errors = []

    def run(task):
        try:
            _sqlite_task(kit.path, task, cks, per_ck, barrier)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(1, tasks + 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    expected = [(t, n, i) for t in range(1, tasks + 1) for n in range(1, cks + 1) for i in range(per_ck)]
    assert sorted(kit.visible()) == expected
    assert kit._query("SELECT count(*) FROM bittern_commits WHERE state = 'committed'") == [(tasks * cks,)]
    assert kit.leftovers() == []


def test_sqlite_concurrent_tasks_in_processes(tmp_path):
    kit = SqliteKit(tmp_path)
    mp = multiprocessing.get_context("fork")
    procs = [mp.Process(target=_sqlite_task, args=(kit.path, t, 8, 10)) for t in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    assert [p.exitcode for p in procs] == [0, 0]
    expected = [(t, n, i) for t in (1, 2) for n in range(1, 9) for i in range(10)]
    assert sorted(kit.visible()) == expected


# -- the bolt ----------------------------------------------------------------------------

def test_sink_bolt_writes_under_the_current_checkpoint(tmp_path):
    class Out(SinkBolt):
        def make_sink(self, config, context):
            return FileSink(config["out.dir"], "out")

        def row(self, tup):
            return [tup.values[0] * 10]

    bolt = Out()
    bolt.initialize({"out.dir": str(tmp_path), "topology.reliability.mode": "EFFECTIVELY_ONCE"}, ctx(2))
    bolt.sink.recover([], None)
    for v in range(3):
        bolt.process(Tuple(None, "src", "default", 1, [v]))
    bolt.sink.pre_commit(1)
    bolt.process(Tuple(None, "src", "default", 1, [9]))
    bolt.sink.commit(1)
    bolt.close()
    with open(tmp_path / "out-1-2.jsonl") as f:
        assert f.read().split() == ["[0]", "[10]", "[20]"]
    assert os.path.exists(tmp_path / ".staging-out-2-2.tmp")


# -- Trident's txid rules ----------------------------------------------------------------

def add(k):
    return lambda v: (v or 0) + k


def test_txid_value_skips_a_replayed_txid():
    store = {}
    assert TxidValue.apply(store, "a", 1, add(3)) == (TxidValue(3, 1), True)
    assert TxidValue.apply(store, "a", 1, add(3)) == (TxidValue(3, 1), False)
    assert TxidValue.apply(store, "a", 2, add(4)).record == TxidValue(7, 2)
    assert TxidValue.apply(store, "a", 2, add(4)).applied is False
    assert store == {"a": TxidValue(7, 2)}
    with pytest.raises(TxidOrderError):
        TxidValue.apply(store, "a", 1, add(1))


def test_opaque_value_recomputes_a_replayed_txid_from_prev():
    store = DictStore()
    OpaqueValue.apply(store, "a", 1, add(2))
    assert store.get("a") == OpaqueValue(2, None, 1)
    OpaqueValue.apply(store, "a", 2, add(5))
    assert store.get("a") == OpaqueValue(7, 2, 2)
    # txid 2 replayed with different contents: its first attempt is replaced, not added to
    assert OpaqueValue.apply(store, "a", 2, add(1)) == (OpaqueValue(3, 2, 2), True)
    assert OpaqueValue.apply(store, "a", 2, add(1)).applied is False     # same replay again
    assert OpaqueValue.apply(store, "a", 3, add(10)).record == OpaqueValue(13, 3, 3)
    assert store.get("a").value == 13
    assert store.puts == 4
    with pytest.raises(TxidOrderError):
        OpaqueValue.apply(store, "a", 2, add(1))


def test_encoded_store_round_trips_records():
    raw = {}
    store = EncodedStore(raw)
    TxidValue.apply(store, "k", 5, add(1))
    assert raw == {"k": "[1, 5]"}
    assert TxidValue.apply(store, "k", 5, add(1)).applied is False
    OpaqueValue.apply(store, "o", 5, add(2))
    OpaqueValue.apply(store, "o", 5, add(3))
    assert json.loads(raw["o"]) == [3, None, 5]


def test_txid_rule_makes_a_retried_commit_idempotent():
    """A commit applying a checkpoint's durable updates to a store without
    transactions dies half way; running it again applies each key once."""
    store = DictStore({"x": TxidValue(100, 3)})
    updates = {"x": 1, "y": 2, "z": 3}           # pre-committed for checkpoint 4

    def commit(n, die_after=None):
        for j, (key, delta) in enumerate(sorted(updates.items())):
            if j == die_after:
                raise RuntimeError("crash")
            TxidValue.apply(store, key, n, add(delta))

    with pytest.raises(RuntimeError):
        commit(4, die_after=2)
    commit(4)
    commit(4)
    assert {k: v.value for k, v in store.data.items()} == {"x": 101, "y": 2, "z": 3}


def test_sink_bolt_outside_exactly_once_commits_in_groups_then_acks(tmp_path):
    """At least once: written, committed (durable, visible), then acked; a new
    incarnation numbers its commits above the old ones and aborts what was left staged."""
    class Out(SinkBolt):
        def make_sink(self, config, context):
            return FileSink(config["out.dir"], "out")

    conf = {"out.dir": str(tmp_path), "topology.reliability.mode": "ATLEAST_ONCE",
            "topology.batch.flush.interval.millis": 5}
    acked = []
    bolt = Out()
    bolt.ack, bolt.fail = acked.append, None
    bolt.initialize(conf, ctx(2))
    tups = [Tuple(None, "src", "default", 1, [v]) for v in range(3)]
    for t in tups:
        bolt.process(t)
    assert acked == []  # nothing durable yet
    assert bolt._runtime_flush(now=bolt._since + 1.0) > 0
    assert acked == tups
    with open(tmp_path / "out-1-2.jsonl") as f:
        assert f.read().split() == ["[0]", "[1]", "[2]"]
    bolt.process(Tuple(None, "src", "default", 1, [7]))  # staged, never committed: "killed"
    again = Out()
    again.ack = acked.append
    again.initialize(conf, ctx(2))
    assert again._next == 2
    again.process(Tuple(None, "src", "default", 1, [8]))
    again.close()
    with open(tmp_path / "out-2-2.jsonl") as f:
        assert f.read().split() == ["[8]"]
