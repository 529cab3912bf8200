"""streammgr.healthrunner: the thin I/O around the health manager, with a fake clock,
an injected rebalance callable and restart callable, and a state manager in a tmp dir."""
from __future__ import annotations

import threading

import pytest

from bittern.state import LocalStateManager
from bittern.wire import Op
from streammgr.health.model import FAILED, HELPED, PENDING, RESTART, SCALE, UNDER_PROVISIONED
from streammgr.healthrunner import HealthRunner, cluster_scaler, log_path, request_path
from streammgr.stmgr import StreamManager
from streammgr.routing import RoutingTable

from .health_docs import CONF, bolt, topo

MB = 1 << 20


class Clock:
    def __init__(self, t=0.0):
        self.t = t

    def __call__(self):
        return self.t


class World:
    """split's offered load is ``load`` instances' worth; par instances cause
    backpressure 1 - par/load of the time."""

    def __init__(self, par, load):
        self.par, self.load = par, load
        self.scaled, self.restarted = [], []
        self.fail_scale = None
        self.gate = None  # a threading.Event the rebalance waits for

    def doc(self, uptime):
        bp = max(0.0, 1 - self.par / self.load)
        util = min(1.0, self.load / self.par)
        split = [bolt(bp=bp / self.par, q=9 * MB if bp > 0.02 else 0, rate=100 * util, cpu=100 * util)
                 for _ in range(self.par)]
        return topo(split, [bolt(cpu=50, rate=100)], throttled=bp, uptime=uptime)

    def scale(self, parallelisms):
        if self.gate is not None:
            assert self.gate.wait(10)
        if self.fail_scale:
            raise RuntimeError(self.fail_scale)
        [(component, parallelism)] = parallelisms.items()
        self.scaled.append((component, parallelism))
        self.par = parallelism

    def restart(self, task, reason):
        self.restarted.append(task)


def runner(world, clock, state=None, conf=None, ready=lambda: True):
    return HealthRunner("t", conf or CONF, lambda: world.doc(clock()), world.restart, world.scale,
                        state=state, clock=clock, ready=ready)


def test_scale_runs_in_the_background_and_is_judged_after_the_wait():
    clock, w = Clock(), World(par=2, load=4.0)
    w.gate = threading.Event()
    r = runner(w, clock)
    [d] = r.tick()
    assert (d.outcome, d.action.kind, d.action.parallelism_to) == (PENDING, SCALE, 4)
    assert r.in_flight is not None and w.scaled == []  # the loop did not wait for the rebalance
    clock.t = 120.0
    assert r.tick() == [] and r.describe()["in_flight"] == d.id  # no round while it is under way
    assert r.hm.last_round == 0.0
    w.gate.set()
    r.wait(5)
    clock.t = 130.0
    r.tick()  # collects the result: applied now, the wait counts from here
    assert w.scaled == [("split", 4)] and r.in_flight is None
    assert r.hm.pending.started == 130.0
    clock.t = 150.0
    assert r.tick() == []  # a round, but within the post-action wait
    clock.t = 190.0
    settled = r.tick()
    assert settled == [d] and d.outcome == HELPED


def test_a_failed_rebalance_is_reported_and_blacklisted():
    clock, w = Clock(), World(par=2, load=4.0)
    w.fail_scale = "no such topology"
    r = runner(w, clock)
    [d] = r.tick()
    r.wait(5)
    clock.t = 1.0
    [again] = r.tick()
    assert again is d and d.outcome == FAILED
    assert "no such topology" in d.outcome_evidence["error"]
    assert r.hm.blacklist == {(UNDER_PROVISIONED, "split"): d.id}
    assert r.describe()["failed"] == 1


def test_restart_is_sent_and_counts_as_applied():
    clock = Clock()
    w = World(par=3, load=1.0)
    # task 2 (split's first) has a queue far above its peers', and causes backpressure alone
    w.doc = lambda uptime: topo([bolt(bp=0.3, q=20 * MB, rate=100), bolt(q=0, rate=100), bolt(q=0, rate=100)],
                                [bolt()], throttled=0.3, uptime=uptime)
    r = runner(w, clock)
    [d] = r.tick()
    assert d.action.kind == RESTART and w.restarted == [d.action.task] == [2]
    assert r.hm.pending.decision is d and r.in_flight is None


