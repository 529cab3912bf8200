"""The disk backend of keyed state (issue 16, item 4; bittern/api/diskstate.py): the
same answers as the memory backend under random puts, gets and deletes (with a cache
and a write buffer small enough to evict and flush all the time), the same change log,
snapshots identical in content, a point-in-time base streamed while writes go on, and
restores (own file, rescale) streamed from chains into a fresh database."""
from __future__ import annotations

import os
import random

import pytest

from bittern import config
from bittern.api.deltas import encode_delta
from bittern.api.diskstate import DiskKeyedState, disk_settings, dump_base, keyed_factory
from bittern.api.state import KeyGroups, State, StateOwnershipError, StateTypeError
from bittern.checkpoint import CheckpointCorrupt, CheckpointStore, task_layout
from bittern.errors import ConfigError
from bittern.state import LocalStateManager
from instance.rescale import restore_state

pytest.importorskip("rocksdict")  # (a dev dependency: setup.sh installs it)

KG = KeyGroups(16)


def disk(path, owned=None, **kw):
    kw.setdefault("cache_entries", 7)
    kw.setdefault("write_buffer", 5)
    return DiskKeyedState(KG, owned, str(path), **kw)


def content(keyed):
    return {g: dict(keyed.group_items(g)) for g in keyed.groups()}


def full_of(st):
    return (dict(st.items()), content(st.keyed), dict(st.system),
            {g: dict(st.system_keyed.group_items(g)) for g in st.system_keyed.groups()})


KEYS = ["a", "b", 3, 4.5, ("t", 1), b"raw", "é", -7, None, True, "long" * 20] + [f"k{i}" for i in range(40)]
VALUES = [0, 1, "x", [1, 2], {"n": 1, 2: [3]}, ("tup", 2), None, 2.5, b"\x00", [("a", 1)]]


def test_random_operations_answer_like_the_memory_backend(tmp_path):
    rnd = random.Random(7)
    mem, dsk = State(KG).keyed, disk(tmp_path / "db")
    try:
        for step in range(3000):
            k = rnd.choice(KEYS)
            op = rnd.random()
            if op < 0.5:
                v = rnd.choice(VALUES)
                mem.put(k, v)
                dsk.put(k, v)
            elif op < 0.65:
                mem.delete(k)
                dsk.delete(k)
            else:
                assert dsk.get(k, "absent") == mem.get(k, "absent"), (step, k)
                assert (k in dsk) == (k in mem)
            if step % 500 == 0:
                assert content(dsk) == content(mem)
                assert dsk.changes() == mem.changes()
                assert len(dsk) == len(mem)
                dsk.detach_log()
                mem.detach_log()
        assert content(dsk) == content(mem)
        assert sorted(map(repr, dsk.items())) == sorted(map(repr, mem.items()))
    finally:
        dsk.close()
    assert not os.path.exists(tmp_path / "db"), "close removes the scratch database"


def test_put_checks_ownership_and_types_and_a_nested_bad_value_is_named_at_the_flush(tmp_path):
    owned = KG.groups_of(0, 2)
    d = disk(tmp_path / "db", owned, write_buffer=1)
    try:
        foreign = next(k for k in KEYS if KG.group_of(k) not in owned)
        with pytest.raises(StateOwnershipError, match="does not own"):
            d.put(foreign, 1)
        mine = next(k for k in KEYS if KG.group_of(k) in owned)
        with pytest.raises(StateTypeError, match="the value is a set"):
            d.put(mine, {1, 2})
        with pytest.raises(StateTypeError, match=r"key .*the value at \[1\] is a object"):
            d.put(mine, [1, object()])
    finally:
        d.close()


def test_snapshots_hold_the_same_state_as_the_memory_backends(tmp_path):
    mem, dsk = State(KG), State(KG, keyed=disk(tmp_path / "db"))
    try:
        for st in (mem, dsk):
            for i, k in enumerate(KEYS):
                st.keyed.put(k, VALUES[i % len(VALUES)])
            st.keyed.delete("b")
            st.put("offset", 12)
            st.system["wm"] = 5
            st.system_keyed.put("timer", [1, 2])
        assert full_of(State.restore(dsk.snapshot())) == full_of(State.restore(mem.snapshot())) == full_of(mem)
    finally:
        dsk.keyed.close()


def test_a_base_is_the_state_at_the_barrier_while_writes_go_on(tmp_path):
    st = State(KG, keyed=disk(tmp_path / "db"))
    try:
        for i in range(100):
            st.keyed.put(f"k{i}", i)
        at_barrier = {f"k{i}": i for i in range(100)}
        view, rest = st.keyed.view(), st.encode_rest()
        for i in range(50):
            st.keyed.put(f"k{i}", -1)  # after the barrier: not in the base
        st.keyed.put("new", 1)
        st.keyed.delete("k99")
        data = b"".join(dump_base(view, KG.n_groups, *rest))
        assert dict(State.restore(data).keyed.items()) == at_barrier
    finally:
        st.keyed.close()


