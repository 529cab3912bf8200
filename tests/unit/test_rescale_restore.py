"""Restoring exactly-once state under another parallelism (a rebalance), in memory.

A keyed counting bolt checkpointed at par 2 is restored at par 3, then at par 2 again,
through real instances (the wiring of tests/unit/test_exactly_once_runtime.py): each
generation is a new plan over the same checkpoint store and sink directory, and its
topology master sends RESTORE with the layout recorded in the checkpoint's metadata.
Task ids move between generations (they are numbered over the components in name
order: the spouts are tasks 4, 5 at count par 2 and 5, 6 at par 3), so the restore
must go by component and index. Then the rules of ``instance.rescale`` one by one.
"""
from __future__ import annotations

import glob
import json
import os
import random
from collections import Counter, deque

import msgpack
import pytest

from bittern import Bolt, Grouping, Spout, Topology
from bittern import config as cfg
from bittern import wire
from bittern.api.state import KeyGroups, State
from bittern.checkpoint import CheckpointError, CheckpointStore, check_layout, component_tasks, task_layout
from bittern.packing import round_robin
from bittern.runplan import RunPlan
from bittern.sinks import FileSink, SinkBolt
from bittern.state import LocalStateManager
from bittern.wire import CTRL, DATA, Op, task_of
from instance.bolt import BoltInstance
from instance.grouping import FieldsChooser
from instance.rescale import RescaleError, restore_state, sources
from instance.spout import SpoutInstance
from streammgr import checkpoints as ck

KEYS = 61  # enough keys that every task of 3 owns some


class NumSpout(Spout):
    """Emits ``[n, n % KEYS]`` for n = 100000 * index + i, i < ``limit``; offset in its state."""
    outputs = ["n", "key"]

    def initialize(self, config, context):
        self.limit = 0
        self.i = 0

    def init_state(self, state):
        self.state = state
        self.i = state.get("next", 0)

    def pre_save(self, checkpoint_id):
        self.state.put("next", self.i)

    def next_tuple(self):
        if self.i < self.limit:
            n = 100000 * self.context.task_index + self.i
            self.emit([n, n % KEYS])
            self.i += 1


class Count(Bolt):
    outputs = ["n", "key", "count"]

    def init_state(self, state):
        self.counts = state.keyed

    def process(self, tup):
        n, key = tup.values
        c = self.counts.get(key, 0) + 1
        self.counts.put(key, c)
        self.emit([n, key, c])


class Out(SinkBolt):
    def make_sink(self, config, context):
        return FileSink(config["test.out"], "out")


def pipeline(count_par):
    class Pipeline(Topology):
        src = NumSpout.spec(par=2)
        count = Count.spec(par=count_par, inputs={src: Grouping.fields("key")})
        sink = Out.spec(par=1, inputs={count: Grouping.SHUFFLE})
    return Pipeline.build("eo")


