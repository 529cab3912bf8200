"""Restoring exactly-once state under another parallelism (a rebalance), in memory.

A keyed counting bolt checkpointed at par 2 is restored at par 3, then at par 2 again,
through real instances (tests/unit/eosim.py): each
generation is a new plan over the same checkpoint store and sink directory, and its
topology master sends RESTORE with the layout recorded in the checkpoint's metadata.
Task ids move between generations (they are numbered over the components in name
order: the spouts are tasks 4, 5 at count par 2 and 5, 6 at par 3), so the restore
must go by component and index. Then the rules of ``instance.rescale`` one by one.
"""
from __future__ import annotations

import glob
import os
from collections import Counter

import msgpack
import pytest

from bittern.api.state import KeyGroups, State
from bittern.checkpoint import CheckpointError, CheckpointStore, check_layout, component_tasks, task_layout
from bittern.state import LocalStateManager
from bittern.wire import Op
from instance.grouping import FieldsChooser
from instance.rescale import RescaleError, restore_state, sources

from .eosim import EOSim

KEYS = 61  # enough keys that every task of 3 owns some


@pytest.fixture
def gens(tmp_path):
    """Generations of the pipeline over one store and sink directory: each a new plan
    at the given count parallelism, resuming from what the last one checkpointed."""
    made = []

    def make(count_par, seed=0):
        g = EOSim(tmp_path, count_par, seed, keys=KEYS, stride=100000)
        made.append(g)
        return g
    yield make
    for g in made:
        g.close()


def expected(per_spout):
    return Counter(n % KEYS for i in range(2) for n in range(100000 * i, 100000 * i + per_spout))


def check_committed(rows, per_spout):
    ns = Counter(r[0] for r in rows)
    assert [n for n, c in ns.items() if c > 1] == [], "committed twice"
    assert set(ns) == {n for i in range(2) for n in range(100000 * i, 100000 * i + per_spout)}
    by_key = {}
    for n, key, c in rows:
        assert key == n % KEYS
        by_key.setdefault(key, []).append(c)
    want = expected(per_spout)
    assert set(by_key) == set(want)
    for key, cs in by_key.items():
        assert sorted(cs) == list(range(1, want[key] + 1)), key


def check_counts(g, per_spout):
    """Every key counted exactly as the direct computation, on the task that owns it."""
    got = g.counts()
    assert {k: c for k, (c, _) in got.items()} == dict(expected(per_spout))
    kg = KeyGroups()
    for key, (_, t) in got.items():
        assert kg.task_for(key, g.tasks("count")) == t


def run_generation(g, per_spout_before, more, seed_steps=True):
    g.start()
    check_counts(g, per_spout_before)
    for t in g.tasks("src"):  # the spouts' offsets came back (under other task ids)
        assert g.inst[t].obj.i == per_spout_before
        g.inst[t].obj.limit = per_spout_before
    g.emit(more)
    for _ in range(g.rng.randrange(0, 30)):
        g.step()
    g.tick()  # a barrier in the middle of the data
    g.run()
    g.tick()  # and one after all of it: the stop-the-world rebalance's last checkpoint
    g.run()
    check_counts(g, per_spout_before + more)
    check_committed(g.committed(), per_spout_before + more)
    g.close()


@pytest.mark.parametrize("seed", range(4))
def test_keyed_counts_exact_across_2_3_2(gens, seed):
    run_generation(gens(2, seed), 0, 40)
    # par 3: task ids moved; the tasks find their old state by component and index
    g3 = gens(3, seed)
    assert g3.tasks("count") == [1, 2, 3] and g3.tasks("src") == [5, 6]
    run_generation(g3, 40, 35)
    layout = g3.store.layout(g3.store.latest_complete())
    assert layout["parallelism"] == {"count": 3, "sink": 1, "src": 2}
    g2 = gens(2, seed)
    run_generation(g2, 75, 30)
    assert g2.store.layout(g2.store.latest_complete())["parallelism"]["count"] == 2


