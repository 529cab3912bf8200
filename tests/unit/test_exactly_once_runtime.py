"""Exactly once through real instances, wired in memory: spouts (par 2) -fields-> count
(par 2, keyed state) -shuffle-> sink (a SinkBolt over a FileSink, 2 inputs).

No sockets: every frame an instance sends is captured. Data frames are delivered one
at a time, picking at random among the (source, destination) channels but in order
within each (as the stream manager keeps it), so barriers meet every interleaving.
Control messages go to a small topology master made of the real
``CheckpointCoordinator`` and ``CheckpointStore``.
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
from bittern.checkpoint import CheckpointStore
from bittern.packing import round_robin
from bittern.runplan import RunPlan
from bittern.sinks import FileSink, SinkBolt
from bittern.state import LocalStateManager
from bittern.wire import CTRL, DATA, Op, task_of
from instance.bolt import BoltInstance
from instance.grouping import FieldsChooser
from instance.spout import SpoutInstance
from streammgr import checkpoints as ck

KEYS = 5


class NumSpout(Spout):
    """Emits ``[n, n % KEYS]`` for n = 1000 * index + i, i < ``limit``; its offset is its state."""
    outputs = ["n", "key"]

    def initialize(self, config, context):
        self.limit = 0
        self.i = 0
        self.acked = []

    def init_state(self, state):
        self.state = state
        self.i = state.get("next", 0)

    def pre_save(self, checkpoint_id):
        self.state.put("next", self.i)

    def next_tuple(self):
        if self.i < self.limit:
            n = 1000 * self.context.task_index + self.i
            self.emit([n, n % KEYS], tup_id=n)
            self.i += 1

    def ack(self, tup_id):  # never called under EFFECTIVELY_ONCE
        self.acked.append(tup_id)


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


class Pipeline(Topology):
    src = NumSpout.spec(par=2)
    count = Count.spec(par=2, inputs={src: Grouping.fields("key")})
    sink = Out.spec(par=1, inputs={count: Grouping.SHUFFLE})


class EOSim:
    def __init__(self, tmp, seed=0, **conf):
        self.rng = random.Random(seed)
        self.out = str(tmp / "out")
        tdef = Pipeline.build("eo")
        config = cfg.merge(tdef.config, {"topology.reliability.mode": "EFFECTIVELY_ONCE",
                                         "topology.producer.batch.size": 3,
                                         "bittern.checkpoint.dir": str(tmp / "ckpt"),
                                         "test.out": self.out}, conf)
        self.packing = round_robin({c.name: c.par for c in tdef.components.values()}, 1)
        self.plan = RunPlan("eo", str(tmp / "home"), tdef, self.packing, "tcp://127.0.0.1:9",
                            {0: {"tcp": "tcp://127.0.0.1:9", "ipc": "ipc:///nonexistent/eo"}}, config)
        self.sm = LocalStateManager(str(tmp / "home"))
        self.store = CheckpointStore(str(tmp / "ckpt"), self.sm, "eo", keep=3)
        self.coord = ck.CheckpointCoordinator(self.packing.task_component, 5.0, 30.0)
        self.now = 0.0
        self.channels = {}  # (src, dest) -> deque of payloads
        self.ctrl = []  # (task, msg) sent to the topology master
        self.inst = {}
        self.log = []  # what the topology master did
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

    def obj(self, task):
        return self.inst[task].obj

    # -- the topology master
    def act(self, actions):
        for a in actions:
            self.log.append(a)
            if isinstance(a, ck.Start):
                self.broadcast(Op.CKPT_START, id=a.checkpoint_id, epoch=a.epoch)
            elif isinstance(a, ck.Complete):
                self.store.mark_complete(a.checkpoint_id, a.tasks)
                self.broadcast(Op.CKPT_COMMIT, id=a.checkpoint_id)
            elif isinstance(a, ck.Restore):
                self.broadcast(Op.RESTORE, id=a.checkpoint_id, epoch=a.epoch)
            elif isinstance(a, ck.Resume):
                self.broadcast(Op.RESUME, epoch=a.epoch)

    def broadcast(self, op, **fields):
        for inst in self.inst.values():
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

    def tick(self, dt=5.0):
        self.now += dt
        self.act(self.coord.tick(self.now))

    # -- the data plane
    def emit(self, per_spout):
        for t in self.tasks("src"):
            inst = self.inst[t]
            inst.obj.limit += per_spout
            while inst.can_emit() and inst.obj.i < inst.obj.limit:
                inst.call_next_tuple(inst.emitter)
            inst.flush()

    def step(self):
        """Deliver the head of one random non-empty channel; False if none is left."""
        live = [k for k, q in self.channels.items() if q]
        if not live:
            return False
        key = self.rng.choice(live)
        inst = self.inst[key[1]]
        inst.handle([DATA, self.channels[key].popleft()])
        inst.flush()
        self.answer()
        return True

    def run(self, limit=100000):
        for _ in range(limit):
            if not self.step():
                return
        raise AssertionError("does not settle")

    def committed(self):
        rows = []
        for path in sorted(glob.glob(os.path.join(self.out, "out-*-*.jsonl"))):
            with open(path) as f:
                rows += [json.loads(line) for line in f]
        return rows

    def close(self):
        for inst in self.inst.values():
            inst.close_socket()


@pytest.fixture
def make_sim(tmp_path):
    made = []

    def make(seed=0, **conf):
        s = EOSim(tmp_path / f"s{len(made)}", seed, **conf)
        made.append(s)
        return s
    yield make
    for s in made:
        s.close()


def numbers(per_spout_from, per_spout_to):
    return {1000 * i + k for i in range(2) for k in range(per_spout_from, per_spout_to)}


def check_rows(rows, total_per_spout):
    ns = Counter(r[0] for r in rows)
    assert {n for n, c in ns.items() if c > 1} == set(), "committed twice"
    assert set(ns) == numbers(0, total_per_spout)
    by_key = {}
    for n, key, c in rows:
        assert key == n % KEYS
        by_key.setdefault(key, []).append(c)
    want = Counter(n % KEYS for n in numbers(0, total_per_spout))
    for key, cs in by_key.items():
        assert sorted(cs) == list(range(1, want[key] + 1)), key


def test_start_up_restores_and_nothing_moves_before_resume(make_sim):
    sim = make_sim()
    sim.emit(5)
    assert not sim.channels and all(sim.obj(t).i == 0 for t in sim.tasks("src"))
    sim.act(sim.coord.start(sim.now))
    assert sim.log == [ck.Restore(None, 1), ck.Resume(1)]
    assert all(inst.epoch == 1 for inst in sim.inst.values())
    sim.emit(5)
    sim.run()
    assert sum(len(q) for q in sim.channels.values()) == 0
    assert all(sim.obj(t).acked == [] for t in sim.tasks("src")), "no ack under EFFECTIVELY_ONCE"
    assert sim.committed() == []  # nothing committed without a checkpoint


@pytest.mark.parametrize("seed", range(6))
def test_checkpoint_snapshots_hold_exactly_the_data_before_the_barrier(make_sim, seed):
    sim = make_sim(seed)
    sim.act(sim.coord.start(sim.now))
    sim.emit(20)
    for _ in range(sim.rng.randrange(0, 15)):  # some data is processed before the barrier
        sim.step()
    sim.tick()  # CKPT_START 1: each spout saves, flushes, sends barrier 1
    assert sim.log[-1] == ck.Start(1, 1)
    sim.emit(17)  # after the barrier
    sim.run()
    assert ck.Complete(1, tuple(sorted(sim.packing.task_component))) in sim.log
    assert sim.store.latest_complete() == 1
    before = numbers(0, 20)
    # spouts: offset 20
    for t in sim.tasks("src"):
        assert State.restore(sim.store.load(1, t)).get("next") == 20
    # count tasks: the counts of exactly the numbers before the barrier, keys where they belong
    kg = KeyGroups()
    counts = {}
    for i, t in enumerate(sim.tasks("count")):
        st = State.restore(sim.store.load(1, t))
        for key, c in st.keyed.items():
            assert kg.task_for(key, sim.tasks("count")) == t
            counts[key] = c
    assert counts == dict(Counter(n % KEYS for n in before))
    # the sink committed exactly the rows of those numbers, each once
    rows = sim.committed()
    assert sorted(r[0] for r in rows) == sorted(before)
    check_rows(rows, 20)
    # the rest follows in checkpoint 2
    sim.tick()
    sim.run()
    assert sim.store.latest_complete() == 2
    check_rows(sim.committed(), 37)
    m = sim.coord.metrics()
    assert m["completed"] == 2 and m["last_bytes"] > 0


def test_fields_grouping_routes_by_key_group(make_sim):
    sim = make_sim()
    chooser = sim.inst[sim.tasks("src")[0]].emitter.routers["default"].choosers[0]
    assert isinstance(chooser, FieldsChooser) and chooser.key_groups == KeyGroups(128)
    for key in list(range(200)) + ["a", "b", ("x", 1)]:
        vals = [0, key]
        assert chooser.choose(vals) == [KeyGroups(128).task_for(key, chooser.tasks)]
        assert chooser.choose(vals) == [chooser.task_for(key)]


@pytest.mark.parametrize("seed", range(6))
def test_rollback_drops_in_flight_data_and_replay_is_exact(make_sim, seed):
    sim = make_sim(seed)
    sim.act(sim.coord.start(sim.now))
    sim.emit(15)
    sim.tick()
    sim.run()
    assert sim.store.latest_complete() == 1
    sim.emit(10)
    for _ in range(sim.rng.randrange(0, 20)):
        sim.step()
    sim.tick()  # checkpoint 2 starts, then a task dies before it completes
    sim.emit(5)
    for _ in range(sim.rng.randrange(0, 10)):
        sim.step()
    victim = sim.rng.choice(sorted(sim.packing.task_component))
    kind = "spout" if victim in sim.tasks("src") else "bolt"
    sim.inst[victim].close_socket()
    sim.inst[victim] = sim.make(kind, victim)  # a new incarnation (starts empty, not restored)
    sim.act(sim.coord.task_registered(victim, sim.now))
    assert ck.Restore(1, 2) in sim.log and sim.log[-1] == ck.Resume(2)
    assert all(inst.epoch == 2 for inst in sim.inst.values())
    for t in sim.tasks("src"):
        assert sim.obj(t).i == 15  # rewound
    sim.run()  # what was in flight from epoch 1 is dropped
    for t in sim.tasks("src"):
        sim.obj(t).limit = 30  # (a new spout incarnation starts at 0)
    sim.emit(0)
    sim.run()
    sim.tick()
    sim.run()
    assert sim.store.latest_complete() >= 3
    check_rows(sim.committed(), 30)
    assert sim.coord.metrics()["restores"] == 1


def test_overflowing_alignment_abandons_but_loses_nothing(make_sim):
    sim = make_sim(3, **{"bittern.barrier.buffer.max.tuples": 0})
    sim.act(sim.coord.start(sim.now))
    sim.emit(10)
    sim.tick()
    sim.emit(10)
    sim.run()
    # with no room to hold anything, checkpoint 1 may be abandoned somewhere; it then times out
    sim.tick(31.0)
    sim.run()
    sim.tick(31.0)
    sim.run()
    assert sim.store.latest_complete() is not None
    check_rows(sim.committed(), 20)


def test_a_lost_resume_is_implied_by_the_next_checkpoint_start(make_sim):
    sim = make_sim()
    spout = sim.inst[sim.tasks("src")[0]]
    lost = []
    real = sim.broadcast

    def broadcast(op, **fields):
        if op == Op.RESUME:  # lost on its way to one spout
            for t, inst in sim.inst.items():
                if inst is not spout:
                    inst.handle(wire.ctrl(op, **fields))
            lost.append(op)
            sim.answer()
        else:
            real(op, **fields)
    sim.broadcast = broadcast
    sim.act(sim.coord.start(sim.now))
    assert lost and not spout.can_emit()
    sim.tick()
    assert spout.can_emit()
    sim.emit(4)
    sim.run()
    sim.tick()
    sim.run()
    check_rows(sim.committed(), 4)
