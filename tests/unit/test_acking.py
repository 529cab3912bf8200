"""Storm's XOR acking, as pure state machines (instance/acking.py) and as the real
spout and bolt instances drive it, wired by an in-memory stand-in for the stream
manager (no sockets are connected: every frame an instance sends is captured).

Edge ids in the pure tests are hand-picked so that every XOR is known exactly.
"""
from __future__ import annotations

import random
import time
from itertools import permutations

import pytest

from bittern import Bolt, Grouping, Spout, Topology
from bittern import config as cfg
from bittern.packing import round_robin
from bittern.runplan import RunPlan
from bittern.wire import ACK, DATA, task_of
from instance import acking
from instance.acking import ACKED, FAILED, ROOT_TASK_SHIFT, AckBuffer, RootTracker, new_edge, new_root, root_task
from instance.bolt import BoltInstance
from instance.spout import SpoutInstance
from instance.stats import RING, LatencyStat

# -- ids ------------------------------------------------------------------------------------


def test_new_edge_is_64_bit_and_never_zero(monkeypatch):
    draws = iter([0, 5, (1 << 64) - 1])
    monkeypatch.setattr(acking, "_getrandbits", lambda bits: (bits == 64 or pytest.fail(bits)) and next(draws))
    assert new_edge() == 1  # a zero draw would be invisible in a XOR: replaced by 1
    assert new_edge() == 5
    assert new_edge() == (1 << 64) - 1


def test_new_root_names_its_spout_task(monkeypatch):
    draws = iter([0, 12345, (1 << 48) - 1])
    monkeypatch.setattr(acking, "_getrandbits", lambda bits: (bits == 48 or pytest.fail(bits)) and next(draws))
    r0 = new_root(7)
    assert r0 == (7 << 48) | 1 and root_task(r0) == 7
    r1 = new_root(7)
    assert r1 == (7 << 48) | 12345 and root_task(r1) == 7
    r2 = new_root(65535)  # the largest task id a root can name
    assert r2 == (1 << 64) - 1 and root_task(r2) == 65535


def test_real_random_roots_and_edges():
    roots = {new_root(300) for _ in range(1000)}
    assert len(roots) == 1000 and {root_task(r) for r in roots} == {300}
    assert all(0 < r & ((1 << ROOT_TASK_SHIFT) - 1) for r in roots)
    edges = [new_edge() for _ in range(1000)]
    assert len(set(edges)) == 1000 and all(0 < e < (1 << 64) for e in edges)


# -- RootTracker ----------------------------------------------------------------------------

R1, R2, R3 = (3 << 48) | 11, (3 << 48) | 22, (3 << 48) | 33


def test_single_edge_tree():
    t = RootTracker()
    assert t.register(R1, 0xA1, "id1", "default", 10.0) is None
    assert len(t) == 1 and t.inflight == 1
    assert t.ack(R1, 0xA1, 11.0) == (ACKED, "id1", "default", 10.0)  # started = registration time
    assert len(t) == 0 and t.entries == {}


def fanout_tree_acks():
    """A spout tuple sent to 3 tasks (edges s1..s3); each of them emits two children
    anchored to it (edges c11..c32) and acks; each child is acked by a leaf."""
    s = [0x100, 0x200, 0x400]
    c = [[0x1000, 0x2000], [0x4000, 0x8000], [0x10000, 0x20000]]
    spout_xor = s[0] ^ s[1] ^ s[2]
    acks = [("mid", i, s[i] ^ c[i][0] ^ c[i][1]) for i in range(3)]
    acks += [("leaf", (i, j), c[i][j]) for i in range(3) for j in range(2)]
    return spout_xor, acks


def test_fanout_tree_completes_on_the_last_ack_in_any_order():
    spout_xor, acks = fanout_tree_acks()
    orders = [acks, acks[::-1]] + [random.Random(seed).sample(acks, len(acks)) for seed in range(50)]
    for order in orders:
        t = RootTracker()
        assert t.register(R1, spout_xor, "tree", "default", 1.0) is None
        outcomes = [t.ack(R1, value, 2.0) for _, _, value in order]
        assert outcomes[:-1] == [None] * (len(order) - 1), order
        assert outcomes[-1] == (ACKED, "tree", "default", 1.0)
        assert len(t) == 0 and t.entries == {}


