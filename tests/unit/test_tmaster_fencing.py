"""The topology master's side of fencing (streammgr/tmfence.py): which stream managers it
listens to, and what it does when the assignment says a newer copy exists. Messages are
fed to its handler directly and what it sends is captured; the assignment is read from a
real (local, directory-backed) state manager standing in for ZooKeeper."""
from __future__ import annotations

import pytest

from bittern import config as cfg
from bittern.packing import round_robin
from bittern.runplan import RunPlan
from bittern.state import LocalStateManager
from bittern.wire import Op
from streammgr.tmaster import TopologyMaster

from .test_tmaster_checkpoints import Two


def asg(since, version=None):
    version = version or max(since.values())
    return {"version": version, "containers": {str(c): {"supervisor": f"s{c}", "since": v} for c, v in since.items()}}


@pytest.fixture
def tm(tmp_path):
    tdef = Two.build("two")
    conf = cfg.merge(tdef.config, {})
    packing = round_robin({"s": 1, "b": 2}, 2)
    plan = RunPlan("two", str(tmp_path / "home"), tdef, packing, "tcp://127.0.0.1:*", {0: {}, 1: {}}, conf,
                   state_url="zk://stand-in", placed={0: 1, 1: 1})
    sm = LocalStateManager(str(tmp_path / "home"))
    sm.put("topologies/two", {"state": "RUNNING", "submitted_at": 1.0})
    sm.put("assignments/two", asg({0: 1, 1: 1}))
    t = TopologyMaster(plan, state=sm)
    t.sent = []
    t._send = lambda identity, op, **f: t.sent.append((identity, op, f))
    yield t
    t.sock.close(linger=0)
    t._zctx.term()


def register(tm, ident, c, pid):
    tm.on_stmgr(ident, {"op": Op.STMGR_REGISTER, "container": c, "pid": pid, "tasks": {}})


def test_older_copies_are_answered_fenced_newer_ones_replace_them_and_claims_are_checked(tm):
    register(tm, b"s0@1", 0, 10)
    register(tm, b"s1@1", 1, 11)
    assert tm.stmgrs[1]["identity"] == b"s1@1"
    tm.on_stmgr(b"s1", {"op": Op.HEARTBEAT, "container": 1, "counters": {"x": 1}})
    assert tm.sent[-1] == (b"s1", Op.FENCED, {"container": 1, "placed": 0, "newer": 1})
    assert "counters" not in tm.stmgrs[1]
    # a newer copy of container 1 registers: it replaces the old one, which is told it is fenced
    register(tm, b"s1@4", 1, 41)
    assert (b"s1@1", Op.FENCED, {"container": 1, "newer": 4}) in tm.sent
    assert tm.stmgrs[1]["identity"] == b"s1@4" and tm.stmgrs[1]["pid"] == 41
    tm.sent.clear()
    tm.on_stmgr(b"s1@1", {"op": Op.CKPT_SAVED, "container": 1, "task": 2, "id": 1, "epoch": 1})
    assert tm.sent == [(b"s1@1", Op.FENCED, {"container": 1, "placed": 1, "newer": 4})]
    # what the topology master sends to container 1 goes to the identity it registered with
    tm.sent.clear()
    tm.broadcast(Op.REPORT, seq=1)
    assert sorted(i for i, _, _ in tm.sent) == [b"s0@1", b"s1@4"]
    # a message that claims another container than its identity's, or from no stream manager
    tm.sent.clear()
    for ident in (b"s0@1", b"c1@4", b"junk", b"t3"):
        tm.on_stmgr(ident, {"op": Op.HEARTBEAT, "container": 1, "counters": {"y": 1}})
    assert tm.sent == [] and "counters" not in tm.stmgrs[1]


def test_the_assignment_fences_other_containers_old_copies_and_this_one(tm):
    register(tm, b"s0@1", 0, 10)
    register(tm, b"s1@1", 1, 11)
    assert tm.fence_ok(0.0, force=True) and tm.fenced_by is None
    # nimbus moved container 1 (version 2): its old copy, registered here, is fenced at the next read
    tm.state.put("assignments/two", asg({0: 1, 1: 2}))
    assert tm.fence_ok(1.0) is True  # (read less than CHECK_SECS ago: not read again)
    assert 1 in tm.stmgrs
    assert tm.fence_ok(100.0) is True
    assert 1 not in tm.stmgrs and (b"s1@1", Op.FENCED, {"container": 1, "newer": 2}) in tm.sent
    tm.on_stmgr(b"s1@1", {"op": Op.STMGR_REGISTER, "container": 1, "pid": 11, "tasks": {}})
    assert 1 not in tm.stmgrs  # refused from now on
    # then container 0 itself was placed anew (version 3): this is the old topology master
    register(tm, b"s1@2", 1, 21)
    before = tm.state.get("status/two")
    tm.state.put("assignments/two", asg({0: 3, 1: 2}))
    tm.write_status()  # (its cached read is older than CHECK_SECS in monotonic time: read again first)
    assert tm.fenced_by == 3 and tm.stopping
    assert tm.state.get("status/two") == before, "a fenced topology master wrote its status"
    assert (b"s0@1", Op.FENCED, {"container": 0, "placed": 1, "newer": 3}) in tm.sent
    assert not [s for s in tm.sent if s[0] == b"s1@2" and s[1] == Op.FENCED], "the current copy of 1 was fenced"
    assert tm.fence_ok(1e9, force=True) is False
