"""Rebases (issue 16, the disk backend at 10M keys): a disk-backed store never writes a
long chain's base as a checkpoint's own file; the checkpoint is a delta, and a base of
the same state replaces it later from a second thread (instance/ckptwriter.py's
Rebaser, CheckpointStore.rebase), after which the policy's chains start there
(instance/incremental.py's rebase mode). Here: the policy, the store's rebase, readers
that find a link gone after a rebase, and the writer and rebaser threads of one
instance's Checkpointing with a real RocksDB store."""
from __future__ import annotations

import os
import shutil
import threading
import time
from types import SimpleNamespace

import pytest

import instance.ckptwriter as cw
from bittern.api.deltas import encode_delta
from bittern.api.state import ChangeLog, KeyGroups, State
from bittern.checkpoint import CheckpointError, CheckpointMissing, CheckpointStore, read_parent
from bittern.state import LocalStateManager
from bittern.wire import Op
from instance.ckptwriter import Checkpointing
from instance.incremental import COMPACT, DELTA, FULL, IncrementalPolicy

KG = KeyGroups(16)


@pytest.fixture
def store(tmp_path):
    return CheckpointStore(str(tmp_path / "ckpt"), LocalStateManager(str(tmp_path / "home")), "rb", keep=3)


def _log(*keys):
    return ChangeLog({0: {k: 1 for k in keys}}, set())


def content(st):
    return (dict(st.items()), {g: dict(st.keyed.group_items(g)) for g in st.keyed.groups()})


# -- the policy -----------------------------------------------------------------------------

def test_rebase_mode_writes_deltas_past_max_and_rebased_n_resets_the_depth():
    p = IncrementalPolicy(max_deltas=2, keep=3, rebase=True)
    plan = p.plan(1, _log("a"))
    assert (plan.kind, plan.parent, plan.rebase) == (COMPACT, None, False)  # no parent: a base as before
    p.complete(1)
    for cid in (2, 3):
        assert (p.plan(cid, _log(cid)).kind, p.complete(cid)) == (DELTA, True)
    plan = p.plan(4, _log("d"))
    assert (plan.kind, plan.parent, plan.depth, plan.rebase) == (DELTA, 3, 3, True)
    assert set(plan.log.groups[0]) == {"d"}
    p.complete(4)
    # the rebase of 4 is in flight: more deltas past max, each asking again
    plan = p.plan(5, _log("e"))
    assert (plan.kind, plan.parent, plan.depth, plan.rebase) == (DELTA, 4, 4, True)
    p.complete(5)
    plan = p.plan(6, _log("f"))  # (6 pending, on 5, when 4's rebase lands)
    assert (plan.depth, plan.rebase) == (5, True)
    p.rebased(4)
    assert (p.parent, p.depth) == (5, 1)  # 4 is a base now: 5 is one delta on it
    p.complete(6)
    assert (p.parent, p.depth) == (6, 2)
    plan = p.plan(7, _log("g"))
    assert (plan.kind, plan.parent, plan.depth, plan.rebase) == (DELTA, 6, 3, True)
    p.rebased(6)  # the parent itself
    assert (p.parent, p.depth) == (6, 0)
    plan = p.plan(8, _log("h"))
    assert (plan.depth, plan.rebase) == (1, False)
    p.rebased(99)  # in no chain here: nothing changes
    assert (p.parent, p.depth) == (6, 0)


def test_rebased_while_still_pending_makes_it_a_base_once_complete():
    p = IncrementalPolicy(max_deltas=1, keep=3, rebase=True)
    p.reset(10, depth=1)
    assert p.plan(11, _log("a")).rebase
    plan12 = p.plan(12, _log("b"))  # also on 10 (11 not yet known complete)
    assert (plan12.parent, plan12.depth) == (10, 2)
    p.rebased(11)  # landed before CKPT_COMMIT(11)
    p.complete(11)
    assert (p.parent, p.depth) == (11, 0)
    p.complete(12)  # 12 is a delta on 10, not through 11: its depth stays
    assert (p.parent, p.depth) == (12, 2)


def test_rebase_mode_without_a_parent_writes_bases_as_before():
    p = IncrementalPolicy(max_deltas=2, keep=3, rebase=True)
    p.reset(5, depth=2)
    assert p.plan(6, _log("a")).rebase
    p.failed(6)  # a failed write: a full snapshot next, no rebase
    plan = p.plan(7, _log("b"))
    assert (plan.kind, plan.rebase) == (FULL, False)
    p.reset(None, from_empty=False)  # a rescale
    assert p.plan(8, _log()).kind == FULL