def test_fanout_tree_missing_any_single_ack_never_completes():
    spout_xor, acks = fanout_tree_acks()
    for missing in range(len(acks)):
        t = RootTracker()
        t.register(R1, spout_xor, "tree", "default", 1.0)
        assert [t.ack(R1, v, 2.0) for i, (_, _, v) in enumerate(acks) if i != missing] == [None] * 8
        assert len(t) == 1 and t.entries[R1][0] == acks[missing][2]  # exactly the missing edge is left


def test_interleaved_trees_do_not_disturb_each_other():
    t = RootTracker()
    t.register(R1, 0x11 ^ 0x12, "one", "default", 1.0)
    t.register(R2, 0x21, "two", "s2", 1.5)
    assert t.ack(R1, 0x11, 2.0) is None
    assert t.ack(R2, 0x21, 2.0) == (ACKED, "two", "s2", 1.5)
    assert len(t) == 1
    assert t.ack(R1, 0x12, 2.0) == (ACKED, "one", "default", 1.0)
    assert len(t) == 0


def test_register_with_no_edges_is_acked_at_once():
    """A tuple emitted to no task (no subscriber) has an empty tree."""
    t = RootTracker()
    assert t.register(R1, 0, "empty", "default", 5.0) == (ACKED, "empty", "default", 5.0)
    assert len(t) == 0 and t.entries == {}


def test_acks_before_registration_complete_it():
    t = RootTracker()
    # the whole tree was acked before the spout registered it
    assert t.ack(R1, 0x10, 1.0) is None
    assert t.ack(R1, 0x20 ^ 0x30, 1.1) is None
    assert len(t) == 0  # unregistered entries are not in flight
    assert t.register(R1, 0x10 ^ 0x20 ^ 0x30, "early", "default", 2.0) == (ACKED, "early", "default", 2.0)
    assert len(t) == 0 and t.entries == {}


def test_partial_acks_before_registration():
    t = RootTracker()
    assert t.ack(R1, 0x10 ^ 0x40, 1.0) is None  # a mid task acked its edge and emitted 0x40
    assert t.register(R1, 0x10 ^ 0x20, "p", "default", 2.0) is None
    assert len(t) == 1
    assert t.ack(R1, 0x20, 3.0) is None
    assert t.ack(R1, 0x40, 4.0) == (ACKED, "p", "default", 2.0)
    assert len(t) == 0


def test_fail_after_partial_ack_is_reported_once_and_later_acks_are_ignored():
    t = RootTracker()
    t.register(R1, 0x1 ^ 0x2, "f", "default", 1.0)
    t.register(R2, 0x5, "other", "default", 1.0)
    assert t.ack(R1, 0x1, 2.0) is None
    assert t.fail(R1) == (FAILED, "f", "default", 1.0)
    assert len(t) == 1
    assert t.fail(R1) is None  # a second fail of the same tree (another branch) is not reported
    assert t.ack(R1, 0x2, 3.0) is None  # the rest of the tree acks: nothing completes
    assert t.fail(R1) is None  # (the late ack left an unregistered entry; failing it reports nothing)
    assert len(t) == 1
    assert t.ack(R2, 0x5, 3.0) == (ACKED, "other", "default", 1.0)
    assert len(t) == 0


def test_late_ack_after_fail_is_dropped_by_expiry_without_a_report():
    t = RootTracker()
    t.register(R1, 0x1 ^ 0x2, "f", "default", 1.0)
    assert t.fail(R1) == (FAILED, "f", "default", 1.0)
    assert t.ack(R1, 0x2, 2.0) is None
    assert list(t.entries) == [R1] and len(t) == 0
    assert t.expire(10.0) == []  # not registered: nothing to fail again
    assert t.entries == {} and len(t) == 0


def test_fail_of_an_unknown_root():
    t = RootTracker()
    assert t.fail(R3) is None
    assert len(t) == 0 and t.entries == {}


