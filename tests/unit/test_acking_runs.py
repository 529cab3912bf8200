"""Run edges: the tuples a bolt emits under one tree toward one task, in one batch,
travel as a run under one edge, acked with the run's last tuple (instance/emitter.py).
These tests check the layout on the wire and, above all, that a tree still completes
exactly when every tuple of it has been acked: never before, whatever the order."""
from __future__ import annotations

import random

import pytest

from bittern import Bolt, Grouping, Topology
from bittern.wire import ACK, DATA, Serializer

from .test_acking import Mid, Relay, SimSpout
from .test_acking_fast_paths import sims  # noqa: F401 - the fixture

SER = Serializer("msgpack")


class Holder(Bolt):
    """A sink that acks nothing by itself: the test acks or fails what it holds."""
    outputs = []
    auto_ack = False

    def initialize(self, config, context):
        self.held = []

    def process(self, tup):
        self.held.append(tup)


class Chain(Topology):
    # src -> split (Mid: `children` per input) -> relay (one task) -> holder
    src = SimSpout.spec()
    split = Mid.spec(inputs=[src])
    relay = Relay.spec(inputs={split: Grouping.GLOBAL})
    holder = Holder.spec(inputs=[relay])


class Fan(Topology):
    src = SimSpout.spec()
    split = Mid.spec(inputs=[src])
    holder = Holder.spec(par=2, inputs={split: Grouping.SHUFFLE})


def holder_inst(sim, i=0):
    return sim.inst[sim.tasks("holder")[i]]


def emit_one(sims, topo, children, batch=64, tup_id="a", value=1):
    """A sim whose spout has sent one tree ``tup_id``; its split will emit ``children``."""
    sim = sims(topo, **{"topology.producer.batch.size": batch})
    sim.obj("split").children = children
    sim.spout.obj.emit([value], tup_id=tup_id)
    sim.spout.flush()
    return sim


def one_tree(sims, topo, children, batch=64):
    """One tree ``"a"`` whose split emits ``children`` tuples, settled: the holder holds
    them all. Returns ``(sim, holder instance)``."""
    sim = emit_one(sims, topo, children, batch)
    settle(sim)
    return sim, holder_inst(sim)


def settle(sim):
    """Deliver data and acks until nothing is in flight."""
    sim.run()


def test_children_of_one_input_travel_as_one_run_under_one_edge(sims):
    sim = sims(Chain, **{"topology.producer.batch.size": 64})
    sim.obj("split").children = 5
    for i in range(3):
        sim.spout.obj.emit([i], tup_id=i)
    sim.spout.flush()
    (frame,) = sim.pending("split", DATA)
    runs = SER.loads(frame[2])[3]
    assert runs[0::2] == [0, 1, 2], "the spout: one run (one tree) per tuple"
    sim.deliver(comp="split")
    (frame,) = sim.pending("relay", DATA)
    src, stream, vals, runs = SER.loads(frame[2])
    assert len(vals) == 15 and runs[0::2] == [0, 5, 10]
    ids = runs[1::2]
    assert len({i[0] for i in ids}) == 3 and all(len(i) == 2 and i[1] & 1 for i in ids)


def test_a_run_does_not_outlive_its_batch(sims):
    sim = emit_one(sims, Chain, 10, batch=4, tup_id="t", value=7)
    sim.deliver(comp="split")
    frames = sim.pending("relay", DATA)
    lens = [len(SER.loads(f[2])[2]) for f in frames]
    assert lens == [4, 4, 2]
    edges = [SER.loads(f[2])[3][1][1] for f in frames]
    assert len(set(edges)) == 3, "each batch's run has its own edge"


@pytest.mark.parametrize("seed", range(8))
def test_a_tree_completes_exactly_when_its_last_tuple_is_acked(sims, seed):
    """Trees of 1-6 leaf tuples, batched so runs span inputs (the relay extends a run
    across inputs of one tree); the holder acks its tuples in a random order, and after
    each ack the spout has acked exactly the trees whose every leaf tuple was acked."""
    rnd = random.Random(seed)
    sim = sims(Chain, **{"topology.producer.batch.size": rnd.choice([3, 8, 64])})
    split = sim.obj("split")
    sizes = {}
    for i in range(12):
        split.children = sizes[i] = rnd.randint(1, 6)
        sim.spout.obj.emit([i], tup_id=i)
        sim.spout.flush()
        sim.run(comp="split")
    settle(sim)
    holder = holder_inst(sim)
    held = holder.obj.held
    assert sorted(t.values[0] for t in held) == sorted(i for i, n in sizes.items() for _ in range(n))
    rnd.shuffle(held)
    left = dict(sizes)
    for tup in held:
        holder.ack(tup)
        holder.flush()
        settle(sim)
        left[tup.values[0]] -= 1
        done = sorted(i for i, n in left.items() if n == 0)
        assert sorted(sim.obj("src").acked) == done, f"after acking a tuple of tree {tup.values[0]}"
    assert sim.obj("src").failed == [] and sim.spout.tracker.entries == {}