def test_rebase_mode_writes_deltas_while_checkpoints_go_unconfirmed():
    for rebase, want in ((False, FULL), (True, DELTA)):
        p = IncrementalPolicy(max_deltas=8, keep=2, rebase=rebase)
        p.reset(10, depth=0)
        p.plan(11, _log("a"))
        p.plan(12, _log("b"))  # 11 and 12 time out: never CKPT_COMMIT
        plan = p.plan(13, _log("c"))
        assert plan.kind == want, rebase
        if rebase:  # the union since the parent, on the parent
            assert (plan.parent, plan.depth, set(plan.log.groups[0])) == (10, 1, {"a", "b", "c"})
            for cid in range(14, 14 + p.max_pending):  # bounded all the same
                p.plan(cid, _log(cid))
            assert len(p.pending) == p.max_pending and p.parent is None
            assert p.plan(99, _log()).kind == FULL


def test_the_memory_backend_still_compacts_in_the_checkpoint():
    p = IncrementalPolicy(max_deltas=2, keep=3)  # rebase mode off (the default)
    p.reset(3, depth=2)
    plan = p.plan(4, _log("d"))
    assert (plan.kind, plan.parent, plan.depth, plan.rebase) == (COMPACT, 3, 0, False)
    # and through Checkpointing with a memory State: a compaction, nothing for the rebaser
    inst = _Inst()
    st = State(8)
    with _closing(Checkpointing(inst, _NoStore(), SimpleNamespace(max_deltas=1, keep=3, incremental=True),
                                st.key_groups)) as ck:
        ck.policy.reset(3, depth=1)
        st.keyed.put("a", 1)
        job = ck.prepare(4, st, epoch=1)
        assert (job.kind, job.rebase, job.view) == (COMPACT, None, None) and not ck.policy.rebase


# -- the store ------------------------------------------------------------------------------

def _chain(store, task=0, n=3):
    """Checkpoint 1 a base, 2..n deltas; returns the State after each (index = id)."""
    st = State(8)
    for i in range(30):
        st.keyed.put(f"k{i}", i)
    store.save(1, task, st.snapshot())
    st.keyed.detach_log()
    states = [None, State.restore(st.snapshot())]
    for cid in range(2, n + 1):
        st.keyed.put(f"k{cid}", -cid)
        st.keyed.delete(f"k{cid + 10}")
        st.put("offset", cid)
        store.save(cid, task, encode_delta(st, st.keyed.detach_log(), cid - 1), parent=cid - 1)
        states.append(State.restore(st.snapshot()))
    return states


def test_rebase_replaces_a_delta_by_its_base_atomically(store):
    states = _chain(store)
    assert store.chain(3, 0) == [1, 2, 3]
    base = states[3].snapshot()
    store.rebase(3, 0, iter([base[:10], base[10:]]))
    assert read_parent(store.path(3, 0)) == 0 and store.chain(3, 0) == [3]
    assert store.load(3, 0) == base
    assert sorted(os.listdir(store.checkpoint_dir(3))) == ["task-0.bin"]  # no temp file left
    # the links it no longer needs go with the next prune once nothing kept names them
    for cid in (4, 5, 6):
        store.save(cid, 0, encode_delta(states[3], ChangeLog({}, set()), cid - 1), parent=cid - 1)
        store.mark_complete(cid, [0])
    assert store._dir_ids() == [3, 4, 5, 6] and content(State.restore(store.load(6, 0))) == content(states[3])


def test_rebase_never_creates_a_checkpoint_and_needs_the_file(store):
    _chain(store)
    with pytest.raises(CheckpointMissing, match=r"checkpoint 9 of 'rb' task 0: no file .*9/task-0.bin to rebase"):
        store.rebase(9, 0, iter([b"x"]))
    assert not os.path.exists(store.checkpoint_dir(9))
    with pytest.raises(CheckpointMissing, match="no file .*3/task-7.bin"):  # another task's: not there
        store.rebase(3, 7, iter([b"x"]))
    assert sorted(os.listdir(store.checkpoint_dir(3))) == ["task-0.bin"]


def test_rebase_is_allowed_on_a_complete_checkpoint_where_save_is_not(store):
    states = _chain(store)
    store.mark_complete(3, [0])
    with pytest.raises(CheckpointError, match="already complete"):
        store.save(3, 0, states[3].snapshot())
    store.rebase(3, 0, iter([states[3].snapshot()]))
    assert store.latest_complete() == 3 and store.chain(3, 0) == [3]
    assert content(State.restore(store.load(3, 0))) == content(states[3])