def test_expire_in_insertion_order_up_to_the_cutoff():
    t = RootTracker()
    t.register(R1, 0x1, "a", "default", 1.0)
    t.register(R2, 0x2, "b", "s", 2.0)
    t.register(R3, 0x3, "c", "default", 3.0)
    assert t.expire(1.0) == []  # started == cutoff is not expired
    assert t.expire(2.5) == [(FAILED, "a", "default", 1.0), (FAILED, "b", "s", 2.0)]
    assert len(t) == 1 and list(t.entries) == [R3]
    assert t.expire(2.5) == []
    assert t.ack(R1, 0x1, 4.0) is None  # late ack of an expired tree: no second outcome
    assert t.ack(R3, 0x3, 4.0) == (ACKED, "c", "default", 3.0)
    assert len(t) == 0


def test_expire_skips_completed_trees_and_stops_at_the_first_young_one():
    t = RootTracker()
    roots = [(5 << 48) | i for i in range(1, 7)]
    for i, r in enumerate(roots):
        t.register(r, 0x10 + i, f"t{i}", "default", float(i))
    t.ack(roots[1], 0x11, 9.0)  # completed in the middle of the old ones
    t.fail(roots[2])
    assert [o[1] for o in t.expire(4.0)] == ["t0", "t3"]
    assert len(t) == 2 and list(t.entries) == roots[4:]
    assert [o[1] for o in t.expire(100.0)] == ["t4", "t5"]
    assert len(t) == 0 and t.entries == {}


def test_inflight_counts_registered_trees_only():
    t = RootTracker()
    roots = [(9 << 48) | i for i in range(1, 11)]
    for i, r in enumerate(roots):
        t.register(r, 0x100 + i, i, "default", 1.0)
    t.ack((9 << 48) | 999, 0x5, 1.0)  # an ack for a root this spout never registered
    assert len(t) == 10 and len(t.entries) == 11
    for i in range(0, 10, 2):
        t.ack(roots[i], 0x100 + i, 2.0)
    t.fail(roots[1])
    assert len(t) == 4
    assert [o[1] for o in t.expire(5.0)] == [3, 5, 7, 9]
    assert len(t) == 0 and t.entries == {}


# -- AckBuffer ------------------------------------------------------------------------------

A1, A2 = (4 << 48) | 1, (4 << 48) | 2  # roots of spout task 4
B1 = (6 << 48) | 1  # a root of spout task 6


def test_ackbuffer_folds_acks_of_one_root_into_one_entry():
    b = AckBuffer()
    assert not b
    b.ack(A1, 0x1)
    b.ack(A1, 0x2)
    b.ack(A1, 0x4)
    b.ack(A2, 0x8)
    assert b and b.count == 4
    assert b.drain() == {4: [[A1, 0x7, A2, 0x8], []]}
    assert not b and b.count == 0
    assert b.drain() == {}


def test_ackbuffer_keeps_an_entry_that_folds_to_zero():
    b = AckBuffer()
    b.ack(A1, 0x30)
    b.ack(A1, 0x30)
    assert b.drain() == {4: [[A1, 0], []]}


def test_ackbuffer_sorts_by_spout_task_and_carries_fails():
    b = AckBuffer()
    b.ack(A1, 0x1)
    b.ack(B1, 0x2)
    b.fail(A2)
    b.fail(A2)
    b.fail((8 << 48) | 3)  # a spout task that only has fails
    assert b.count == 5
    assert b.drain() == {4: [[A1, 0x1], [A2]], 6: [[B1, 0x2], []], 8: [[], [(8 << 48) | 3]]}
    assert not b


def test_ackbuffer_drain_feeds_the_tracker():
    """What a bolt drains is what the spout's tracker folds in."""
    t, b = RootTracker(), AckBuffer()
    t.register(A1, 0x1 ^ 0x2 ^ 0x4, "x", "default", 0.0)
    t.register(A2, 0x10, "y", "default", 0.0)
    b.ack(A1, 0x1)
    b.ack(A1, 0x2)
    b.ack(A1, 0x4)
    b.fail(A2)
    ((task, (flat, fails)),) = b.drain().items()
    assert task == 4
    out = [t.ack(flat[i], flat[i + 1], 1.0) for i in range(0, len(flat), 2)] + [t.fail(r) for r in fails]
    assert out == [(ACKED, "x", "default", 0.0), (FAILED, "y", "default", 0.0)]


# -- LatencyStat ----------------------------------------------------------------------------

def test_latency_stat_empty_snapshot():
    s = LatencyStat()
    assert s.snapshot() == {"count": 0, "mean": 0.0, "p50": 0.0, "p99": 0.0, "max": 0.0}
    assert s.percentile(0.5) == 0.0


