"""bittern.testing.complete_topology: a topology run to completion in one process."""
from __future__ import annotations

import pytest

from bittern import Bolt, Grouping, Spout, Topology
from bittern.errors import TopologyError
from bittern.testing import Emit, TopologyTestError, complete_topology


class Numbers(Spout):
    outputs = ["n"]

    def next_tuple(self):  # never run: mocked in every test
        raise AssertionError("the mocked spout runs instead")


class Square(Bolt):
    outputs = ["n", "sq"]

    def process(self, tup):
        n = tup["n"]
        if n == -13:
            raise ValueError("unlucky")
        self.emit([n, n * n])


class Collect(Bolt):
    outputs = []

    def initialize(self, config, context):
        self.seen = []

    def process(self, tup):
        self.seen.append(tup.values)


class Holder(Bolt):
    """Never acks: its inputs' trees time out."""
    auto_ack = False
    outputs = []

    def process(self, tup):
        pass


class Pipeline(Topology):
    numbers = Numbers.spec(par=2)
    square = Square.spec(par=3, inputs={numbers: Grouping.fields("n")})
    out = Collect.spec(par=2, inputs={square: Grouping.SHUFFLE})


class Holding(Topology):
    numbers = Numbers.spec()
    hold = Holder.spec(inputs=[numbers])


class Streams(Spout):
    from bittern import Stream
    outputs = [Stream(["n"]), Stream(["n"], name="other")]


class TwoStreams(Topology):
    src = Streams.spec()
    out = Collect.spec(inputs={src["other"]: Grouping.SHUFFLE})


def test_every_tuple_is_emitted_once_and_routed_by_the_engines_groupings():
    r = complete_topology(Pipeline, sources={"numbers": [[i] for i in range(10)]})
    assert sorted(r.tuples("numbers")) == [[i] for i in range(10)]
    assert sorted(r.tuples("square")) == [[i, i * i] for i in range(10)]
    # fields grouping: each n reached the task the engine's stable hash picks, every time
    from bittern.hashing import stable_hash
    tasks = r.tasks["square"]
    for task, rows in r.by_task("square").items():
        assert all(tasks[stable_hash(n) % 3] == task for n, _ in rows)
    assert r.counters["out"]["__execute-count"] == 10
    # at most once: nothing is tracked, and the spout's ack comes right after the emit (as in Heron)
    assert sorted(r.acked["numbers"]) == list(range(10)) and r.failed == {"numbers": []}


def test_at_least_once_trees_complete_and_the_spout_sees_every_id():
    r = complete_topology(Pipeline, sources={"numbers": [[i] for i in range(50)]},
                          config={"topology.reliability.mode": "ATLEAST_ONCE"})
    assert sorted(r.acked["numbers"]) == list(range(50)) and r.failed["numbers"] == []
    assert r.counters["numbers"]["__ack-count"] == 50


def test_same_seed_same_run_and_the_seed_moves_shuffles():
    src = {"numbers": [[i] for i in range(40)]}
    conf = {"topology.reliability.mode": "ATLEAST_ONCE"}
    a = complete_topology(Pipeline, sources=src, config=conf, seed=1)
    b = complete_topology(Pipeline, sources=src, config=conf, seed=1)
    assert a.emitted == b.emitted and a.acked == b.acked
    c = complete_topology(Pipeline, sources=src, config=conf, seed=2)
    assert sorted(map(tuple, c.tuples("square"))) == sorted(map(tuple, a.tuples("square")))


def test_an_exception_in_user_code_names_the_component_and_the_tuple():
    with pytest.raises(TopologyTestError) as e:
        complete_topology(Pipeline, sources={"numbers": [[12], [-13]]})
    assert e.value.component == "square" and e.value.where == "process"
    assert e.value.tuple.values == [-13] and isinstance(e.value.__cause__, ValueError)
    assert "component 'square'" in str(e.value) and "[-13]" in str(e.value)


def test_collected_errors_fail_the_tuple_as_the_engine_does():
    r = complete_topology(Pipeline, sources={"numbers": [[12], [-13], [14]]}, errors="collect",
                          config={"topology.reliability.mode": "ATLEAST_ONCE"})
    assert [(x.component, x.tuple.values) for x in r.errors] == [("square", [-13])]
    assert r.failed["numbers"] == [1] and sorted(r.acked["numbers"]) == [0, 2]


def test_trees_that_never_complete_time_out_on_the_virtual_clock():
    r = complete_topology(Holding, sources={"numbers": [[1], [2]]},
                          config={"topology.reliability.mode": "ATLEAST_ONCE",
                                  "topology.message.timeout.secs": 30})
    assert sorted(r.failed["numbers"]) == [0, 1] and r.acked["numbers"] == []
    assert r.counters["numbers"]["__timeout-count"] == 2
    assert 30 <= r.time <= 45


def test_named_streams_from_mocked_sources():
    r = complete_topology(TwoStreams, sources={"src": [[1], Emit([2], stream="other"), Emit([3], "other")]})
    assert r.tuples("src") == [[1]] and r.tuples("src", "other") == [[2], [3]]
    assert r.counters["out"]["__execute-count"] == 2


def test_bad_sources_are_one_line_errors():
    with pytest.raises(TopologyError, match="'nope' is not a spout of topology"):
        complete_topology(Pipeline, sources={"nope": []})
    with pytest.raises(TopologyError, match=r"item 1: expected a list of 1 values"):
        complete_topology(Pipeline, sources={"numbers": [[1], [1, 2]]})
    with pytest.raises(TopologyError, match="has no stream 'x'"):
        complete_topology(Pipeline, sources={"numbers": [Emit([1], "x")]})


def test_a_spout_that_never_finishes_is_reported():
    with pytest.raises(TopologyError, match=r"spout tasks not done: numbers\[1\] \(a spout not given in sources="):
        complete_topology(Idle, max_time=5)


class IdleSpout(Spout):
    outputs = ["n"]


class Idle(Topology):
    numbers = IdleSpout.spec()
    out = Collect.spec(inputs=[numbers])
