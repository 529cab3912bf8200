"""Incremental, asynchronous checkpoints (issue 16, item 3), piece by piece: the keyed
store's change log, delta documents and chains (bittern/api/deltas.py), the
checkpoint store's chains, pruning and savepoints (bittern/checkpoint.py,
bittern/savepoint.py), the instance's policy and writer thread
(instance/incremental.py, instance/ckptwriter.py), and real instances wired in
memory (tests/unit/eosim.py) taking deltas and compacting."""
from __future__ import annotations

import os
import random
import threading
import time
import zlib
from collections import Counter
from types import SimpleNamespace

import pytest

from bittern import savepoint as sp
from bittern.api.deltas import apply_delta, empty_doc, encode_delta, encode_doc, read_doc, resolve
from bittern.api.state import DELETED, ChangeLog, State, StateFormatError
from bittern.checkpoint import (HEADER2_SIZE, HEADER_SIZE, CheckpointCorrupt, CheckpointMissing,
                                CheckpointStore, read_parent, unpack_file)
from bittern.state import LocalStateManager
from bittern.wire import Op
from instance.ckptwriter import Checkpointing, CheckpointWriter, Job
from instance.incremental import COMPACT, DELTA, FULL, IncrementalPolicy

from .eosim import EOSim


@pytest.fixture
def sm(tmp_path):
    return LocalStateManager(str(tmp_path / "home"))


@pytest.fixture
def store(tmp_path, sm):
    return CheckpointStore(str(tmp_path / "ckpt"), sm, "inc", keep=3)


def full_of(st):
    """A State's content, comparable: (plain, keyed by group, system, system_keyed)."""
    return (dict(st.items()), {g: dict(st.keyed.group_items(g)) for g in st.keyed.groups()},
            dict(st.system), {g: dict(st.system_keyed.group_items(g)) for g in st.system_keyed.groups()})


def restored(data):
    return full_of(State.restore(data))


# -- the change log -------------------------------------------------------------------------

def test_the_change_log_records_puts_and_deletes_last_one_wins():
    st = State(8)
    kg = st.key_groups
    st.keyed.put("a", 1)
    st.keyed.put("b", [1])
    st.keyed.put(("t", 2), {"x": 1})
    changed, deleted = st.keyed.changes()
    assert set().union(*changed.values()) == {"a", "b", ("t", 2)} and deleted == {}
    st.keyed.delete("a")  # a delete after a put: deleted
    st.keyed.delete("never-there")  # deleting an absent key logs nothing
    changed, deleted = st.keyed.changes()
    assert deleted == {kg.group_of("a"): {"a"}}
    assert "a" not in set().union(*changed.values())
    log = st.keyed.detach_log()
    assert len(log) == 3 and st.keyed.changes() == ({}, {})  # detached: a fresh, empty log
    assert log.groups[kg.group_of("a")]["a"] is DELETED
    assert log.groups[kg.group_of("b")]["b"] is st.keyed.get("b")  # by reference, like the state
    st.keyed.delete("b")
    st.keyed.put("b", 2)  # a put after a delete: changed
    changed, deleted = st.keyed.changes()
    assert changed == {kg.group_of("b"): {"b"}} and deleted == {}


def test_union_of_change_logs_keeps_the_last_action_per_key():
    st = State(4)
    st.keyed.put("a", 1)
    st.keyed.put("b", 1)
    first = st.keyed.detach_log()
    st.keyed.delete("a")
    st.keyed.put("c", 3)
    second = st.keyed.detach_log()
    u = ChangeLog.union([first, second])
    changed, deleted = u.changes()
    assert set().union(*changed.values()) == {"b", "c"}
    assert set().union(*deleted.values()) == {"a"}
    assert first.changes()[1] == {}  # the logs themselves are not changed
    assert ChangeLog.union([first]) is first and not ChangeLog.union([])


def test_restore_and_merge_start_with_an_empty_log():
    st = State(4)
    for i in range(10):
        st.keyed.put(i, i)
    assert State.restore(st.snapshot()).keyed.changes() == ({}, {})


# -- deltas and chains ----------------------------------------------------------------------