def test_latency_stat_counts_weighted_samples():
    s = LatencyStat()
    s.add(0.002)
    s.add(0.004, n=3)  # a batch of 3 that took 4 ms each
    assert s.count == 4 and s.total == pytest.approx(0.014) and s.max == 0.004
    snap = s.snapshot()
    assert snap["count"] == 4
    assert snap["mean"] == pytest.approx(3.5)
    assert snap["max"] == pytest.approx(4.0)
    assert snap["p50"] == pytest.approx(4.0) and snap["p99"] == pytest.approx(4.0)


def test_latency_stat_percentiles():
    s = LatencyStat()
    for ms in range(100, 0, -1):
        s.add(ms / 1000)
    assert s.percentile(0.0) == 0.001
    assert s.percentile(0.5) == 0.051
    assert s.percentile(0.99) == 0.1
    assert s.percentile(1.0) == 0.1
    snap = s.snapshot()
    assert snap["p50"] == pytest.approx(51.0) and snap["p99"] == pytest.approx(100.0)
    assert snap["mean"] == pytest.approx(50.5) and snap["max"] == pytest.approx(100.0)


def test_latency_stat_ring_keeps_the_most_recent_samples():
    s = LatencyStat()
    s.add(10.0)  # an old outlier: it leaves the ring but stays the max
    for _ in range(RING):
        s.add(0.001)
    assert len(s._ring) == RING
    assert s.count == RING + 1 and s.max == 10.0
    assert s.percentile(1.0) == 0.001
    assert s.snapshot()["mean"] == pytest.approx(1000 * (10.0 + RING * 0.001) / (RING + 1))


# -- the instances, wired in memory ---------------------------------------------------------

class SimSpout(Spout):
    outputs = ["n"]

    def initialize(self, config, context):
        self.acked, self.failed = [], []

    def ack(self, tup_id):
        self.acked.append(tup_id)

    def fail(self, tup_id):
        self.failed.append(tup_id)


class Mid(Bolt):
    """Emits ``children`` tuples per input (auto-anchored, auto-acked)."""
    outputs = ["n", "k"]
    children = 2

    def process(self, tup):
        for k in range(self.children):
            self.emit([tup.values[0], k])


class Leaf(Bolt):
    """Records each tuple (values, msgid); fails those whose value is in ``fail_values``."""
    outputs = []

    def initialize(self, config, context):
        self.seen = []
        self.fail_values = set()

    def process(self, tup):
        self.seen.append((list(tup.values), list(tup.id) if tup.id else None))
        if tuple(tup.values) in self.fail_values:
            self.fail(tup)


class Join(Bolt):
    """Holds its inputs until it has ``need`` of them, then emits one tuple anchored
    as ``pattern`` says and acks what it held (Storm's multi-anchoring)."""
    outputs = ["n"]
    auto_ack = False
    need = 2
    pattern = "each"  # "each": anchored to every held tuple; "twice": to the first one, twice

    def initialize(self, config, context):
        self.held = []

    def process(self, tup):
        self.held.append(tup)
        if len(self.held) < self.need:
            return
        held, self.held = self.held, []
        anchors = held if self.pattern == "each" else [held[0], held[0]]
        self.emit([sum(t.values[0] for t in held)], anchors=anchors)
        for t in held:
            self.ack(t)


class Relay(Bolt):
    outputs = ["n"]

    def process(self, tup):
        self.emit([tup.values[0]])


class FanOut(Topology):
    # task ids: leaf 1-2, mid 3-5, src 6
    src = SimSpout.spec()
    mid = Mid.spec(par=3, inputs={src: Grouping.ALL})
    leaf = Leaf.spec(par=2, inputs={mid: Grouping.SHUFFLE})


class Joined(Topology):
    # task ids: join 1, leaf 2, relay 3, split 4, src 5
    src = SimSpout.spec()
    split = Mid.spec(inputs=[src])
    join = Join.spec(inputs={split: Grouping.GLOBAL})
    relay = Relay.spec(inputs=[join])
    leaf = Leaf.spec(inputs=[relay])