def test_after_a_rescale_fields_grouping_sends_each_key_to_its_new_owner(gens):
    g = gens(2)
    g.start()
    g.emit(40)  # keys 0..39 and 21..60
    g.run()
    g.tick()
    g.run()
    g.close()
    g3 = gens(3)
    g3.start()
    owner = {key: t for key, (_, t) in g3.counts().items()}
    assert set(owner) == set(range(KEYS)) and set(owner.values()) == {1, 2, 3}
    for s in g3.tasks("src"):
        chooser = g3.inst[s].emitter.routers["default"].choosers[0]
        assert isinstance(chooser, FieldsChooser) and chooser.tasks == [1, 2, 3]
        for key in range(KEYS):
            assert chooser.choose([0, key]) == [owner[key]], key
    # and the data agrees: every tuple reaches the task that holds its key's count
    for s in g3.tasks("src"):
        g3.inst[s].obj.limit = 40
    g3.emit(20)
    seen = 0
    for (src, dest), q in g3.channels.items():
        for payload in q:
            b = msgpack.unpackb(payload, raw=False)
            if len(b) == 5 and dest in owner.values():
                assert all(owner[v[1]] == dest for v in b[2])
                seen += len(b[2])
    assert seen == 40
    g3.run()
    check_counts(g3, 60)


def test_a_sink_output_pending_under_a_task_id_that_is_gone_is_committed(gens):
    """The last CKPT_COMMIT never reached the sink (task 3) before the stop: its output
    for that complete checkpoint is pre-committed under task id 3. At count par 3 the
    sink is task 4 (and task 3 a counter); the new sink task resolves the old id's output."""
    g = gens(2)
    g.start()
    g.emit(30)
    g.run()
    g.lost.add((Op.CKPT_COMMIT, 3))
    g.tick()
    g.run()
    assert g.store.latest_complete() == 1 and g.committed() == []
    assert glob.glob(os.path.join(g.out, ".pending-out-1-3"))
    g.close()
    g3 = gens(3)
    assert g3.tasks("sink") == [4]
    g3.start()
    check_committed(g3.committed(), 30)
    assert not glob.glob(os.path.join(g3.out, ".pending-*"))
    for s in g3.tasks("src"):
        g3.inst[s].obj.limit = 30
    g3.emit(10)
    g3.run()
    g3.tick()
    g3.run()
    check_committed(g3.committed(), 40)


# -- the rules, on the store directly ---------------------------------------------------------

def save_gen(store, checkpoint_id, comp, states, first_task=1):
    """Save ``states`` (one per task index) as tasks first_task.. of ``comp``; returns the layout."""
    tasks = {}
    for i, st in enumerate(states):
        store.save(checkpoint_id, first_task + i, st.snapshot())
        tasks[str(first_task + i)] = [comp, i]
    layout = {"tasks": tasks, "parallelism": {comp: len(states)}}
    store.mark_complete(checkpoint_id, [first_task + i for i in range(len(states))], layout=layout)
    return layout


@pytest.fixture
def store(tmp_path):
    return CheckpointStore(str(tmp_path / "ckpt"), LocalStateManager(str(tmp_path / "home")), "t", keep=5)


def keyed_states(n, keys, plain=None):
    kg = KeyGroups()
    states = [State.for_task(i, n) for i in range(n)]
    for key in keys:
        states[kg.owner(kg.group_of(key), n)].keyed.put(key, f"v{key}")
    for i, p in (plain or {}).items():
        for k, v in p.items():
            states[i].put(k, v)
    return states


@pytest.mark.parametrize("old_n,new_n", [(1, 2), (2, 3), (3, 2), (2, 5), (5, 2), (4, 4), (3, 128), (128, 7)])
def test_every_key_group_goes_to_exactly_one_new_task(store, old_n, new_n):
    keys = list(range(600)) + [f"k{i}" for i in range(200)]
    layout = save_gen(store, 1, "c", keyed_states(old_n, keys))
    kg = KeyGroups()
    where = {}
    for i in range(new_n):
        st, _ = restore_state(store, 1, layout, "c", i, new_n, kg)
        assert set(st.keyed.groups()) <= set(kg.groups_of(i, new_n))
        for key, v in st.keyed.items():
            assert key not in where and v == f"v{key}"
            where[key] = i
        assert sources(old_n, i, new_n, kg) == sorted({kg.owner(g, old_n) for g in kg.groups_of(i, new_n)})
    assert set(where) == set(keys)


