"""The batched forms of the acking hot paths agree with the one-at-a-time forms they
replace (RootTracker.ack_many, AckBuffer.fold, LatencyStat.add_many), and the bolt's
fast loop keeps Storm's semantics where it cuts corners: an input acked inside
``process`` stops anchoring, sinks fold acks across a whole batch, and a bolt that
mixes explicit and automatic acks still completes every tree."""
from __future__ import annotations

import random

import pytest

from bittern import Bolt, Grouping, Topology
from instance.acking import ACKED, AckBuffer, RootTracker, new_root
from instance.stats import RING, LatencyStat

from .test_acking import Leaf, Relay, Sim, SimSpout


def test_ack_many_agrees_with_ack_one_by_one():
    rnd = random.Random(7)
    one, many = RootTracker(), RootTracker()
    trees = {}
    for i in range(300):
        root = new_root(3)
        edges = [rnd.getrandbits(64) | 1 for _ in range(rnd.randrange(1, 5))]
        trees[root] = edges
        x = 0
        for e in edges:
            x ^= e
        if i % 7:  # some acks arrive before their registration
            one.register(root, x, i, "default", 1.0)
            many.register(root, x, i, "default", 1.0)
    flat = []
    for root, edges in trees.items():
        for e in edges:
            if rnd.random() < 0.8:
                flat += [root, e]
    pairs = [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]
    rnd.shuffle(pairs)
    flat = [x for p in pairs for x in p]
    expected = []
    for root, value in pairs:
        done = one.ack(root, value, 2.0)
        if done is not None:
            expected.append(done)
    got = []
    many.ack_many(flat, 2.0, got)
    assert got == expected and got, "the same trees complete, in the same order"
    assert all(o[0] == ACKED for o in got)
    assert many.entries == one.entries and many.inflight == one.inflight == len(many) > 0


def test_ackbuffer_fold_equals_acks_one_by_one():
    roots = [new_root(t) for t in (1, 1, 2, 5)]
    values = {r: random.getrandbits(64) for r in roots}
    a, b = AckBuffer(), AckBuffer()
    for r in roots:
        a.ack(r, values[r])
        a.ack(roots[0], 5)
    b.fold(values, 4)
    b.fold({roots[0]: 5 ^ 5 ^ 5 ^ 5}, 4)
    assert a.count == b.count == 8
    assert a.drain() == b.drain()


def test_latency_add_many_equals_add_one_by_one():
    samples = [random.random() for _ in range(RING * 2 + 17)]
    one, many = LatencyStat(), LatencyStat()
    for s in samples:
        one.add(s)
    many.add_many(samples[:5])
    many.add_many(samples[5:RING + 40])
    many.add_many(samples[RING + 40:])
    assert (many.count, many.max) == (one.count, one.max)
    assert many.total == pytest.approx(one.total)
    assert sorted(many._ring) == sorted(one._ring) == sorted(samples[-RING:])
    assert many.percentile(0.5) == one.percentile(0.5)


class AckFirst(Bolt):
    """Acks its input, then emits: the emit must not be anchored to the acked input
    (else the tree could never complete)."""
    outputs = ["n"]

    def process(self, tup):
        self.ack(tup)
        self.emit([tup.values[0]])


class Mixed(Bolt):
    """Even values: acked by hand before emitting anchored; odd: left to auto-ack."""
    outputs = ["n"]

    def process(self, tup):
        n = tup.values[0]
        self.emit([n], anchors=[tup])
        if n % 2 == 0:
            self.ack(tup)


class AckFirstTopo(Topology):
    src = SimSpout.spec()
    mid = AckFirst.spec(inputs=[src])
    leaf = Leaf.spec(inputs=[mid])


class MixedTopo(Topology):
    src = SimSpout.spec()
    mid = Mixed.spec(inputs=[src])
    relay = Relay.spec(inputs={mid: Grouping.SHUFFLE})
    leaf = Leaf.spec(par=2, inputs={relay: Grouping.fields("n")})


@pytest.fixture
def sims():
    made = []
    yield lambda topo, **conf: made.append(Sim(topo, **conf)) or made[-1]
    for s in made:
        s.close()


def emit_all(sim, n):
    for i in range(n):
        sim.spout.obj.emit([i], tup_id=i)
    sim.spout.flush()


def test_emit_after_acking_the_input_is_not_anchored(sims):
    sim = sims(AckFirstTopo)
    emit_all(sim, 5)
    sim.run()
    src = sim.obj("src")
    assert sorted(src.acked) == list(range(5)) and src.failed == []
    leaf = sim.obj("leaf")
    assert sorted(v[0] for v, _ in leaf.seen) == list(range(5))
    assert all(mid is None for _, mid in leaf.seen), "emitted after the ack: untracked"
    assert sim.spout.tracker.entries == {}


@pytest.mark.parametrize("batch", [1, 7, 64])
def test_mixed_explicit_and_auto_acks_complete_every_tree_with_batching(sims, batch):
    sim = sims(MixedTopo, **{"topology.producer.batch.size": batch})
    emit_all(sim, 200)
    sim.run()
    src = sim.obj("src")
    assert sorted(src.acked) == list(range(200)) and src.failed == []
    assert sim.spout.tracker.entries == {} and len(sim.spout.tracker) == 0
    seen = sorted(v[0] for t in sim.tasks("leaf") for v, _ in sim.inst[t].obj.seen)
    assert seen == list(range(200))
    relay = sim.inst[sim.tasks("relay")[0]]
    assert relay.counters["__ack-count"] == 200


def test_sink_failing_some_tuples_in_a_batch_fails_exactly_those_trees(sims):
    sim = sims(MixedTopo, **{"topology.producer.batch.size": 16})
    for t in sim.tasks("leaf"):
        sim.inst[t].obj.fail_values = {(3,), (10,), (11,)}
    emit_all(sim, 40)
    sim.run()
    src = sim.obj("src")
    assert sorted(src.failed) == [3, 10, 11]
    assert sorted(src.acked) == sorted(set(range(40)) - {3, 10, 11})
    assert sim.spout.tracker.entries == {}
