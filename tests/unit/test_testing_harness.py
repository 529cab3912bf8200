"""bittern.testing.BoltHarness / SpoutHarness: one component on the engine's code paths."""
from __future__ import annotations

import pytest

from bittern import Bolt, Grouping, Spout
from bittern.errors import TopologyError
from bittern.testing import BoltHarness, SpoutHarness, TopologyTestError


class Upper(Bolt):
    outputs = ["word"]

    def process(self, tup):
        if tup["word"] == "boom":
            raise RuntimeError("boom")
        self.emit([tup["word"].upper()])


class Manual(Bolt):
    """Acks even inputs, fails odd ones, holds negative ones."""
    auto_ack = False
    outputs = []

    def process(self, tup):
        n = tup.values[0]
        if n < 0:
            return
        (self.ack if n % 2 == 0 else self.fail)(tup)


class Timed(Bolt):
    outputs = ["key", "ts", "kind"]

    def process(self, tup):
        self.timers.set(tup["key"], tup["ts"], kind=tup["kind"])

    def on_timer(self, key, ts, kind):
        self.emit([key, ts, kind])


class Ticker(Bolt):
    outputs = ["n"]

    def initialize(self, config, context):
        self.ticks = 0

    def process_tick(self, tup):
        self.ticks += 1
        self.emit([self.ticks])


class Counter(Bolt):
    outputs = ["key", "count"]

    def init_state(self, state):
        self.counts = state.keyed

    def process(self, tup):
        k = tup["key"]
        self.counts.put(k, self.counts.get(k, 0) + 1)

    def pre_save(self, checkpoint_id):
        for k, v in sorted(self.counts.items()):
            self.emit([k, v])


class Ids(Spout):
    outputs = ["n"]

    def initialize(self, config, context):
        self.i = 0
        self.acks, self.fails = [], []

    def next_tuple(self):
        if self.i < 5:
            self.emit([self.i], tup_id=f"id{self.i}")
            self.i += 1
        else:
            self.done()

    def ack(self, tup_id):
        self.acks.append(tup_id)

    def fail(self, tup_id):
        self.fails.append(tup_id)


def test_bolt_emits_and_acks_its_inputs():
    with BoltHarness(Upper, inputs=["word"]) as h:
        h.process(["a"])
        h.process_many([["b"], ["c"]])
        assert h.tuples() == [["A"], ["B"], ["C"]]
        assert h.acked == [["a"], ["b"], ["c"]] and h.failed == [] and h.pending == 0
        assert h.counters["__execute-count"] == 3 and h.counters["__ack-count"] == 3


def test_bolt_exception_raises_with_component_and_tuple_or_fails_the_tuple():
    with BoltHarness(Upper, inputs=["word"]) as h:
        with pytest.raises(TopologyTestError, match=r"component 'upper' task \d+ raised in process: "
                                                    r"RuntimeError: boom \(input tuple \['boom'\]"):
            h.process(["boom"])
    with BoltHarness(Upper, inputs=["word"], errors="collect") as h:
        h.process(["boom"])
        h.process(["ok"])
        assert h.failed == [["boom"]] and h.acked == [["ok"]] and h.errors[0].tuple.values == ["boom"]


def test_manual_acks_fails_and_held_tuples():
    with BoltHarness(Manual, inputs=["n"]) as h:
        for n in (2, 3, -1, 4):
            h.process([n])
        assert h.acked == [[2], [4]] and h.failed == [[3]] and h.pending == 1


def test_event_and_processing_timers_fire_in_order_on_watermarks_and_the_clock():
    with BoltHarness(Timed, inputs=(["key", "ts", "kind"], Grouping.fields("key"))) as h:
        h.process(["a", 20.0, "event"])
        h.process(["b", 10.0, "event"])
        h.process(["c", 5.0, "processing"])
        assert sorted(h.pending_timers()) == [("event", "a", 20.0), ("event", "b", 10.0), ("processing", "c", 5.0)]
        h.watermark(15.0)
        assert h.input_watermark == 15.0 and h.tuples() == [["b", 10.0, "event"]]
        h.advance_processing_time(4.0)
        assert h.tuples()[1:] == []
        h.advance_processing_time(1.5)
        assert h.tuples()[1:] == [["c", 5.0, "processing"]]
        h.watermark(25.0)
        assert h.tuples()[2:] == [["a", 20.0, "event"]] and h.pending_timers() == []


def test_ticks_follow_the_clock_or_fire_on_demand():
    with BoltHarness(Ticker, inputs=["x"], config={"topology.tick.tuple.freq.secs": 2}) as h:
        h.advance_processing_time(7.0)
        assert h.obj.ticks == 3
        h.tick()
        assert h.tuples() == [[1], [2], [3], [4]]
    with BoltHarness(Ticker, inputs=["x"]) as h:
        h.tick()
        assert h.tuples() == [[1]]


def test_keyed_state_prefilled_and_checkpointed_under_exactly_once():
    conf = {"topology.reliability.mode": "EFFECTIVELY_ONCE"}
    with BoltHarness(Counter, inputs=(["key"], Grouping.fields("key")), config=conf,
                     state={"keyed": {"x": 10}}) as h:
        for k in ("x", "y", "x"):
            h.process([k])
        assert h.keyed_state == {"x": 12, "y": 1}
        assert h.tuples() == []
        h.checkpoint(1)
        assert h.tuples() == [["x", 12], ["y", 1]]
    with pytest.raises(TopologyError, match="unknown part"):
        BoltHarness(Counter, inputs=["key"], state={"bogus": {}})


def test_spout_harness_tracks_trees_acks_fails_and_timeouts():
    with SpoutHarness(Ids, config={"topology.message.timeout.secs": 10}) as s:
        out = s.next_tuple(3)
        assert [e.values for e in out] == [[0], [1], [2]] and s.pending == ["id0", "id1", "id2"]
        s.ack("id1")
        s.fail("id0")
        assert s.acked == ["id1"] and s.failed == ["id0"] and s.pending == ["id2"]
        s.advance_processing_time(25.0)
        assert s.failed == ["id0", "id2"] and s.obj.fails == ["id0", "id2"] and s.pending == []
        s.next_tuple(10)
        assert s.done and len(s.emitted) == 5
        with pytest.raises(KeyError, match="no pending tuple with id 'nope'"):
            s.ack("nope")


def test_max_spout_pending_bounds_next_tuple():
    with SpoutHarness(Ids, config={"topology.max.spout.pending": 2}) as s:
        assert len(s.next_tuple(5)) == 2
        s.ack("id0")
        assert [e.values for e in s.next_tuple(5)] == [[2]]


def test_deactivated_spout_is_not_called():
    with SpoutHarness(Ids) as s:
        s.deactivate()
        assert s.next_tuple(3) == []
        s.activate()
        assert len(s.next_tuple(1)) == 1