def test_no_round_before_the_topology_runs_nor_sooner_than_the_interval():
    clock, w = Clock(), World(par=2, load=4.0)
    running = []
    r = runner(w, clock, ready=lambda: bool(running))
    assert r.tick() == [] and r.hm.last_round is None
    running.append(1)
    assert len(r.tick()) == 1
    r.wait(5)
    clock.t = 10.0
    r.tick()  # collects the rebalance
    clock.t = 30.0
    assert r.tick() == [] and r.hm.last_round == 0.0  # interval 60 s


def test_decision_log_and_blacklist_survive_a_new_topology_master(tmp_path):
    state = LocalStateManager(str(tmp_path))
    clock, w = Clock(), World(par=2, load=4.0)
    w.fail_scale = "refused"
    r = runner(w, clock, state=state)
    [d] = r.tick()
    r.wait(5)
    clock.t = 1.0
    r.tick()
    saved = state.get(log_path("t"))
    assert [x["id"] for x in saved["decisions"]] == [d.id]
    assert saved["blacklist"] == [{"diagnosis": UNDER_PROVISIONED, "component": "split", "decision": d.id}]
    # a new topology master (after a restart): history shown, blacklist kept, ids go on
    w2 = World(par=2, load=4.0)
    r2 = runner(w2, Clock(500.0), state=state)
    assert [x["outcome"] for x in r2.decisions()] == [FAILED]
    assert r2.hm.blacklist == {(UNDER_PROVISIONED, "split"): d.id}
    out = r2.tick()
    assert w2.scaled == [] and all(x.outcome != PENDING for x in out)
    assert all(x.id > d.id for x in out)


def test_cluster_scaler_writes_a_request_and_waits_for_nimbus(tmp_path):
    state = LocalStateManager(str(tmp_path))
    t = [0.0]

    def sleep(secs):
        t[0] += secs
        doc = state.get(request_path("t"))
        if t[0] >= 3:
            state.put(request_path("t"), {**doc, "state": "DONE"})

    scale = cluster_scaler(state, "t", timeout=30, clock=lambda: t[0], sleep=sleep)
    scale({"split": 4})
    assert state.get(request_path("t"))["parallelism"] == 4
    # several components in one request; component/parallelism name the first
    t[0] = 0.0
    scale({"split": 3, "count": 5})
    req = state.get(request_path("t"))
    assert (req["component"], req["parallelism"], req["parallelisms"]) == ("split", 3, {"split": 3, "count": 5})
    # nimbus never answers: the request fails after the timeout, saying why
    never = cluster_scaler(state, "t", timeout=5, clock=lambda: t[0], sleep=lambda s: t.__setitem__(0, t[0] + s))
    with pytest.raises(RuntimeError, match="did not carry out"):
        never({"split": 8})
    for bad in ({}, {"split": 0}, {"split": "4"}, ("split", 4)):
        with pytest.raises(ValueError, match="scale"):
            scale(bad)


def test_stream_manager_restarts_only_the_incarnation_asked_for(monkeypatch):
    killed = []
    monkeypatch.setattr("os.kill", lambda pid, sig: killed.append(pid))
    sm = StreamManager.__new__(StreamManager)
    sm.table = RoutingTable({1: 0, 2: 0, 3: 1}, 0)
    sm.registered = {1: {"pid": 501}, 2: {"pid": 502}}
    assert sm.restart_task(2, 999, "old pid") is False  # already restarted: left alone
    assert sm.restart_task(3, None, "elsewhere") is False  # not in this container
    assert sm.restart_task(2, 502, "slow") is True and killed == [502]
    sm.on_tm_ctrl({"op": Op.RESTART_TASK, "task": 1, "pid": 501, "reason": "slow"})
    assert killed == [502, 501]