def test_a_rebase_whose_directory_goes_meanwhile_is_missing(store):
    states = _chain(store)

    def chunks():
        yield states[3].snapshot()[:5]
        shutil.rmtree(store.checkpoint_dir(3))  # pruned while the base is written
        yield states[3].snapshot()[5:]
    with pytest.raises(CheckpointMissing):
        store.rebase(3, 0, chunks())
    assert not os.path.exists(store.checkpoint_dir(3))


# -- readers: a link gone after a rebase ----------------------------------------------------

def _rebase_between_reads(store, monkeypatch, states, what):
    """Make the first read of checkpoint 3's head be followed, before its links are read,
    by the rebase of 3 and the pruning of 1 and 2 (what a prune after the rebase does)."""
    import bittern.checkpoint as ck
    calls = []
    real = ck.read_file if what == "read_file" else ck.read_parent

    def patched(path):
        out = real(path)
        if path == store.path(3, 0) and not calls:
            calls.append(path)
            store.rebase(3, 0, iter([states[3].snapshot()]))
            for cid in (1, 2):
                shutil.rmtree(store.checkpoint_dir(cid))
        return out
    monkeypatch.setattr(ck, what, patched)
    return calls


def test_load_chain_reads_again_from_the_head_when_a_rebase_removed_a_link(store, monkeypatch):
    states = _chain(store)
    calls = _rebase_between_reads(store, monkeypatch, states, "read_file")
    chain = store.load_chain(3, 0)
    assert calls and [c for c, _ in chain] == [3]
    assert content(State.restore(chain[0][1])) == content(states[3])


def test_load_of_a_head_rebased_after_its_first_read(store, monkeypatch):
    states = _chain(store)
    calls = _rebase_between_reads(store, monkeypatch, states, "read_file")
    assert content(State.restore(store.load(3, 0))) == content(states[3]) and calls


def test_chain_reads_again_from_the_head_when_a_rebase_removed_a_link(store, monkeypatch):
    states = _chain(store)
    calls = _rebase_between_reads(store, monkeypatch, states, "read_parent")
    assert store.chain(3, 0) == [3] and calls


def test_a_link_really_missing_is_still_named_after_the_second_read(store):
    _chain(store)
    os.unlink(store.path(2, 0))
    with pytest.raises(CheckpointMissing, match="its chain needs checkpoint 2"):
        store.load_chain(3, 0)
    with pytest.raises(CheckpointMissing, match="no file .*2/task-0.bin in its chain"):
        store.chain(3, 0)


# -- the writer and the rebaser of one instance (a real RocksDB store) ----------------------

class _Inst:
    def __init__(self, task=0):
        self.task, self.ctrl, self.errors = task, [], []

    def send_ctrl(self, op, **fields):
        self.ctrl.append((op, fields))

    def report_error(self, where, exc, fatal=False):
        self.errors.append((where, exc))

    def saved(self):
        return [f["id"] for op, f in self.ctrl if op == Op.CKPT_SAVED]


class _NoStore:
    pass


class _closing:
    """``with``: Checkpointing closed after, its threads proven stopped."""

    def __init__(self, ck):
        self.ck = ck

    def __enter__(self):
        return self.ck

    def __exit__(self, *exc):
        self.ck.close()
        for w in (self.ck.writer, self.ck.rebaser):
            assert w._thread is None or not w._thread.is_alive(), f"{w.name} thread still running"
        assert not self.ck.busy


