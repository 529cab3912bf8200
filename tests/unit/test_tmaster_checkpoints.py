"""The topology master's side of exactly once: it carries out what the coordinator decides
(broadcasts, mark_complete, the persisted epoch, metrics). Messages are fed to its
handler directly; what it sends is captured."""
from __future__ import annotations

import pytest

from bittern import Bolt, Grouping, Spout, Topology
from bittern import config as cfg
from bittern.checkpoint import CheckpointStore, task_layout
from bittern.packing import round_robin
from bittern.runplan import RunPlan
from bittern.state import LocalStateManager
from bittern.wire import Op
from streammgr.tmaster import RUNNING, TopologyMaster


class S(Spout):
    outputs = ["n"]


class B(Bolt):
    outputs = []


class Two(Topology):
    s = S.spec()
    b = B.spec(par=2, inputs={s: Grouping.SHUFFLE})


@pytest.fixture
def make_tm(tmp_path):
    made = []

    def make(submitted_at=1.0, b_par=2, mode="EFFECTIVELY_ONCE"):
        """(test_tmaster_messages.py and test_tmaster_fencing.py build theirs with it too)"""
        tdef = Two.build("two")
        conf = cfg.merge(tdef.config, {"topology.reliability.mode": mode,
                                       "bittern.checkpoint.dir": str(tmp_path / "ckpt"),
                                       "topology.stateful.checkpoint.interval.seconds": 1.0})
        packing = round_robin({"s": 1, "b": b_par}, 2)
        plan = RunPlan("two", str(tmp_path / "home"), tdef, packing, "tcp://127.0.0.1:*",
                       {0: {}, 1: {}}, conf)
        sm = LocalStateManager(str(tmp_path / "home"))
        sm.put("topologies/two", {"state": "RUNNING", "submitted_at": submitted_at})
        tm = TopologyMaster(plan, state=sm)
        tm.sent = []
        tm._send = lambda identity, op, **f: tm.sent.append((identity, op, f))
        made.append(tm)
        return tm
    yield make
    for tm in made:
        tm.sock.close(linger=0)
        tm._zctx.term()


def ops(tm, op):
    """The fields of each broadcast of ``op`` (one per stream manager: deduplicated)."""
    seen = []
    for ident, o, f in tm.sent:
        if o == op and (not seen or seen[-1] != f):
            seen.append(f)
    return seen


def register_all(tm, pids=(100, 200)):
    pk = tm.plan.packing
    for c, pid in zip(sorted(pk.containers), pids):
        tasks = {str(t): {"ok": True, "pid": 1000 + t, "component": pk.task_component[t]}
                 for t in pk.containers[c]}
        tm.on_stmgr(b"s%d" % c, {"op": Op.STMGR_REGISTER, "container": c, "pid": pid, "tasks": tasks})


def restored(tm, epoch):
    for t in sorted(tm.all_tasks):
        tm.on_stmgr(b"s0", {"op": Op.RESTORED, "container": 0, "task": t, "epoch": epoch})


def test_start_restore_checkpoint_commit_and_rollback(make_tm):
    tm = make_tm()
    register_all(tm)
    assert tm.phase == RUNNING
    assert ops(tm, Op.RESTORE) == [{"id": None, "epoch": 1, "layout": None}]
    restored(tm, 1)
    assert ops(tm, Op.RESUME) == [{"epoch": 1}]
    tm._checkpoint_actions(tm.ckpt.tick(tm.ckpt.next_due))
    assert ops(tm, Op.CKPT_START) == [{"id": 1, "epoch": 1}]
    store = tm.ckpt_store
    for t in sorted(tm.all_tasks):
        store.save(1, t, b"x" * t)
        tm.on_stmgr(b"s0", {"op": Op.CKPT_SAVED, "container": 0, "task": t, "id": 1, "epoch": 1,
                            "bytes": t, "align_ms": 0.5 * t})
    assert ops(tm, Op.CKPT_COMMIT) == [{"id": 1}]
    assert store.latest_complete() == 1
    layout = task_layout(tm.plan.packing)
    assert store.metadata(1)["layout"] == layout == {"tasks": {"1": ["b", 0], "2": ["b", 1], "3": ["s", 0]},
                                                     "parallelism": {"b": 2, "s": 1}}
    doc = tm.metrics_doc()["checkpoints"]
    assert doc["last_complete"] == 1 and doc["last_bytes"] == sum(tm.all_tasks)
    assert doc["last_max_align_ms"] == 0.5 * max(tm.all_tasks) and doc["restores"] == 0
    # a stream manager with a new pid: every task rolls back to 1
    tm.on_stmgr(b"s1", {"op": Op.STMGR_REGISTER, "container": 1, "pid": 201, "tasks": {}})
    assert ops(tm, Op.RESTORE)[-1] == {"id": 1, "epoch": 2, "layout": layout}
    # ... and so does an instance with a new pid (during the rollback: RESTORE again)
    t = sorted(tm.all_tasks)[0]
    tm.on_stmgr(b"s0", {"op": Op.REGISTER, "container": 0, "task": t, "ok": True, "pid": 5555,
                        "component": tm.plan.packing.task_component[t]})
    assert [f for _, o, f in tm.sent if o == Op.RESTORE][-1] == {"id": 1, "epoch": 2, "layout": layout}
    restored(tm, 2)
    assert ops(tm, Op.RESUME)[-1] == {"epoch": 2}
    assert tm.metrics_doc()["checkpoints"]["restores"] == 1
    assert tm.state.get("checkpoints/two/epoch")["epoch"] == 2