def test_failing_one_tuple_of_a_run_fails_the_tree_once_and_the_rest_ack_nothing(sims):
    sim = sims(Chain, **{"topology.producer.batch.size": 64})
    sim.obj("split").children = 4
    sim.spout.obj.emit([1], tup_id="a")
    sim.spout.obj.emit([2], tup_id="b")
    sim.spout.flush()
    settle(sim)
    holder = holder_inst(sim)
    a_tuples = [t for t in holder.obj.held if t.values[0] == 1]
    b_tuples = [t for t in holder.obj.held if t.values[0] == 2]
    assert len(a_tuples) == len(b_tuples) == 4
    holder.ack(a_tuples[0])
    holder.fail(a_tuples[1])
    for t in a_tuples[2:] + b_tuples:
        holder.ack(t)
    holder.flush()
    settle(sim)
    assert sim.obj("src").failed == ["a"] and sim.obj("src").acked == ["b"]
    assert sim.spout.tracker.entries == {}, "no ack is left behind for the failed tree"


def test_acking_a_tuple_twice_acks_nothing_more(sims):
    sim, holder = one_tree(sims, Chain, 3)
    t0, t1, t2 = holder.obj.held
    holder.ack(t0)
    holder.ack(t0)  # a bolt's mistake: it must not count as t1's or t2's ack
    holder.ack(t1)
    holder.flush()
    settle(sim)
    assert sim.obj("src").acked == []
    holder.ack(t2)
    holder.flush()
    settle(sim)
    assert sim.obj("src").acked == ["a"]


def test_shuffled_children_make_a_run_per_destination(sims):
    sim = emit_one(sims, Fan, 20)
    sim.run(comp="split")
    frames = sim.pending("holder", DATA)
    assert len(frames) == 2
    for f in frames:
        assert SER.loads(f[2])[3][0::2] == [0]
    settle(sim)
    for i in range(2):
        h = holder_inst(sim, i)
        for t in h.obj.held:
            h.ack(t)
        h.flush()
    settle(sim)
    assert sim.obj("src").acked == ["a"] and not sim.pending(kind=ACK)


class Sink(Topology):
    src = SimSpout.spec()
    split = Mid.spec(inputs=[src])
    holder = Holder.spec(inputs=[split])


def test_the_first_bolts_ack_rides_on_its_unsent_child_run(sims):
    """src -> split -> holder: the split's acks go in its children's run edges, so the
    split sends the spout nothing, and each tree completes with its last leaf ack."""
    sim = sims(Sink, **{"topology.producer.batch.size": 64})
    sim.obj("split").children = 3
    for i in range(4):
        sim.spout.obj.emit([i], tup_id=i)
    sim.spout.flush()
    sim.deliver(comp="split")
    assert sim.pending(kind=ACK) == [], "no ack message from the split"
    split = sim.inst[sim.tasks("split")[0]]
    assert split.counters["__ack-count"] == 4 and not split.ackbuf
    settle(sim)
    holder = holder_inst(sim)
    by_tree = {}
    for t in holder.obj.held:
        by_tree.setdefault(t.values[0], []).append(t)
    for i in (2, 0, 3, 1):
        for t in by_tree[i][:-1]:
            holder.ack(t)
        holder.flush()
        settle(sim)
        assert i not in sim.obj("src").acked
        holder.ack(by_tree[i][-1])
        holder.flush()
        settle(sim)
        assert sim.obj("src").acked[-1] == i
    assert sorted(sim.obj("src").acked) == [0, 1, 2, 3] and sim.spout.tracker.entries == {}


@pytest.mark.parametrize("children", [4, 5, 9])
def test_an_ack_whose_child_runs_were_sent_goes_to_the_spout_or_the_last_open_run(sims, children):
    """Batches of 4: with 4 children the run is sent before the ack (the ack goes to
    the spout); with 5 or 9 the ack rides on the last, unsent run. Either way the tree
    completes only with the last leaf ack."""
    sim = emit_one(sims, Sink, children, batch=4, tup_id="t")
    sim.deliver(comp="split")
    assert len(sim.pending("src", ACK)) == (1 if children % 4 == 0 else 0)
    settle(sim)
    holder = holder_inst(sim)
    assert len(holder.obj.held) == children
    random.Random(children).shuffle(holder.obj.held)
    for t in holder.obj.held:
        assert sim.obj("src").acked == []
        holder.ack(t)
        holder.flush()
        settle(sim)
    assert sim.obj("src").acked == ["t"] and sim.spout.tracker.entries == {}


def test_a_failed_child_fails_the_tree_whose_ack_rode_on_its_run(sims):
    sim, holder = one_tree(sims, Sink, 3)
    t0, t1, t2 = holder.obj.held
    holder.ack(t0)
    holder.fail(t1)
    holder.ack(t2)
    holder.flush()
    settle(sim)
    assert sim.obj("src").failed == ["a"] and sim.obj("src").acked == []