@pytest.fixture
def store(tmp_path):
    return CheckpointStore(str(tmp_path / "ckpt"), LocalStateManager(str(tmp_path / "home")), "d", keep=3)


def _chain(store, task, st):
    """Checkpoint 1 a base of ``st``, then 2 and 3 deltas after more changes."""
    store.save(1, task, st.snapshot())
    st.keyed.detach_log()
    for cid in (2, 3):
        for i in range(cid * 10):
            st.keyed.put(f"k{i}", cid * 100 + i)
        st.keyed.delete(f"k{cid}")
        st.put("offset", cid)
        store.save(cid, task, encode_delta(st, st.keyed.detach_log(), cid - 1), parent=cid - 1)


def test_a_task_restores_its_chain_into_a_fresh_database(store, tmp_path):
    mem = State(KG)
    for i in range(60):
        mem.keyed.put(f"k{i}", i)
    _chain(store, 5, mem)
    layout = task_layout({5: "count"}, {5: 0})
    n = [0]

    def new_keyed(owned):
        n[0] += 1
        return disk(tmp_path / f"db{n[0]}", owned)
    st, how = restore_state(store, 3, layout, "count", 0, 1, KG, new_keyed=new_keyed)
    try:
        assert st.on_disk and "database" in how
        assert full_of(st) == full_of(State.restore(store.load(3, 5)))
        assert st.get("offset") == 3
    finally:
        st.keyed.close()


def test_a_rescale_streams_only_the_owned_groups_from_each_old_task(store, tmp_path):
    olds = []
    for j in range(2):
        st = State.for_task(j, 2, KG)
        for i in range(200):
            if KG.task_for(f"w{i}", [0, 1]) == j:
                st.keyed.put(f"w{i}", i * 10 + j)
        store.save(1, 10 + j, st.snapshot())
        olds.append(st)
    layout = task_layout({10: "count", 11: "count"}, {10: 0, 11: 1})
    merged = {}
    for index in range(3):
        mem, _ = restore_state(store, 1, layout, "count", index, 3, KG)
        dsk, _ = restore_state(store, 1, layout, "count", index, 3, KG,
                               new_keyed=lambda owned, i=index: disk(tmp_path / f"n{i}", owned))
        try:
            assert full_of(dsk) == full_of(mem)
            assert set(dsk.keyed.groups()) <= set(KG.groups_of(index, 3))
            merged.update(dict(dsk.keyed.items()))
        finally:
            dsk.keyed.close()
    assert merged == {k: v for st in olds for k, v in st.keyed.items()}


def test_a_corrupt_base_is_named_and_its_database_removed(store, tmp_path):
    st = State(KG)
    st.keyed.put("a", 1)
    data = bytearray(st.snapshot())
    store.save(1, 5, bytes(data[:-3]) + b"\xc1\xc1\xc1")  # (a valid file whose payload is not msgpack)
    made = []

    def new_keyed(owned):
        made.append(disk(tmp_path / "db", owned))
        return made[-1]
    with pytest.raises(CheckpointCorrupt, match="task-5.bin"):
        restore_state(store, 1, task_layout({5: "c"}, {5: 0}), "c", 0, 1, KG, new_keyed=new_keyed)
    assert made and not os.path.exists(made[0].path)


def test_settings_are_checked_in_one_line(tmp_path):
    assert disk_settings(config.merge({})) == ("memory", None)
    backend, opts = disk_settings(config.merge({"bittern.state.backend": "disk"}))
    assert backend == "disk" and opts["cache_entries"] == 25000
    with pytest.raises(ConfigError, match=r"^bittern.state.backend must be one of memory, disk, got 'rocks'$"):
        disk_settings(config.merge({"bittern.state.backend": "rocks"}))
    with pytest.raises(ConfigError, match=r"bittern.state.disk.write.buffer must be a whole number >= 1"):
        disk_settings(config.merge({"bittern.state.backend": "disk", "bittern.state.disk.write.buffer": 0}))
    assert keyed_factory(config.merge({}), KG, "t", 1, str(tmp_path)) is None


def test_the_factory_makes_a_new_directory_each_time_and_clears_dead_ones(tmp_path):
    root = tmp_path / "state-db" / "topo"
    root.mkdir(parents=True)
    (root / "task-3.999999999.1").mkdir()  # a dead process's database
    (root / "task-4.999999999.1").mkdir()  # another task's: not ours to remove
    make = keyed_factory(config.merge({"bittern.state.backend": "disk"}), KG, "topo", 3, str(tmp_path))
    a, b = make(None), make(None)
    try:
        assert a.path != b.path and os.path.isdir(a.path) and os.path.isdir(b.path)
        assert not (root / "task-3.999999999.1").exists()
        assert (root / "task-4.999999999.1").exists()
        assert oct(os.stat(a.path).st_mode & 0o777) == "0o700"
    finally:
        a.close()
        b.close()