class Generation:
    """One run of the topology at a given count parallelism: instances, a topology master
    (coordinator + store) resuming from the store, channels delivered in random order."""

    def __init__(self, tmp, count_par, seed=0):
        self.rng = random.Random(seed)
        self.out = str(tmp / "out")
        tdef = pipeline(count_par)
        config = cfg.merge(tdef.config, {"topology.reliability.mode": "EFFECTIVELY_ONCE",
                                         "topology.producer.batch.size": 3,
                                         "bittern.checkpoint.dir": str(tmp / "ckpt"),
                                         "test.out": self.out})
        self.packing = round_robin({c.name: c.par for c in tdef.components.values()}, 1)
        self.plan = RunPlan("eo", str(tmp / "home"), tdef, self.packing, "tcp://127.0.0.1:9",
                            {0: {"tcp": "tcp://127.0.0.1:9", "ipc": "ipc:///nonexistent/eo"}}, config)
        self.layout = task_layout(self.packing)
        self.sm = LocalStateManager(str(tmp / "home"))
        self.store = CheckpointStore(str(tmp / "ckpt"), self.sm, "eo", keep=3)
        seen = self.store.complete_ids() + self.store._dir_ids()
        epoch = (self.sm.get("checkpoints/eo/epoch") or {}).get("epoch", 0)
        self.coord = ck.CheckpointCoordinator(self.packing.task_component, 5.0, 30.0,
                                              latest_complete=self.store.latest_complete(),
                                              next_id=max(seen, default=0) + 1, epoch=epoch)
        self.now = 0.0
        self.lost = set()  # (op, task): control messages that never reach that task
        self.channels = {}
        self.ctrl = []
        self.inst = {}
        for task, comp in sorted(self.packing.task_component.items()):
            kind = tdef.components[comp].kind
            self.inst[task] = self.make(kind, task)

    def make(self, kind, task):
        inst = (SpoutInstance if kind == "spout" else BoltInstance)(self.plan, task)

        def send(frames, sock=None, task=task):
            if frames[0] == DATA:
                src = msgpack.unpackb(frames[2], raw=False)[0]
                assert src == task
                self.channels.setdefault((src, task_of(frames[1])), deque()).append(frames[2])
            elif frames[0] == CTRL:
                self.ctrl.append((task, wire.decode_ctrl(frames[1])))
            return True
        inst.send = send
        inst.setup()
        inst.handle(wire.ctrl(Op.START, active=True))
        return inst

    def tasks(self, comp):
        return self.packing.component_tasks[comp]

    # -- the topology master (as streammgr/tmaster.py does it)
    def act(self, actions):
        for a in actions:
            if isinstance(a, ck.Start):
                self.broadcast(Op.CKPT_START, id=a.checkpoint_id, epoch=a.epoch)
            elif isinstance(a, ck.Complete):
                self.store.mark_complete(a.checkpoint_id, a.tasks, layout=self.layout)
                self.broadcast(Op.CKPT_COMMIT, id=a.checkpoint_id)
            elif isinstance(a, ck.Restore):
                self.sm.put("checkpoints/eo/epoch", {"epoch": a.epoch})
                lay = None if a.checkpoint_id is None else self.store.layout(a.checkpoint_id)
                self.broadcast(Op.RESTORE, id=a.checkpoint_id, epoch=a.epoch, layout=lay)
            elif isinstance(a, ck.Resume):
                self.broadcast(Op.RESUME, epoch=a.epoch)

    def broadcast(self, op, **fields):
        for t, inst in self.inst.items():
            if (op, t) not in self.lost:
                inst.handle(wire.ctrl(op, **fields))
        self.answer()

    def answer(self):
        while self.ctrl:
            task, msg = self.ctrl.pop(0)
            op = msg["op"]
            if op == Op.CKPT_SAVED:
                self.act(self.coord.on_saved(task, msg["id"], msg["epoch"], self.now, msg["bytes"],
                                             msg["align_ms"]))
            elif op == Op.RESTORED:
                self.act(self.coord.on_restored(task, msg["epoch"], self.now))
            elif op == Op.ERROR:
                raise AssertionError(f"task {task}: {msg['error']}\n{msg.get('traceback')}")

    def start(self):
        self.act(self.coord.start(self.now))
        assert all(inst.epoch == self.coord.epoch for inst in self.inst.values()), "not every task restored"

    def checkpoint(self):
        self.now += 5.0
        self.act(self.coord.tick(self.now))

    def emit(self, per_spout):
        for t in self.tasks("src"):
            inst = self.inst[t]
            inst.obj.limit += per_spout
            while inst.can_emit() and inst.obj.i < inst.obj.limit:
                inst.call_next_tuple(inst.emitter)
            inst.flush()

    def step(self):
        live = [k for k, q in self.channels.items() if q]
        if not live:
            return False
        key = self.rng.choice(live)
        inst = self.inst[key[1]]
        inst.handle([DATA, self.channels[key].popleft()])
        inst.flush()
        self.answer()
        return True

    def run(self, limit=200000):
        for _ in range(limit):
            if not self.step():
                return
        raise AssertionError("does not settle")

    def counts(self):
        """{key: (count, task)} over the count tasks' live keyed state; no key twice."""
        out = {}
        for t in self.tasks("count"):
            for key, c in self.inst[t].obj.counts.items():
                assert key not in out, f"key {key} on tasks {out[key][1]} and {t}"
                out[key] = (c, t)
        return out

    def close(self):
        for inst in self.inst.values():
            inst.close_socket()


@pytest.fixture
def gens(tmp_path):
    made = []

    def make(count_par, seed=0):
        g = Generation(tmp_path, count_par, seed)
        made.append(g)
        return g
    yield make
    for g in made:
        g.close()


def expected(per_spout):
    return Counter(n % KEYS for i in range(2) for n in range(100000 * i, 100000 * i + per_spout))


def committed(out):
    rows = []
    for path in sorted(glob.glob(os.path.join(out, "out-*-*.jsonl"))):
        with open(path) as f:
            rows += [json.loads(line) for line in f]
    return rows


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
    g.checkpoint()  # a barrier in the middle of the data
    g.run()
    g.checkpoint()  # and one after all of it: the stop-the-world rebalance's last checkpoint
    g.run()
    check_counts(g, per_spout_before + more)
    check_committed(committed(g.out), per_spout_before + more)
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
    g.checkpoint()
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
    g.checkpoint()
    g.run()
    assert g.store.latest_complete() == 1 and committed(g.out) == []
    assert glob.glob(os.path.join(g.out, ".pending-out-1-3"))
    g.close()
    g3 = gens(3)
    assert g3.tasks("sink") == [4]
    g3.start()
    check_committed(committed(g3.out), 30)
    assert not glob.glob(os.path.join(g3.out, ".pending-*"))
    for s in g3.tasks("src"):
        g3.inst[s].obj.limit = 30
    g3.emit(10)
    g3.run()
    g3.checkpoint()
    g3.run()
    check_committed(committed(g3.out), 40)


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