def _mutate(rng, st, keys, n_ops):
    for _ in range(n_ops):
        k = rng.choice(keys)
        r = rng.random()
        if r < 0.25:
            st.keyed.delete(k)
        elif r < 0.5:
            st.keyed.put(k, rng.randrange(1000))
        elif r < 0.7:
            st.keyed.put(k, {"n": rng.random(), "l": [1, (2, "x")], "b": b"\x00"})
        else:
            st.keyed.put(k, (k, rng.randrange(5)))
    st.put("offset", rng.randrange(1 << 40))
    if rng.random() < 0.3:
        st.delete("offset")
    st.system["wm"] = rng.random()
    st.system_keyed._groups.clear()
    for k in rng.sample(keys, 3):
        st.system_keyed._groups.setdefault(st.key_groups.group_of(k), {})[k] = {"t": [rng.random()]}


@pytest.mark.parametrize("seed", range(5))
def test_a_chain_of_deltas_resolves_to_the_full_snapshot(seed):
    rng = random.Random(seed)
    keys = list(range(60)) + [f"k{i}" for i in range(60)] + [("t", i) for i in range(30)] + [b"raw", 2.5, None]
    st = State(16)
    _mutate(rng, st, keys, 200)
    st.keyed.detach_log()
    base = st.snapshot()
    chain = [base]
    pending = []  # logs not yet "complete": the next delta holds their union
    parent = 1
    for cid in range(2, 12):
        _mutate(rng, st, keys, rng.randrange(0, 80))
        log = st.keyed.detach_log()
        pending.append(log)
        delta = encode_delta(st, ChangeLog.union(pending), parent)
        assert read_doc(delta)["parent"] == parent
        got = resolve(chain + [delta])
        assert restored(b"".join(encode_doc(got))) == full_of(st), f"seed {seed}, checkpoint {cid}"
        if rng.random() < 0.7:  # this one completes: the next delta applies to it
            chain.append(delta)
            pending, parent = [], cid
    # a delta is not a snapshot State.restore takes
    with pytest.raises(StateFormatError, match="delta on checkpoint"):
        State.restore(delta)


def test_a_delta_on_the_empty_state_is_a_base_once_applied():
    st = State(8)
    st.put("p", 1)
    for i in range(50):
        st.keyed.put(i, -i)
    st.keyed.delete(3)
    full = apply_delta(empty_doc(8), read_doc(encode_delta(st, st.keyed.detach_log(), 0)))
    assert restored(b"".join(encode_doc(full))) == full_of(st)


def test_applying_mismatched_documents_is_refused():
    st = State(8)
    st.keyed.put(1, 1)
    delta = read_doc(encode_delta(st, st.keyed.detach_log(), 0))
    with pytest.raises(StateFormatError, match="key groups"):
        apply_delta(empty_doc(16), delta)
    with pytest.raises(StateFormatError, match="must start with a full one"):
        resolve([delta])
    with pytest.raises(StateFormatError, match="not a state snapshot"):
        read_doc(b"\x93garbage")