def test_a_new_topology_master_takes_over_the_pending_scale(tmp_path):
    """A local rebalance restarts the topology master that asked for it: the next one
    judges the scale (it took effect: the plan has the new parallelism)."""
    state = LocalStateManager(str(tmp_path))
    clock, w = Clock(), World(par=2, load=4.0)
    w.gate = threading.Event()  # the rebalance never returns: its topology master is gone
    r = runner(w, clock, state=state)
    [d] = r.tick()
    saved = state.get(log_path("t"))
    assert saved["pending"]["id"] == d.id and saved["pending"]["before"]["tasks"]
    w2 = World(par=4, load=4.0)  # the new plan
    clock2 = Clock(1000.0)
    r2 = HealthRunner("t", CONF, lambda: w2.doc(clock2()), w2.restart, w2.scale, state=state, clock=clock2,
                      parallelism=lambda c: w2.par)
    assert r2.hm.pending is not None and r2.hm.pending.decision.id == d.id
    assert r2.hm.pending.started == 1000.0
    assert [x["outcome"] for x in r2.decisions()] == [PENDING]
    assert r2.tick() == []  # the first round: within the post-action wait
    clock2.t = 1060.0
    [settled] = r2.tick()
    assert settled.id == d.id and settled.outcome == HELPED
    assert state.get(log_path("t"))["decisions"][-1]["outcome"] == HELPED
    w.gate.set()


def test_a_scale_that_did_not_take_effect_fails_in_the_next_topology_master(tmp_path):
    state = LocalStateManager(str(tmp_path))
    clock, w = Clock(), World(par=2, load=4.0)
    w.gate = threading.Event()
    r = runner(w, clock, state=state)
    [d] = r.tick()
    r2 = HealthRunner("t", CONF, lambda: w.doc(0.0), w.restart, w.scale, state=state, clock=Clock(5.0),
                      parallelism=lambda c: 2)  # rolled back to the old plan
    [x] = r2.decisions()
    assert x["id"] == d.id and x["outcome"] == FAILED and "did not take effect" in x["outcome_evidence"]["error"]
    assert r2.hm.pending is None and r2.hm.blacklist == {(UNDER_PROVISIONED, "split"): d.id}
    w.gate.set()


def test_no_round_while_a_rebalance_runs():
    clock, w = Clock(), World(par=2, load=4.0)
    busy = [True]
    r = HealthRunner("t", CONF, lambda: w.doc(clock()), w.restart, w.scale, clock=clock, busy=lambda: busy[0])
    assert r.tick() == [] and r.hm.last_round is None
    busy[0] = False
    assert len(r.tick()) == 1
    r.wait(5)


def test_the_saved_copy_of_a_document_measures_the_same():
    from streammgr.health import measure
    from streammgr.healthrunner import slim
    w = World(par=3, load=4.0)
    a, b = w.doc(600.0), w.doc(660.0)
    b["stmgrs"]["0"]["backpressure_secs_by_task"] = {"2": 5.0}
    a["stmgrs"]["0"]["backpressure_secs_by_task"] = {"2": 1.0}
    for d in (a, b):
        for v in d["tasks"].values():
            v.pop("backpressure_initiated_fraction", None)
    full, small = measure(b, a), measure(slim(b), slim(a))
    assert {t: i.to_dict() for t, i in full.instances.items()} == {t: i.to_dict() for t, i in small.instances.items()}
    assert full.components["split"].to_dict() == small.components["split"].to_dict()
    assert small.instances[2].backpressure is not None
    assert slim(None) is None


def test_a_new_submission_does_not_inherit_the_log(tmp_path):
    state = LocalStateManager(str(tmp_path))
    clock, w = Clock(), World(par=2, load=4.0)
    w.fail_scale = "refused"
    r = HealthRunner("t", CONF, lambda: w.doc(clock()), w.restart, w.scale, state=state, clock=clock,
                     submission=1.0)
    r.tick()
    r.wait(5)
    clock.t = 1.0
    r.tick()
    assert r.hm.blacklist
    same = HealthRunner("t", CONF, lambda: w.doc(0.0), w.restart, w.scale, state=state, submission=1.0)
    assert same.hm.blacklist and same.decisions()
    again = HealthRunner("t", CONF, lambda: w.doc(0.0), w.restart, w.scale, state=state, submission=2.0)
    assert not again.hm.blacklist and again.decisions() == []