def _until(ck, cond, what, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        ck.poll()
        time.sleep(0.002)


@pytest.fixture
def disk_state(tmp_path):
    pytest.importorskip("rocksdict")
    from bittern.api.diskstate import DiskKeyedState
    made = []

    def make():
        made.append(State(KG, keyed=DiskKeyedState(KG, None, str(tmp_path / f"db{len(made)}"))))
        return made[-1]
    yield make
    for st in made:
        st.keyed.close()


@pytest.fixture
def gate(monkeypatch):
    """dump_base on the rebaser thread waits for ``gate.set()`` before its first chunk."""
    ev, real, started = threading.Event(), cw.dump_base, threading.Event()

    def dump_base(*args):
        if threading.current_thread().name.startswith("checkpoint-rebaser"):
            started.set()
            assert ev.wait(10), "the gate was never opened"
        yield from real(*args)
    monkeypatch.setattr(cw, "dump_base", dump_base)
    ev.started = started
    yield ev
    ev.set()


def _checkpoint(ck, st, cid, n_keys=50):
    for i in range(n_keys):
        st.keyed.put(f"c{cid}-{i}", cid)
    st.keyed.put("shared", cid)
    st.put("offset", cid)
    job = ck.prepare(cid, st, epoch=1)
    ck.submit(job)
    return job


SETTINGS = SimpleNamespace(max_deltas=2, keep=3, incremental=True)


def test_a_checkpoint_is_saved_while_a_slow_rebase_runs(store, disk_state, gate):
    inst, st = _Inst(), disk_state()
    with _closing(Checkpointing(inst, store, SETTINGS, KG)) as ck:
        ck.start()
        ck.restored(None, None, "c", 0, 1)
        for cid in (1, 2, 3):  # a base from nothing, then two deltas
            _checkpoint(ck, st, cid)
            _until(ck, lambda c=cid: c in inst.saved(), f"CKPT_SAVED({cid})")
            ck.complete(cid)
        job = _checkpoint(ck, st, 4)  # the chain is too long: a delta, and a rebase asked for
        at4 = content(st)
        assert job.kind == DELTA and ck.asked is not None
        _until(ck, lambda: 4 in inst.saved(), "CKPT_SAVED(4)")
        assert gate.started.wait(5) and ck.rebasing and ck.rebaser.busy
        ck.complete(4)
        t0 = time.monotonic()
        job = _checkpoint(ck, st, 5)  # while the rebase of 4 waits at the gate
        assert job.kind == DELTA and ck.asked is None, "a second rebase while one is in flight"
        _until(ck, lambda: 5 in inst.saved(), "CKPT_SAVED(5) while the rebase runs")
        print(f"CKPT_SAVED(5) {1000 * (time.monotonic() - t0):.1f} ms after its barrier, rebase of 4 still running")
        assert ck.rebaser.busy and read_parent(store.path(4, 0)) == 3 and ck.policy.depth == 3
        ck.complete(5)
        gate.set()
        _until(ck, lambda: not ck.rebasing, "the rebase of 4")
        assert read_parent(store.path(4, 0)) == 0 and store.chain(5, 0) == [4, 5]
        assert (ck.policy.parent, ck.policy.depth) == (5, 1)
        assert content(State.restore(store.load(4, 0))) == at4
        assert content(State.restore(store.load(5, 0))) == content(st)
        assert ck.metrics()["__checkpoint-rebase-ms"] > 0 and inst.errors == []
        job = _checkpoint(ck, st, 6)
        assert (job.kind, ck.asked) == (DELTA, None)  # depth 2: no rebase needed
        _until(ck, lambda: 6 in inst.saved(), "CKPT_SAVED(6)")


def test_a_restore_abandons_a_rebase_in_progress_and_the_old_database_closes(store, disk_state, gate):
    inst, st = _Inst(), disk_state()
    with _closing(Checkpointing(inst, store, SETTINGS, KG)) as ck:
        ck.start()
        ck.restored(None, None, "c", 0, 1)
        for cid in (1, 2, 3, 4):
            _checkpoint(ck, st, cid)
            _until(ck, lambda c=cid: c in inst.saved(), f"CKPT_SAVED({cid})")
            ck.complete(cid)
        assert gate.started.wait(5) and ck.rebaser.busy
        ck.discard()  # RESTORE
        ck.retire(st.keyed)
        assert ck.retired == [st.keyed], "closed while the rebaser reads it"
        gate.set()
        _until(ck, lambda: not ck.retired, "the retired database closed")
        assert st.keyed._db is None and not ck.busy and not ck.rebasing
        assert read_parent(store.path(4, 0)) == 3  # not rebased
        assert sorted(os.listdir(store.checkpoint_dir(4))) == ["task-0.bin"]  # its temp file removed
        assert inst.errors == []


def test_a_rebase_of_a_checkpoint_pruned_meanwhile_is_forgotten(store, disk_state):
    inst, st = _Inst(), disk_state()
    with _closing(Checkpointing(inst, store, SETTINGS, KG)) as ck:  # inline: no threads
        ck.restored(None, None, "c", 0, 1)
        for cid in (1, 2, 3):
            _checkpoint(ck, st, cid)
            ck.poll()
            ck.complete(cid)
        real_submit = ck.rebaser.submit

        def submit(job):  # the checkpoint is abandoned and pruned before its base is written
            shutil.rmtree(store.checkpoint_dir(job.checkpoint_id))
            real_submit(job)
        ck.rebaser.submit = submit
        _checkpoint(ck, st, 4)
        ck.poll()
        assert 4 in inst.saved() and inst.errors == [] and not ck.rebasing
        assert not os.path.exists(store.checkpoint_dir(4)) and ck.policy.depth == 2
        assert "__checkpoint-rebase-ms" not in ck.metrics()