class Sim:
    """Real instances of one container; what they send is kept in ``wire`` and handed
    to the destination instance by :meth:`deliver`, the way the stream manager would."""

    def __init__(self, topo, **conf):
        tdef = topo.build("sim")
        config = cfg.merge(tdef.config, {"topology.reliability.mode": "ATLEAST_ONCE",
                                         "topology.producer.batch.size": 1}, conf)
        self.packing = round_robin({c.name: c.par for c in tdef.components.values()}, 1)
        plan = RunPlan("sim", "/nonexistent", tdef, self.packing, "tcp://127.0.0.1:9",
                       {0: {"tcp": "tcp://127.0.0.1:9", "ipc": "ipc:///nonexistent/sim"}}, config)
        self.wire = []  # [(kind, dest task, payload)]
        self.inst = {}
        for task, comp in sorted(self.packing.task_component.items()):
            kind = tdef.components[comp].kind
            inst = (SpoutInstance if kind == "spout" else BoltInstance)(plan, task)
            inst.send = self._send  # nothing goes to a socket
            self.inst[task] = inst
            inst.setup()
            inst.started = inst.active = True

    def _send(self, frames):
        if frames[0] in (DATA, ACK):
            self.wire.append((frames[0], task_of(frames[1]), frames[2]))
        return True

    def tasks(self, comp):
        return self.packing.component_tasks[comp]

    def obj(self, comp, i=0):
        return self.inst[self.tasks(comp)[i]].obj

    @property
    def spout(self):
        return self.inst[self.tasks("src")[0]]

    def pending(self, comp=None, kind=None):
        return [f for f in self.wire if (comp is None or self.packing.task_component[f[1]] == comp)
                and (kind is None or f[0] == kind)]

    def deliver(self, frames=None, comp=None, kind=None):
        """Hand the chosen frames (default: all in flight to ``comp``/of ``kind``) to their
        instances, which then flush what they emitted and acked. Returns how many."""
        chosen = self.pending(comp, kind) if frames is None else list(frames)
        for f in chosen:
            self.wire.remove(f)
            inst = self.inst[f[1]]
            inst.handle([f[0], f[2]])
            inst.flush()
        return len(chosen)

    def run(self, comp=None, kind=None, limit=100):
        """Deliver until nothing (matching) is left in flight."""
        total = 0
        for _ in range(limit):
            n = self.deliver(comp=comp, kind=kind)
            if not n:
                return total
            total += n
        raise AssertionError("the simulation does not settle")

    def close(self):
        for inst in self.inst.values():
            inst.close_socket()


@pytest.fixture
def sim_factory():
    made = []

    def make(topo, **conf):
        s = Sim(topo, **conf)
        made.append(s)
        return s
    yield make
    for s in made:
        s.close()


def emit_root(sim, tup_id, value):
    sim.spout.obj.emit([value], tup_id=tup_id)
    sim.spout.flush()


@pytest.mark.parametrize("mid_acks_first", [True, False])
def test_fanout_tree_through_real_instances(sim_factory, mid_acks_first):
    sim = sim_factory(FanOut)
    spout, src = sim.spout, sim.obj("src")
    emit_root(sim, "t", 7)
    assert len(sim.pending("mid", DATA)) == 3 and len(spout.tracker) == 1
    sim.deliver(comp="mid")
    assert len(sim.pending("leaf", DATA)) == 6 and len(sim.pending("src", ACK)) == 3
    if mid_acks_first:
        sim.deliver(comp="src")
        assert src.acked == [] and len(spout.tracker) == 1
    leaf_frames = sim.pending("leaf", DATA)
    sim.deliver(leaf_frames[:-1])
    sim.deliver(comp="src")
    assert src.acked == [] and len(spout.tracker) == 1, "one leaf tuple is still unprocessed"
    sim.deliver(leaf_frames[-1:])
    assert src.acked == []  # processed, but its ack is still on its way
    sim.run()
    assert src.acked == ["t"] and src.failed == []
    assert len(spout.tracker) == 0 and spout.tracker.entries == {}
    assert spout.counters["__ack-count"] == 1 and spout.complete_latency.count == 1
    seen = sorted(v for t in sim.tasks("leaf") for v, _ in sim.inst[t].obj.seen)
    assert seen == [[7, 0], [7, 0], [7, 0], [7, 1], [7, 1], [7, 1]]