def test_a_delta_with_one_percent_of_a_million_keys_changed_is_at_most_five_percent(store):
    n = 1_000_000
    st = State(128)
    kg = st.key_groups
    groups = st.keyed._groups
    for i in range(n):  # (filled directly: a million checked puts take seconds)
        k = f"key-{i:07d}"
        groups.setdefault(kg.group_of(k), {})[k] = i
    full = st.snapshot()
    rng = random.Random(7)
    for i in rng.sample(range(n), n // 100):
        st.keyed.put(f"key-{i:07d}", -i)
    store.save(1, 0, full)
    delta = encode_delta(st, st.keyed.detach_log(), 1)
    store.save(2, 0, delta, parent=1)
    full_bytes = os.path.getsize(store.path(1, 0))
    delta_bytes = os.path.getsize(store.path(2, 0))
    print(f"full {full_bytes:,} bytes, delta with 1% changed {delta_bytes:,} bytes "
          f"({delta_bytes / full_bytes:.2%})")
    assert delta_bytes <= 0.05 * full_bytes


# -- the store: headers, chains, pruning ----------------------------------------------------

def _states(n_links, seed=0):
    """A base and ``n_links`` deltas (each on the one before) as (payload, expected)."""
    rng = random.Random(seed)
    keys = list(range(40))
    st = State(8)
    _mutate(rng, st, keys, 60)
    st.keyed.detach_log()
    out = [(st.snapshot(), full_of(st))]
    for i in range(n_links):
        _mutate(rng, st, keys, 20)
        out.append((encode_delta(st, st.keyed.detach_log(), i + 1), full_of(st)))
    return out


def _save_chain(store, links, task=0, first=1):
    for i, (payload, _) in enumerate(links):
        store.save(first + i, task, payload, parent=first + i - 1 if i else 0)


def test_headers_bases_stay_version_1_and_deltas_name_their_parent(store):
    links = _states(2)
    _save_chain(store, links)
    with open(store.path(1, 0), "rb") as f:
        raw = f.read()
    assert raw[4] == 1 and len(raw) == HEADER_SIZE + len(links[0][0])  # a base: as before deltas
    with open(store.path(3, 0), "rb") as f:
        raw = f.read()
    assert raw[4] == 2 and len(raw) == HEADER2_SIZE + len(links[2][0])
    assert unpack_file(raw)[0] == 2 and read_parent(store.path(3, 0)) == 2
    assert store.chain(3, 0) == [1, 2, 3] and store.chain(1, 0) == [1]
    # the parent id is covered by the CRC
    bad = bytearray(raw)
    bad[HEADER_SIZE + 7] ^= 1
    with pytest.raises(CheckpointCorrupt, match="CRC-32 mismatch"):
        unpack_file(bytes(bad), "x")


def test_load_resolves_the_chain_to_the_full_state(store):
    links = _states(4, seed=3)
    _save_chain(store, links)
    for cid in range(1, 6):
        assert restored(store.load(cid, 0)) == links[cid - 1][1]
    assert store.load(1, 0) == links[0][0]  # a base comes back byte for byte


def test_a_missing_or_corrupt_link_is_named(store):
    _save_chain(store, _states(3))
    os.unlink(store.path(2, 0))
    with pytest.raises(CheckpointMissing, match=r"checkpoint 4 of 'inc', task 0: its chain needs "
                                                r"checkpoint 2, whose file .*2/task-0.bin is missing"):
        store.load(4, 0)
    _save_chain(store, _states(3), task=1)
    path = store.path(3, 1)
    with open(path, "r+b") as f:
        f.seek(HEADER2_SIZE + 3)
        b = f.read(1)
        f.seek(HEADER2_SIZE + 3)
        f.write(bytes([b[0] ^ 0xFF]))
    with pytest.raises(CheckpointCorrupt, match=rf"{path} is corrupt"):
        store.load(4, 1)
    # a delta cannot be saved on a parent that is not there
    with pytest.raises(CheckpointMissing, match="parent .* is missing"):
        store.save(9, 0, b"x", parent=8)


def test_mark_complete_refuses_a_chain_with_a_lost_link(store):
    _save_chain(store, _states(2))
    store.mark_complete(1, [0])
    os.unlink(store.path(2, 0))
    with pytest.raises(CheckpointMissing, match="cannot be complete"):
        store.mark_complete(3, [0])
    assert store.latest_complete() == 1


def test_prune_keeps_what_kept_checkpoints_reference(store):
    # task 0: base 1, deltas 2..6; task 1: bases each time. keep=3 keeps 4, 5, 6 complete,
    # and 1..3 as links of task 0's chain (metadata gone: they are no restore points)
    links = _states(5)
    for cid in range(1, 7):
        store.save(cid, 0, links[cid - 1][0], parent=cid - 1 if cid > 1 else 0)
        store.save(cid, 1, State(8).snapshot())
        store.mark_complete(cid, [0, 1])
    assert store.complete_ids() == [4, 5, 6]
    assert store._dir_ids() == [1, 2, 3, 4, 5, 6]
    assert restored(store.load(4, 0)) == links[3][1]
    # a new base for task 0 at 7 (and 8, 9): the old chain is dropped once nothing kept needs it
    for cid in (7, 8, 9):
        store.save(cid, 0, State.restore(store.load(cid - 1, 0)).snapshot())
        store.save(cid, 1, State(8).snapshot())
        store.mark_complete(cid, [0, 1])
    assert store.complete_ids() == [7, 8, 9] and store._dir_ids() == [7, 8, 9]


def test_prune_keeps_the_parent_of_an_in_flight_delta(store):
    links = _states(1)
    store.save(1, 0, links[0][0])
    store.mark_complete(1, [0])
    store.save(5, 0, links[1][0], parent=1)  # in flight (not complete)
    for cid in (2, 3, 4):
        store.save(cid, 0, links[0][0])
        store.mark_complete(cid, [0])
    assert store.complete_ids() == [2, 3, 4]
    assert 1 in store._dir_ids(), "the parent of checkpoint 5's file must stay"


def test_a_savepoint_of_a_chain_holds_full_bases(store, tmp_path):
    links = _states(3)
    _save_chain(store, links)
    store.mark_complete(4, [0])
    tdef = SimpleNamespace(name="inc", components={})
    target = str(tmp_path / "sp")
    doc = sp.write(store, 4, target, tdef, 8)
    with open(os.path.join(target, "task-0.bin"), "rb") as f:
        blob = f.read()
    assert blob[4] == 1 and unpack_file(blob)[0] == 0  # a base, no outside links
    assert doc["files"]["0"] == {"bytes": len(blob), "crc32": zlib.crc32(blob)}
    sp.read(target)
    assert restored(unpack_file(blob)[1]) == links[3][1]


# -- the policy -----------------------------------------------------------------------------

def _log(*keys):
    return ChangeLog({0: {k: 1 for k in keys}}, set())


def test_policy_first_a_base_from_nothing_then_deltas_then_a_compaction():
    p = IncrementalPolicy(max_deltas=2, keep=3)
    p.reset(None, from_empty=True)
    plan = p.plan(1, _log("a"))
    assert (plan.kind, plan.parent, plan.depth) == (COMPACT, None, 0)  # a base, built off the loop
    p.complete(1)
    plan = p.plan(2, _log("b"))
    assert (plan.kind, plan.parent, plan.depth) == (DELTA, 1, 1)
    assert set(plan.log.groups[0]) == {"b"}
    p.complete(2)
    assert (p.plan(3, _log("c")).kind, p.depth) == (DELTA, 1)
    p.complete(3)
    plan = p.plan(4, _log("d"))
    assert (plan.kind, plan.parent, plan.depth) == (COMPACT, 3, 0)  # max_deltas reached
    p.complete(4)
    assert p.plan(5, _log()).kind == DELTA and p.parent == 4 and p.depth == 0


def test_policy_a_late_commit_makes_the_next_delta_hold_the_union():
    p = IncrementalPolicy(max_deltas=8, keep=3)
    p.reset(10, depth=0)
    assert p.plan(11, _log("a")).parent == 10
    plan = p.plan(12, _log("b"))  # CKPT_COMMIT(11) has not arrived
    assert plan.parent == 10 and set(plan.log.groups[0]) == {"a", "b"} and plan.depth == 1
    p.complete(11)  # now it has
    plan = p.plan(13, _log("c"))
    assert plan.parent == 11 and set(plan.log.groups[0]) == {"b", "c"} and plan.depth == 2
    assert not p.complete(99) and p.parent == 11  # a commit of something it did not save: ignored


def test_policy_too_many_unconfirmed_or_a_failed_write_means_a_full_snapshot():
    p = IncrementalPolicy(max_deltas=8, keep=2)
    p.reset(10, depth=0)
    assert p.plan(11, _log("a")).kind == DELTA
    assert p.plan(12, _log("b")).kind == DELTA
    assert p.plan(13, _log("c")).kind == FULL  # 2 pending: the parent may have been pruned
    p.complete(13)
    assert p.plan(14, _log()).kind == DELTA
    p.failed(14)
    assert p.plan(15, _log()).kind == FULL and p.parent is None
    p.complete(15)
    assert p.plan(16, _log()).kind == DELTA


def test_policy_off_rescaled_and_bounded():
    assert IncrementalPolicy(max_deltas=0).plan(1, _log("a")).kind == FULL
    p = IncrementalPolicy(max_deltas=8, enabled=False)
    p.reset(5)
    assert p.plan(6, _log("a")).kind == FULL
    p = IncrementalPolicy(max_deltas=8)
    p.reset(None, from_empty=False)  # restored from other tasks' files
    assert p.plan(1, _log("a")).kind == FULL
    p.reset(3)
    for cid in range(4, 4 + p.max_pending + 1):  # nothing ever completes
        p.plan(cid, _log(cid))
    assert len(p.pending) == p.max_pending and p.parent is None


# -- the writer thread ----------------------------------------------------------------------

def _job(cid, kind, parent, data, key_groups=8):
    return Job(cid, 1, kind, parent, data, key_groups)


def test_the_writer_writes_in_order_off_the_caller_and_drops_old_generations(store):
    links = _states(4)
    store.save(1, 0, links[0][0])
    w = CheckpointWriter(store, 0)
    w.start()
    slow = threading.Event()
    real_save = store.save

    def save(cid, task, chunks, parent=0):
        if cid == 2:
            slow.wait(5)
        return real_save(cid, task, chunks, parent=parent)
    store.save = save
    for cid in (2, 3):
        w.submit(_job(cid, DELTA, cid - 1, links[cid - 1][0]))
    assert w.pending == 2 and w.results() == []
    slow.set()
    deadline = time.monotonic() + 5
    got = []
    while len(got) < 2 and time.monotonic() < deadline:
        got += w.results()
        time.sleep(0.005)
    assert [(r.job.checkpoint_id, r.ok) for r in got] == [(2, True), (3, True)] and w.pending == 0
    # a restore: queued work of the old generation never lands
    slow.clear()
    w.submit(_job(2, DELTA, 1, links[1][0]))  # blocks in save until set
    w.submit(_job(4, DELTA, 3, links[3][0]))
    w.discard()
    slow.set()
    w.close()
    assert w.results() == [] and not os.path.exists(store.path(4, 0))
    assert restored(store.load(3, 0)) == links[2][1]


def test_a_failed_write_is_a_result_with_its_error(store):
    w = CheckpointWriter(store, 0)  # not started: inline
    w.submit(_job(5, DELTA, 4, b"x"))
    (r,) = w.results()
    assert not r.ok and isinstance(r.error, CheckpointMissing)


def test_a_compaction_merges_the_chain_into_a_base(store):
    links = _states(3)
    _save_chain(store, links)
    st = State.restore(store.load(4, 0))
    st.keyed.put("new", 1)
    st.keyed.delete(next(k for k, _ in st.keyed.items() if k != "new"))
    w = CheckpointWriter(store, 0)
    w.submit(_job(5, COMPACT, 4, encode_delta(st, st.keyed.detach_log(), 4)))
    (r,) = w.results()
    assert r.ok and read_parent(store.path(5, 0)) == 0
    assert restored(store.load(5, 0)) == full_of(st)


class _Inst:
    def __init__(self, task=0):
        self.task, self.ctrl, self.errors = task, [], []

    def send_ctrl(self, op, **fields):
        self.ctrl.append((op, fields))

    def report_error(self, where, exc, fatal=False):
        self.errors.append((where, exc))


CONF = SimpleNamespace(max_deltas=2, keep=3, incremental=True)  # (what Checkpointing reads of the settings)


def test_checkpointing_reports_saved_only_after_the_write_and_errors_instead(store):
    inst = _Inst()
    st = State(8)
    ck = Checkpointing(inst, store, CONF, st.key_groups)
    ck.restored(None, None, "c", 0, 1)
    st.keyed.put("a", 1)
    job = ck.prepare(1, st, epoch=3, align_ms=1.5)
    assert job.kind == COMPACT and job.pause_ms >= 0
    assert inst.ctrl == []
    ck.submit(job)
    assert ck.poll() > 0.5 and inst.ctrl[-1][0] == Op.CKPT_SAVED
    assert inst.ctrl[-1][1]["id"] == 1 and inst.ctrl[-1][1]["epoch"] == 3
    ck.complete(1)
    os.unlink(store.path(1, 0))  # the parent vanishes: the delta's write fails
    st.keyed.put("b", 2)
    ck.submit(ck.prepare(2, st, epoch=3))
    ck.poll()
    assert len(inst.ctrl) == 1 and "checkpoint 2" in inst.errors[-1][0]
    assert ck.prepare(3, st, epoch=3).kind == FULL  # the next is a full snapshot


def test_checkpointing_after_a_restore_knows_its_own_file(store):
    links = _states(2)
    _save_chain(store, links, task=7)
    lay = {"tasks": {"7": ["c", 0], "8": ["c", 1]}, "parallelism": {"c": 2}}
    ck = Checkpointing(_Inst(7), store, CONF, State(8).key_groups)
    ck.restored(3, lay, "c", 0, 2)
    assert (ck.policy.parent, ck.policy.depth) == (3, 2)
    ck.restored(3, lay, "c", 0, 3)  # rescaled: state from other files
    assert ck.policy.parent is None and not ck.policy.from_empty
    ck.restored(3, {"tasks": {"9": ["c", 0]}, "parallelism": {"c": 1}}, "c", 0, 1)  # task ids moved
    assert ck.policy.parent is None
    ck.restored(3, lay, "other", 0, 1)  # not in the checkpoint: starts empty
    assert ck.policy.parent is None and ck.policy.from_empty


# -- real instances (tests/unit/eosim.py) ---------------------------------------------------

def _check_rows(rows, per_spout, keys=5):
    ns = Counter(r[0] for r in rows)
    assert not [n for n, c in ns.items() if c > 1], "committed twice"
    assert set(ns) == {1000 * i + k for i in range(2) for k in range(per_spout)}
    by_key = {}
    for n, key, c in rows:
        by_key.setdefault(key, []).append(c)
    want = Counter(n % keys for n in ns)
    for key, cs in by_key.items():
        assert sorted(cs) == list(range(1, want[key] + 1)), key


def _pump(sim):
    """What the loops' timers do: wait for the writer threads (and the disk backend's
    rebases), send CKPT_SAVED."""
    deadline = time.monotonic() + 10
    while any(i.ckpt.writer.pending or i.ckpt.rebasing for i in sim.inst.values()) and time.monotonic() < deadline:
        for inst in sim.inst.values():
            inst.ckpt.poll()
        sim.answer()
        time.sleep(0.002)
    assert not any(i.ckpt.writer.pending or i.ckpt.rebasing for i in sim.inst.values()), "writes still pending"


@pytest.mark.parametrize("backend", ["memory", "disk"])
@pytest.mark.parametrize("threaded", [False, True])
def test_instances_write_deltas_compact_and_restart_exactly(tmp_path, threaded, backend):
    conf = {"bittern.checkpoint.incremental.max.deltas": 2, "bittern.state.backend": backend}
    sim = EOSim(tmp_path, 2, 1, keys=5, stride=1000, **conf)
    if threaded:
        for inst in sim.inst.values():
            inst.ckpt.start()
    sim.act(sim.coord.start(sim.now))
    for _ in range(7):
        sim.emit(4)
        sim.run()
        sim.tick()
        sim.run()
        _pump(sim)
    sim.run()
    _pump(sim)
    assert sim.store.latest_complete() == 7
    assert {sim.inst[t].state.on_disk for t in sim.tasks("count")} == {backend == "disk"}
    count = sim.tasks("count")[0]
    kinds = [read_parent(sim.store.path(c, count)) for c in range(5, 8)]
    # 1: a base (from nothing), 2, 3: deltas, 4: a compaction (base), 5, 6: deltas, 7: base
    # (disk: 4 and 7 are deltas replaced by their bases by the rebaser, once written)
    assert kinds == [4, 5, 0], kinds
    assert ("__checkpoint-rebase-ms" in sim.inst[count].ckpt.metrics()) == (backend == "disk")
    assert sim.store.chain(6, count) == [4, 5, 6]
    _check_rows(sim.committed(), 28)
    counts = sim.counts()
    for inst in sim.inst.values():
        inst.ckpt.close()
    sim.close()
    again = EOSim(tmp_path, 2, 2, keys=5, stride=1000, **conf)  # a restart: restores checkpoint 7
    again.act(again.coord.start(again.now))
    assert again.counts() == counts
    for t in again.tasks("src"):  # (new spout objects: their offset is restored, their limit not)
        again.obj(t).limit = 31
    again.emit(0)
    again.run()
    again.tick()
    again.run()
    _check_rows(again.committed(), 31)
    again.close()


def test_settings_and_defaults():
    from bittern import config
    from bittern.checkpoint import checkpoint_settings
    from bittern.errors import ConfigError
    s = checkpoint_settings(config.merge({"bittern.checkpoint.dir": "/x"}))
    assert (s.incremental, s.max_deltas) == (True, 8)
    s = checkpoint_settings(config.merge({"bittern.checkpoint.dir": "/x", "bittern.checkpoint.incremental": False,
                                          "bittern.checkpoint.incremental.max.deltas": 0}))
    assert (s.incremental, s.max_deltas) == (False, 0)
    for bad in ({"bittern.checkpoint.incremental.max.deltas": -1}, {"bittern.checkpoint.incremental": "yes"}):
        with pytest.raises(ConfigError, match="bittern.checkpoint.incremental"):
            checkpoint_settings(config.merge({"bittern.checkpoint.dir": "/x"}, bad))


def test_a_state_that_is_never_checkpointed_keeps_no_log():
    st = State.for_task(0, 1, 8, change_log=False)  # (the other modes' State)
    st.keyed.put("a", 1)
    st.keyed.delete("a")
    assert st.keyed._log is None and not st.keyed.detach_log()
