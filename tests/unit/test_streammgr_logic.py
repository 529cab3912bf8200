"""The stream manager's and topology master's pure logic: routing table, out queues, metrics."""
from __future__ import annotations

from streammgr.metrics import MetricsStore
from streammgr.routing import LOCAL, PEER, UNKNOWN, OutQueues, RoutingTable


# -- routing table --------------------------------------------------------------------------

def test_routing_table_local_peer_unknown():
    rt = RoutingTable({1: 0, 2: 1, 3: 0, 4: 2}, container=0)
    assert rt.route(1) == (LOCAL, b"t1")
    assert rt.route(3) == (LOCAL, b"t3")
    assert rt.route(2) == (PEER, 1)
    assert rt.route(4) == (PEER, 2)
    assert rt.route(99) == (UNKNOWN, None)
    assert rt.local_tasks == [1, 3]
    assert rt.peers == [1, 2]


def test_routing_table_update_replaces_the_plan():
    rt = RoutingTable({1: 0, 2: 1}, container=1)
    assert rt.local_tasks == [2]
    rt.update({1: 1, 2: 1, 5: 0})
    assert rt.route(1) == (LOCAL, b"t1")
    assert rt.route(5) == (PEER, 0)
    assert rt.local_tasks == [1, 2]
    assert rt.peers == [0]
    rt.update({7: 1})
    assert rt.route(1) == (UNKNOWN, None)
    assert rt.peers == []


def test_routing_table_copies_its_input():
    plan = {1: 0}
    rt = RoutingTable(plan, 0)
    plan[2] = 0
    assert rt.route(2) == (UNKNOWN, None)


# -- out queues -----------------------------------------------------------------------------

def test_out_queues_byte_accounting():
    q = OutQueues()
    assert not q and q.total_bytes == 0 and q.keys() == []
    q.push("a", ["f1"], 100)
    q.push("a", ["f2"], 50)
    q.push(("peer", 2), ["g1"], 7)
    assert q
    assert q.has("a") and q.has(("peer", 2)) and not q.has("b")
    assert q.keys() == ["a", ("peer", 2)]
    assert q.bytes("a") == 150 and q.bytes(("peer", 2)) == 7 and q.bytes("b") == 0
    assert q.total_bytes == 157
    assert q.peek("a") == ["f1"]  # FIFO
    q.pop("a")
    assert q.peek("a") == ["f2"]
    assert q.bytes("a") == 50 and q.total_bytes == 57
    q.pop("a")
    assert not q.has("a") and q.bytes("a") == 0 and q.keys() == [("peer", 2)]
    assert q.total_bytes == 7
    q.pop(("peer", 2))
    assert not q and q.total_bytes == 0


def test_out_queues_drop():
    q = OutQueues()
    for i in range(3):
        q.push("dead", [i], 10)
    q.push("alive", ["x"], 4)
    assert q.drop("dead") == 3
    assert q.drop("dead") == 0
    assert q.drop("never") == 0
    assert q.total_bytes == 4 and q.bytes("dead") == 0 and not q.has("dead")
    q.push("dead", ["again"], 1)  # a key can come back after a drop
    assert q.bytes("dead") == 1 and q.total_bytes == 5 and q.peek("dead") == ["again"]


# -- metrics --------------------------------------------------------------------------------

TC = {1: "word", 2: "count", 3: "count"}


def test_metrics_totals():
    m = MetricsStore(TC)
    m.update(1, {"__emit-count": 10, "__ack-count": 4})
    m.update(2, {"__execute-count": 6})
    m.update(3, {"__execute-count": 3, "note": "text"})
    m.update(1, {"__emit-count": 25, "__ack-count": 9})
    assert m.task_totals() == {1: {"__emit-count": 25, "__ack-count": 9},
                               2: {"__execute-count": 6},
                               3: {"__execute-count": 3, "note": "text"}}
    assert m.component_totals() == {"word": {"tasks": 1, "__emit-count": 25, "__ack-count": 9},
                                    "count": {"tasks": 2, "__execute-count": 9}}


def test_metrics_of_a_restarted_task_are_folded_into_a_base():
    m = MetricsStore(TC)
    m.update(2, {"__execute-count": 100, "__fail-count": 2, "__pending": 40}, pid=11)
    m.update(2, {"__execute-count": 30, "__fail-count": 0, "__pending": 7}, pid=12)  # a new incarnation
    assert m.task_totals()[2] == {"__execute-count": 130, "__fail-count": 2, "__pending": 7}
    m.update(2, {"__execute-count": 45, "__fail-count": 1, "__pending": 0}, pid=12)
    assert m.task_totals()[2] == {"__execute-count": 145, "__fail-count": 3, "__pending": 0}
    m.update(2, {"__execute-count": 5, "__fail-count": 0, "__pending": 3}, pid=13)  # and again
    assert m.task_totals()[2] == {"__execute-count": 150, "__fail-count": 3, "__pending": 3}
    assert m.component_totals()["count"] == {"tasks": 2, "__execute-count": 150, "__fail-count": 3,
                                             "__pending": 3}


def test_a_gauge_going_down_is_not_a_restart():
    m = MetricsStore(TC)
    m.update(1, {"__pending": 832, "__emit-count": 900}, pid=5)
    m.update(1, {"__pending": 0, "__emit-count": 1000}, pid=5)
    assert m.task_totals()[1] == {"__pending": 0, "__emit-count": 1000}


def test_metrics_of_tasks_that_never_reported():
    m = MetricsStore(TC)
    assert m.task_totals() == {1: {}, 2: {}, 3: {}}
    assert m.component_totals() == {"word": {"tasks": 1}, "count": {"tasks": 2}}


def test_metrics_missing_by_sequence():
    m = MetricsStore(TC)
    assert m.missing(1) == {1, 2, 3}
    m.update(1, {}, seq=1)
    m.update(2, {}, seq=2)
    assert m.missing(1) == {3}
    assert m.missing(2) == {1, 3}
    m.update(2, {}, seq=0)  # a periodic report does not move the sequence back
    assert m.missing(2) == {1, 3}
    m.update(3, {}, seq=-1)  # the final report of a stopping instance answers everything
    assert m.missing(100) == {1, 2}
    m.update(1, {}, seq=None)
    assert m.missing(2) == {1}


def test_instances_return_credit_well_inside_the_stream_managers_window():
    # Instances return credit only every CREDIT_EVERY batches, never "the rest before
    # idling": that is live only while the window leaves room for the uncredited rest.
    from instance.runtime import CREDIT_EVERY
    from streammgr.stmgr import WINDOW
    assert 0 < CREDIT_EVERY <= WINDOW // 2