def test_many_trees_through_real_instances(sim_factory):
    sim = sim_factory(FanOut)
    for i in range(50):
        emit_root(sim, i, i)
    assert len(sim.spout.tracker) == 50
    sim.run()
    assert sorted(sim.obj("src").acked) == list(range(50)) and sim.obj("src").failed == []
    assert len(sim.spout.tracker) == 0 and sim.spout.tracker.entries == {}
    assert sum(len(sim.inst[t].obj.seen) for t in sim.tasks("leaf")) == 50 * 6


def test_leaf_fail_fails_the_tree_once_and_later_acks_are_ignored(sim_factory):
    sim = sim_factory(FanOut)
    for t in sim.tasks("leaf"):
        sim.inst[t].obj.fail_values = {(7, 1)}  # the second child of every mid task fails
    emit_root(sim, "t", 7)
    sim.run()
    src = sim.obj("src")
    assert src.failed == ["t"] and src.acked == []
    assert sim.spout.counters["__fail-count"] == 1 and len(sim.spout.tracker) == 0


def test_timeout_fails_the_tree_and_late_acks_do_not_ack_it(sim_factory):
    sim = sim_factory(FanOut, **{"topology.message.timeout.secs": 30})
    emit_root(sim, "slow", 1)
    sim.deliver(comp="mid")
    sim.deliver(comp="src")
    sim.spout.check_timeouts(time.monotonic() + 29)
    assert sim.obj("src").failed == []
    sim.spout.check_timeouts(time.monotonic() + 31)
    assert sim.obj("src").failed == ["slow"] and sim.spout.counters["__timeout-count"] == 1
    sim.run()  # the leaves finally process and ack
    assert sim.obj("src").acked == [] and sim.obj("src").failed == ["slow"]
    assert len(sim.spout.tracker) == 0


def test_anchoring_to_tuples_of_two_roots(sim_factory):
    """Storm's multi-anchoring across trees: the joined tuple (and what is emitted
    anchored to it) belongs to both trees; neither completes before it is acked."""
    sim = sim_factory(Joined)
    Join_obj = sim.obj("join")
    sim.obj("split").children = 1
    emit_root(sim, "a", 1)
    emit_root(sim, "b", 2)
    roots = list(sim.spout.tracker.entries)
    assert len(roots) == 2
    sim.run(comp="split")
    sim.run(comp="join")
    assert Join_obj.held == [] and len(sim.pending("relay", DATA)) == 1
    sim.run(comp="src")
    assert sim.obj("src").acked == [] and len(sim.spout.tracker) == 2
    sim.run(comp="relay")
    sim.run(comp="src")
    assert sim.obj("src").acked == [] and len(sim.spout.tracker) == 2
    sim.run(comp="leaf")
    ((values, msgid),) = sim.obj("leaf").seen
    assert values == [3]
    # the relayed tuple still belongs to both trees: one fresh edge under each root
    assert msgid[0::2] == roots and msgid[1] == msgid[3] != 0
    assert sim.obj("src").acked == [] and len(sim.pending("src", ACK)) == 1
    sim.run()
    assert sorted(sim.obj("src").acked) == ["a", "b"] and sim.obj("src").failed == []
    assert sim.spout.tracker.entries == {}


def test_fail_of_a_tuple_anchored_to_two_roots_fails_both(sim_factory):
    sim = sim_factory(Joined)
    sim.obj("split").children = 1
    sim.obj("leaf").fail_values = {(3,)}
    emit_root(sim, "a", 1)
    emit_root(sim, "b", 2)
    sim.run()
    assert sorted(sim.obj("src").failed) == ["a", "b"] and sim.obj("src").acked == []
    assert len(sim.spout.tracker) == 0


class RecordingEmitter:
    """Stands in for the emitter: records the roots of each anchor a tracked emit gets,
    and hands out one edge per anchor."""

    def __init__(self, xors):
        self.calls = []
        self._xors = iter(xors)

    def emit_tracked(self, values, stream, anchor_roots, direct_task=None, need_task_ids=False):
        self.calls.append([list(r) for r in anchor_roots])
        return [1], [next(self._xors) for _ in anchor_roots]

    def emit(self, values, stream, anchors, direct_task, need_task_ids):
        self.calls.append(("untracked", values))