def test_task_ids_do_not_matter_component_and_index_do(store):
    layout = save_gen(store, 1, "c", keyed_states(2, range(50), plain={0: {"a": 0}, 1: {"a": 1}}), first_task=7)
    assert component_tasks(layout, "c") == [7, 8]
    for i in range(2):
        st, how = restore_state(store, 1, layout, "c", i, 2, KeyGroups())
        assert st.get("a") == i and how == f"task {7 + i}"
    st, how = restore_state(store, 1, layout, "other", 0, 1, KeyGroups())
    assert len(st) == 0 and len(st.keyed) == 0 and "empty" in how


def test_bolt_plain_state_follows_its_index_and_is_never_dropped(store):
    plain = {0: {"total": 10}, 1: {"total": 11}}
    layout = save_gen(store, 1, "c", keyed_states(2, range(50), plain=plain))
    got = [restore_state(store, 1, layout, "c", i, 3, KeyGroups())[0] for i in range(3)]
    assert [s.get("total") for s in got] == [10, 11, None]
    # 3 -> 2: the third task's plain state would be lost
    layout = save_gen(store, 2, "c", keyed_states(3, range(50), plain={0: {"t": 1}, 2: {"t": 3}}))
    with pytest.raises(RescaleError, match="cannot shrink"):
        for i in range(2):
            restore_state(store, 2, layout, "c", i, 2, KeyGroups())
    # ... unless it had none
    layout = save_gen(store, 3, "c", keyed_states(3, range(50), plain={0: {"t": 1}, 1: {"t": 2}}))
    assert [restore_state(store, 3, layout, "c", i, 2, KeyGroups())[0].get("t") for i in range(2)] == [1, 2]


def test_a_spout_with_offsets_does_not_rescale_unless_it_says_how(store):
    layout = save_gen(store, 1, "s", [State.for_task(i, 2) for i in range(2)])
    for i in range(3):  # no plain state: nothing to split
        st, _ = restore_state(store, 1, layout, "s", i, 3, KeyGroups(), kind="spout")
        assert len(st) == 0
    offsets = [State.for_task(i, 2) for i in range(2)]
    offsets[0].put("next", 40)
    offsets[1].put("next", 41)
    layout = save_gen(store, 2, "s", offsets)
    with pytest.raises(RescaleError, match="define rescale_state"):
        restore_state(store, 2, layout, "s", 0, 3, KeyGroups(), kind="spout")
    assert restore_state(store, 2, layout, "s", 1, 2, KeyGroups(), kind="spout")[0].get("next") == 41
    calls = []

    def rescale_state(old, task_index, n_tasks):
        calls.append((old, task_index, n_tasks))
        return {"next": min(o["next"] for o in old)} if task_index == 0 else None
    got = [restore_state(store, 2, layout, "s", i, 3, KeyGroups(), kind="spout", rescale=rescale_state)[0]
           for i in range(3)]
    assert [s.get("next") for s in got] == [40, None, None]
    assert calls[0] == ([{"next": 40}, {"next": 41}], 0, 3)
    with pytest.raises(RescaleError, match="not a dict"):
        restore_state(store, 2, layout, "s", 0, 3, KeyGroups(), kind="spout", rescale=lambda o, i, n: 5)


def test_layouts_are_checked(store):
    assert check_layout(task_layout({1: "a", 2: "a", 3: "b"}, {1: 0, 2: 1, 3: 0})) == {
        "tasks": {"1": ["a", 0], "2": ["a", 1], "3": ["b", 0]}, "parallelism": {"a": 2, "b": 1}}
    for bad in ({"tasks": {"1": ["a", 1]}, "parallelism": {"a": 1}},
                {"tasks": {"1": ["a", 0], "2": ["a", 0]}, "parallelism": {"a": 2}},
                {"tasks": {"1": ["a", 0]}, "parallelism": {}},
                {"tasks": {"1": "a"}, "parallelism": {"a": 1}}, [1]):
        with pytest.raises(CheckpointError):
            check_layout(bad)
    store.save(1, 1, State().snapshot())
    with pytest.raises(CheckpointError, match="layout names"):
        store.mark_complete(1, [1], layout={"tasks": {"2": ["a", 0]}, "parallelism": {"a": 1}})
    store.mark_complete(1, [1])  # no layout: an older caller
    assert store.layout(1) is None