def test_a_restarted_master_resumes_a_new_submission_does_not(make_tm):
    tm = make_tm(submitted_at=1.0)
    register_all(tm)
    restored(tm, 1)
    tm._checkpoint_actions(tm.ckpt.tick(tm.ckpt.next_due))
    for t in sorted(tm.all_tasks):
        tm.ckpt_store.save(1, t, b"s")
        tm.on_stmgr(b"s0", {"op": Op.CKPT_SAVED, "container": 0, "task": t, "id": 1, "epoch": 1})
    assert tm.ckpt_store.latest_complete() == 1
    again = make_tm(submitted_at=1.0)  # the same submission: a restarted topology master
    register_all(again)
    assert ops(again, Op.RESTORE) == [{"id": 1, "epoch": 2, "layout": task_layout(tm.plan.packing)}]
    assert again.ckpt.next_id == 2
    fresh = make_tm(submitted_at=2.0)  # submitted again under the same name
    assert isinstance(fresh.ckpt_store, CheckpointStore) and fresh.ckpt_store.latest_complete() is None
    register_all(fresh)
    assert ops(fresh, Op.RESTORE) == [{"id": None, "epoch": 1, "layout": None}]


def test_restore_after_a_rebalance_carries_the_old_layout(make_tm):
    """The same submission restarted with b at par 3 (task ids moved: s was 3, is now 4):
    RESTORE names checkpoint 1 with the layout it was taken with; new checkpoints record
    the new one."""
    tm = make_tm()
    register_all(tm)
    restored(tm, 1)
    tm._checkpoint_actions(tm.ckpt.tick(tm.ckpt.next_due))
    for t in sorted(tm.all_tasks):
        tm.ckpt_store.save(1, t, b"s")
        tm.on_stmgr(b"s0", {"op": Op.CKPT_SAVED, "container": 0, "task": t, "id": 1, "epoch": 1})
    old = task_layout(tm.plan.packing)
    big = make_tm(b_par=3)
    register_all(big)
    assert ops(big, Op.RESTORE) == [{"id": 1, "epoch": 2, "layout": old}]
    restored(big, 2)
    big._checkpoint_actions(big.ckpt.tick(big.ckpt.next_due))
    for t in sorted(big.all_tasks):
        big.ckpt_store.save(2, t, b"s")
        big.on_stmgr(b"s0", {"op": Op.CKPT_SAVED, "container": 0, "task": t, "id": 2, "epoch": 2})
    assert big.ckpt_store.layout(2) == {"tasks": {"1": ["b", 0], "2": ["b", 1], "3": ["b", 2], "4": ["s", 0]},
                                        "parallelism": {"b": 3, "s": 1}}
    assert big.ckpt_store.layout(1) == old


def test_other_modes_have_no_coordinator(tmp_path):
    tdef = Two.build("two")
    plan = RunPlan("two", str(tmp_path), tdef, round_robin({"s": 1, "b": 2}, 1), "tcp://127.0.0.1:*",
                   {0: {}}, cfg.merge(tdef.config, {"topology.reliability.mode": "ATLEAST_ONCE"}))
    tm = TopologyMaster(plan, state=LocalStateManager(str(tmp_path)))
    try:
        assert tm.ckpt is None and "checkpoints" not in tm.metrics_doc()
    finally:
        tm.sock.close(linger=0)
        tm._zctx.term()
