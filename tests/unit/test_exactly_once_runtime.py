"""Exactly once through real instances, wired in memory: spouts (par 2) -fields-> count
(par 2, keyed state) -shuffle-> sink (a SinkBolt over a FileSink, 2 inputs).

No sockets: every frame an instance sends is captured. Data frames are delivered one
at a time, picking at random among the (source, destination) channels but in order
within each (as the stream manager keeps it), so barriers meet every interleaving.
Control messages go to a small topology master made of the real
``CheckpointCoordinator`` and ``CheckpointStore`` (tests/unit/eosim.py).
"""
from __future__ import annotations

from collections import Counter

import pytest

from bittern import wire
from bittern.api.state import KeyGroups, State
from bittern.wire import Op
from instance.grouping import FieldsChooser
from streammgr import checkpoints as ck

from .eosim import EOSim

KEYS = 5


@pytest.fixture
def make_sim(tmp_path):
    made = []

    def make(seed=0, **conf):
        s = EOSim(tmp_path / f"s{len(made)}", 2, seed, keys=KEYS, stride=1000, **conf)
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