def _tup(msgid, n=0):
    from bittern.api.tuple import Tuple
    return Tuple(msgid, "split", "default", 4, [n])


def test_emit_anchored_root_layout(sim_factory):
    """The roots per anchor a bolt hands the emitter, and the XOR each anchor then acks."""
    sim = sim_factory(Joined)
    bolt = sim.inst[sim.tasks("join")[0]]
    rec = bolt.emitter = RecordingEmitter([0xE1, 0xE2, 0xE3, 0xE4, 0xE5, 0xE6])
    a = _tup([R1, 0xA])
    b = _tup([R2, 0xB])
    c = _tup([R1, 0xC, R3, 0xD])  # a tuple that already belongs to two trees
    for t in (a, b, c):  # held past process(), each a run of one (its edges its own)
        bolt._held[id(t)] = [t, 0, 0.0, [t.id, 1]]
    bolt.emit_anchored([1], anchors=[a])
    bolt.emit_anchored([2], anchors=[a, b])
    bolt.emit_anchored([3], anchors=[b, c])
    bolt.emit_anchored([4], anchors=[])
    bolt.emit_anchored([5], anchors=a)  # a single Tuple, not a list
    # one edge per anchor: a gets E1, (a, b) get E2 and E3, (b, c) get E4 and E5, a gets E6
    assert rec.calls == [[[R1]], [[R1], [R2]], [[R2], [R1, R3]], ("untracked", [4]), [[R1]]]
    for t in (a, b, c):
        bolt.ack(t)
    assert bolt.ackbuf.drain() == {3: [[R1, (0xA ^ 0xE1 ^ 0xE2 ^ 0xE6) ^ (0xC ^ 0xE5),
                                        R2, 0xB ^ 0xE3 ^ 0xE4,
                                        R3, 0xD ^ 0xE5], []]}


# Storm gives every anchor of an emit its own edge id (BoltOutputCollectorImpl.boltEmit:
# one MessageId.generateId per anchor, XORed into that anchor's ackVal and into the new
# tuple's id under each of the anchor's roots), so a tuple anchored to two tuples of the
# same tree carries eA^eB under that root and stays tracked. (A single edge shared by all
# anchors would cancel under such a root: the tree would complete before the child is
# processed, and a failure of the child would never be reported.)


@pytest.mark.parametrize("pattern", ["each", "twice"])
def test_tuple_anchored_twice_to_one_tree_is_waited_for(sim_factory, pattern):
    sim = sim_factory(Joined)
    if pattern == "twice":
        sim.obj("join").need = 1
        sim.obj("join").pattern = "twice"
        sim.obj("split").children = 1
    emit_root(sim, "t", 5)
    sim.run(comp="split")
    sim.run(comp="join")
    assert len(sim.pending("relay", DATA)) == 1
    sim.run(comp="src")  # every ack but the joined tuple's subtree
    assert sim.obj("src").acked == [], "the tree completed before the joined tuple was processed"
    sim.run()
    assert sim.obj("src").acked == ["t"]


def test_fail_of_a_tuple_anchored_twice_to_one_tree_reaches_the_spout(sim_factory):
    sim = sim_factory(Joined)
    sim.obj("leaf").fail_values = {(10,)}  # split emits [5, 0] and [5, 1]; join sums 5 + 5
    emit_root(sim, "t", 5)
    sim.run()
    assert sim.obj("leaf").seen and sim.obj("leaf").seen[0][0] == [10]
    assert sim.obj("src").failed == ["t"] and sim.obj("src").acked == []


def test_permutations_of_three_acks_with_an_early_one():
    """The three acks of a two-level chain, in every order, around the registration."""
    acks = [0x1 ^ 0x2, 0x2 ^ 0x4, 0x4]
    for order in permutations(range(3)):
        for reg_at in range(4):
            t = RootTracker()
            out = []
            for step, i in enumerate(order):
                if step == reg_at:
                    out.append(t.register(R1, 0x1, "c", "default", 1.0))
                out.append(t.ack(R1, acks[i], 2.0))
            if reg_at == 3:
                out.append(t.register(R1, 0x1, "c", "default", 1.0))
            assert out[:-1] == [None] * 3 and out[-1] == (ACKED, "c", "default", 1.0), (order, reg_at)
            assert len(t) == 0 and t.entries == {}
