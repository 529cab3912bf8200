"""The per-instance numbers the health manager reads: the backpressure an instance
initiated (seconds its queue held its stream manager in backpressure) and the bytes
queued toward it, from Backpressure through the stream manager's heartbeat to the
topology master's metrics document, and what the sensors make of them."""
from __future__ import annotations

import pytest

from bittern import Bolt, Grouping, Spout, Topology
from bittern import config as cfg
from bittern.packing import round_robin
from bittern.runplan import RunPlan
from bittern.state import LocalStateManager
from bittern.wire import Op
from streammgr.backpressure import Backpressure
from streammgr.health import measure
from streammgr.routing import OutQueues, RoutingTable
from streammgr.stmgr import StreamManager
from streammgr.tmaster import TopologyMaster

HIGH, LOW = 1000, 400


def test_only_the_initiating_queue_accumulates():
    b = Backpressure(HIGH, LOW)
    b.observe(("i", 3), 200, 0.0)  # below the watermark: never a cause
    b.observe(("i", 4), HIGH, 1.0)  # task 4 initiates
    b.peer(7, True, 1.5)  # a peer's backpressure pauses our spouts, but is nobody's here
    b.observe(("i", 3), 900, 2.0)  # growing, still below the high watermark
    assert b.time_by_key(3.0) == {("i", 4): pytest.approx(2.0)}  # the running episode counts
    b.observe(("i", 4), LOW, 4.0)
    assert b.time_by_key(10.0) == {("i", 4): pytest.approx(3.0)}  # stopped with the episode
    assert b.time_in_backpressure(10.0) == pytest.approx(3.0)


def test_each_initiator_counts_its_own_time_and_episodes_add_up():
    b = Backpressure(HIGH, LOW)
    b.observe(("i", 1), HIGH, 0.0)
    b.observe(("i", 2), 5 * HIGH, 1.0)  # a second cause during the same episode
    b.observe(("i", 1), 0, 2.0)
    b.observe(("i", 2), 0, 4.0)  # the episode ends: 4 s in all
    b.observe(("i", 1), HIGH, 10.0)  # a second episode of task 1
    t = b.time_by_key(11.5)
    assert t == {("i", 1): pytest.approx(3.5), ("i", 2): pytest.approx(3.0)}
    assert b.time_in_backpressure(11.5) == pytest.approx(5.5)
    # forget (the destination went away) closes its episode
    b.forget(("i", 1), 12.0)
    assert b.time_by_key(20.0)[("i", 1)] == pytest.approx(4.0)


def test_stream_manager_reports_per_local_task():
    sm = StreamManager.__new__(StreamManager)  # no sockets: only what by_task reads
    sm.table = RoutingTable({1: 0, 2: 0, 3: 1}, 0)
    sm.queues = OutQueues()
    sm.bp = Backpressure(HIGH, LOW)
    sm.queues.push(("i", 2), [b"x"], 1500)
    sm.queues.push(("p", 1), [b"y"], 5000)  # toward a peer: not an instance
    sm.bp.observe(("i", 2), 1500, 10.0)
    sm.bp.observe(("p", 1), 5000, 10.0)
    got = sm.by_task(12.5)
    assert got == {"backpressure_secs_by_task": {"1": 0.0, "2": 2.5}, "queued_by_task": {"1": 0, "2": 1500}}


class S(Spout):
    outputs = ["n"]


class B(Bolt):
    outputs = []


class Two(Topology):
    s = S.spec()
    b = B.spec(par=2, inputs={s: Grouping.SHUFFLE})


@pytest.fixture
def tm(tmp_path):
    tdef = Two.build("two")
    conf = cfg.merge(tdef.config, {})
    packing = round_robin({"s": 1, "b": 2}, 2)
    plan = RunPlan("two", str(tmp_path / "home"), tdef, packing, "tcp://127.0.0.1:*", {0: {}, 1: {}}, conf)
    sm = LocalStateManager(str(tmp_path / "home"))
    sm.put("topologies/two", {"state": "RUNNING", "submitted_at": 1.0})
    t = TopologyMaster(plan, state=sm)
    t._send = lambda identity, op, **f: None
    yield t
    t.sock.close(linger=0)
    t._zctx.term()


def heartbeat(tm, c, secs, queued):
    tm.on_stmgr(b"s%d" % c, {"op": Op.HEARTBEAT, "container": c, "backpressure_secs_by_task": secs,
                             "queued_by_task": queued})


def test_topology_master_puts_them_in_the_metrics_document(tm):
    pk = tm.plan.packing
    for c in sorted(pk.containers):
        tm.on_stmgr(b"s%d" % c, {"op": Op.STMGR_REGISTER, "container": c, "pid": 10 + c,
                                 "tasks": {str(t): {"ok": True, "pid": 100 + t, "component": pk.task_component[t]}
                                           for t in pk.containers[c]}})
    bolts = sorted(pk.component_tasks["b"])
    hot, cold = bolts
    ch, cc = pk.task_container[hot], pk.task_container[cold]
    for c in sorted(pk.containers):
        heartbeat(tm, c, {str(t): (5.0 if t == hot else 0.0) for t in pk.containers[c]},
                  {str(t): (2048 if t == hot else 0) for t in pk.containers[c]})
    doc1 = tm.metrics_doc("interval")
    assert doc1["stmgrs"][str(ch)]["backpressure_secs_by_task"][str(hot)] == 5.0
    assert doc1["stmgrs"][str(cc)]["queued_by_task"][str(cold)] == 0
    assert doc1["tasks"][str(hot)]["queued_bytes"] == 2048
    assert doc1["tasks"][str(hot)]["backpressure_initiated_secs"] == 5.0
    assert "healthmgr" not in doc1  # off by default
    # ten seconds later task `hot` caused 6 s more: 60% of the time between the documents
    for c in sorted(pk.containers):
        heartbeat(tm, c, {str(t): (11.0 if t == hot else 0.0) for t in pk.containers[c]},
                  {str(t): (4096 if t == hot else 0) for t in pk.containers[c]})
    doc2 = tm.metrics_doc("interval")
    doc1["uptime_secs"], doc2["uptime_secs"] = 100.0, 110.0
    m = measure(doc2, doc1)
    assert m.instances[hot].backpressure == pytest.approx(0.6)
    assert m.instances[cold].backpressure == 0.0
    assert m.instances[hot].queue_bytes == 4096 and m.instances[hot].queue_growth == pytest.approx(204.8)
    assert m.components["b"].backpressure == pytest.approx(0.6)
    assert "backpressure" not in m.missing and "queue" not in m.missing
