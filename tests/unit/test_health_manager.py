"""The health manager's policy loop: one action at a time, the post-action wait, the
outcome check, the blacklist, no oscillation over long simulated runs."""
from __future__ import annotations

import json
import random

from streammgr.health import HealthManager
from streammgr.health.model import (BLACKLISTED, DATA_SKEW, DID_NOT_HELP, FAILED, HELPED, OVER_PROVISIONED,
                                    PENDING, REPORTED, RESTART, SCALE, SLOW_INSTANCE, UNDER_PROVISIONED)

from .health_docs import CONF, bolt, doc, topo

MB = 1 << 20


class Sim:
    """spout -> split -> count; split's offered load is ``load(t)`` instances' worth of
    work. With par < load it caused backpressure 1 - par/load of the time (the spouts
    were paused as long); each instance is min(1, load/par) busy."""

    def __init__(self, par, load, seed=1, noise=0.05):
        self.par, self.load = par, load
        self.rng = random.Random(seed)
        self.noise = noise
        self.actions = []

    def jitter(self, x):
        return max(0.0, x * (1 + self.rng.uniform(-self.noise, self.noise)))

    def bp(self, load, par):
        return max(0.0, 1 - par / load) if load > 0 else 0.0

    def util(self, load, par):
        return min(1.0, load / par)

    def doc(self, t):
        load, par = self.load(t), self.par
        bp = min(0.99, self.jitter(self.bp(load, par)))
        util = min(1.0, self.jitter(self.util(load, par)))
        split = [bolt(bp=bp / par, q=9 * MB if bp > 0.02 else 0, rate=100 * util, cpu=100 * util)
                 for _ in range(par)]
        return topo(split, [bolt(cpu=50, rate=100)], throttled=bp, uptime=t)

    def run(self, hm, rounds, step=60.0, start=0.0):
        decisions = []
        for k in range(rounds):
            t = start + k * step
            for d in hm.observe(self.doc(t), t):
                decisions.append(d)
                if d.outcome == PENDING:
                    self.actions.append(d.action)
                    if d.action.kind == SCALE:
                        self.par = d.action.parallelism_to
        return decisions


def directions(actions):
    return ["up" if a.parallelism_to > a.parallelism_from else "down" for a in actions if a.kind == SCALE]


# -- the loop ---------------------------------------------------------------------------------

def test_scale_up_then_check_it_helped():
    sim = Sim(par=2, load=lambda t: 4.0, noise=0.0)  # bp = 1 - 2/4 = 0.5 -> 2 * 2 = 4
    hm = HealthManager(CONF, now=0.0)
    [d] = hm.observe(sim.doc(0.0), 0.0)
    assert (d.diagnosis.kind, d.outcome) == (UNDER_PROVISIONED, PENDING)
    assert (d.action.kind, d.action.parallelism_from, d.action.parallelism_to) == (SCALE, 2, 4)
    sim.par = 4
    [settled] = hm.observe(sim.doc(60.0), 60.0)
    assert settled is d and d.outcome == HELPED and d.outcome_time == 60.0
    assert d.outcome_evidence["before"] == 0.5 and d.outcome_evidence["after"] == 0.0
    assert hm.pending is None and hm.blacklist == {}


def test_rounds_sooner_than_the_interval_are_skipped():
    sim = Sim(par=2, load=lambda t: 4.0, noise=0.0)
    hm = HealthManager(CONF, now=0.0)
    assert len(hm.observe(sim.doc(0.0), 0.0)) == 1
    assert hm.observe(sim.doc(5.0), 5.0) == [] and hm.last_round == 0.0


def test_nothing_happens_during_the_post_action_wait():
    conf = {**CONF, "topology.healthmgr.interval.secs": 10.0, "topology.healthmgr.post.action.wait.secs": 60.0}
    sim = Sim(par=2, load=lambda t: 4.0, noise=0.0)
    hm = HealthManager(conf, now=0.0)
    [d] = hm.observe(sim.doc(0.0), 0.0)
    # not carried out yet: the symptom persists, but one action at a time and no verdict before the wait
    for t in (10.0, 20.0, 30.0, 40.0, 50.0):
        assert hm.observe(sim.doc(t), t) == []
        assert hm.pending.decision is d and d.outcome == PENDING
    [settled] = [x for x in hm.observe(sim.doc(60.0), 60.0) if x is d]
    assert settled.outcome == DID_NOT_HELP  # never carried out: backpressure unchanged
    assert hm.blacklist == {(UNDER_PROVISIONED, "split"): d.id}


def test_an_action_that_did_not_help_is_never_repeated():
    # split is not the real problem: more instances never reduce its backpressure
    sim = Sim(par=2, load=lambda t: 4.0, noise=0.0)
    sim.bp = lambda load, par: 0.5
    hm = HealthManager(CONF, now=0.0)
    decisions = sim.run(hm, rounds=200)
    assert [(a.kind, a.parallelism_from, a.parallelism_to) for a in sim.actions] == [(SCALE, 2, 4)]
    assert decisions[0].outcome == DID_NOT_HELP
    skipped = [d for d in decisions if d.outcome == BLACKLISTED]
    assert skipped and all(d.diagnosis.kind == UNDER_PROVISIONED for d in skipped)
    assert skipped[0].outcome_evidence == {"blacklisted_by": decisions[0].id}
    assert len(skipped) <= 200 * 60 / 600 + 1  # logged at most once per 10 minutes, not every round


def test_over_provisioned_scale_down_after_sustained_low_utilization():
    sim = Sim(par=4, load=lambda t: 0.4, noise=0.0)  # each instance 10% busy
    hm = HealthManager(CONF, now=0.0)
    assert sim.run(hm, rounds=2) == []  # 2 rounds: not yet sustained (3)
    [d] = sim.run(hm, rounds=1, start=120.0)
    assert d.diagnosis.kind == OVER_PROVISIONED and d.diagnosis.evidence["windows"] == 3
    assert (d.action.parallelism_from, d.action.parallelism_to) == (4, 1)  # 0.4 of work -> 1 at 40% < 50%
    more = sim.run(hm, rounds=50, start=180.0)
    assert d.outcome == HELPED
    assert sim.actions == [d.action]  # 40% busy is not low: it stays at 1, and never goes back up
    assert all(x.outcome != PENDING for x in more)


def test_long_run_with_changing_load_never_alternates():
    def load(t):
        return 3.0 if t < 3000 else 0.3 if t < 8000 else 2.5
    sim = Sim(par=1, load=load, seed=7, noise=0.1)
    hm = HealthManager(CONF, now=0.0)
    decisions = sim.run(hm, rounds=400)
    # one step per change of load, each of which helped: up (bp 2/3 -> 3), down, up again
    assert directions(sim.actions) == ["up", "down", "up"]
    settled = {d.id: d.outcome for d in decisions if d.action.kind == SCALE}  # (returned when made and settled)
    assert list(settled.values()) == [HELPED] * 3
    assert 2 <= sim.par <= 4


def test_a_pathological_component_cannot_make_it_oscillate():
    # at 4 it looks idle; below 4 it causes backpressure: a naive policy would go
    # 4 -> 1 -> 4 -> 1 ... forever
    sim = Sim(par=4, load=lambda t: 4.0, noise=0.0)
    sim.util = lambda load, par: 0.05 if par >= 4 else 1.0
    hm = HealthManager(CONF, now=0.0)
    decisions = sim.run(hm, rounds=1000)
    assert directions(sim.actions) == ["down", "up"]
    down = next(d for d in decisions if d.diagnosis.kind == OVER_PROVISIONED)
    assert down.outcome == DID_NOT_HELP and (OVER_PROVISIONED, "split") in hm.blacklist
    assert sim.par == 4


def test_random_loads_never_flip_flop():
    for seed in range(5):
        rng = random.Random(seed)
        steps = sorted(rng.uniform(0, 60000) for _ in range(6))
        levels = [rng.choice([0.2, 0.5, 1.5, 3.0, 6.0]) for _ in range(7)]

        def load(t, steps=steps, levels=levels):
            return levels[sum(t >= s for s in steps)]
        sim = Sim(par=2, load=load, seed=seed, noise=0.1)
        hm = HealthManager(CONF, now=0.0)
        sim.run(hm, rounds=1000)
        dirs = directions(sim.actions)
        # each flip of direction needs a change of load to justify it
        flips = sum(a != b for a, b in zip(dirs, dirs[1:]))
        assert flips <= len(steps), (seed, dirs)


def test_restart_slow_instance_and_report_data_skew_once():
    hm = HealthManager(CONF, now=0.0)
    slow = topo([bolt(bp=0.4, q=9 * MB, rate=100), bolt(q=MB // 4, rate=100), bolt(q=MB // 4, rate=100)],
                [bolt()], throttled=0.4)
    [d] = hm.observe(slow, 0.0)
    assert (d.diagnosis.kind, d.action.kind, d.action.task, d.outcome) == (SLOW_INSTANCE, RESTART, 2, PENDING)
    healed = topo([bolt(q=0, rate=130)] * 3, [bolt()], uptime=660.0)
    [d2] = hm.observe(healed, 60.0)
    assert d2 is d and d.outcome == HELPED

    skew = topo([bolt(bp=0.4, q=9 * MB, rate=500), bolt(q=MB // 4, rate=100)], [bolt()], throttled=0.4)
    hm2 = HealthManager(CONF, now=0.0)
    [r] = hm2.observe(skew, 0.0)
    assert (r.diagnosis.kind, r.action.kind, r.outcome) == (DATA_SKEW, "report", REPORTED)
    assert hm2.pending is None  # a report is not an action to wait for
    for t in range(60, 600, 60):
        assert hm2.observe(skew, float(t)) == []  # not repeated every round
    assert len(hm2.observe(skew, 600.0)) == 1


def test_action_failed_is_blacklisted():
    hm = HealthManager(CONF, now=0.0)
    sim = Sim(par=2, load=lambda t: 4.0, noise=0.0)
    [d] = hm.observe(sim.doc(0.0), 0.0)
    assert hm.action_failed(5.0, "rebalance refused") is d
    assert d.outcome == FAILED and d.outcome_evidence == {"error": "rebalance refused"}
    assert hm.action_failed(6.0, "again") is None
    [b] = hm.observe(sim.doc(60.0), 60.0)
    assert b.outcome == BLACKLISTED and hm.pending is None


def test_missing_metrics_never_crash_and_never_act():
    hm = HealthManager(CONF, now=0.0)
    docs = [None, {}, {"tasks": {}}, doc({"b": [{"kind": "bolt"}] * 3}, window=0.0),
            doc({"spout": [{"kind": "spout"}], "b": [{"kind": "bolt", "cpu_percent": 1.0}] * 3}, window=0.0),
            {"tasks": {"1": {"component": "b", "cpu_percent": "x"}}, "components": None}]
    for k in range(60):
        assert hm.observe(docs[k % len(docs)], 60.0 * k) == []
    st = hm.status()
    assert st["pending"] is None and st["missing"]
    json.dumps(st)


def test_decision_log_shows_symptoms_diagnosis_action_outcome_evidence():
    sim = Sim(par=2, load=lambda t: 4.0, noise=0.0)
    hm = HealthManager(CONF, now=0.0)
    sim.run(hm, rounds=3)
    [entry] = hm.decisions()
    assert set(entry) >= {"time", "symptoms", "diagnosis", "action", "outcome", "evidence"}
    assert entry["outcome"] == HELPED
    assert entry["diagnosis"] == {"kind": UNDER_PROVISIONED, "component": "split", "task": None}
    assert entry["action"]["parallelism_to"] == 4 and "backpressure" in entry["action"]["reason"]
    assert {s["kind"] for s in entry["symptoms"]} >= {"BACKPRESSURE", "LARGE_QUEUE"}
    assert entry["evidence"]["component"]["backpressure"] == 0.5
    assert entry["evidence"]["instances"]["2"]["queue_bytes"] == 9 * MB
    json.dumps(hm.decisions())
    json.dumps(hm.status())


def test_decision_log_is_bounded():
    from streammgr.health.manager import LOG_MAX
    hm = HealthManager({**CONF, "topology.healthmgr.interval.secs": 0.0}, now=0.0)
    skew = topo([bolt(q=3 * MB, rate=400), bolt(q=MB // 4, rate=100)], [bolt()])
    for k in range(LOG_MAX + 50):
        hm.observe(skew, 601.0 * k)
    assert len(hm.decisions()) == LOG_MAX and len(hm.decisions(limit=5)) == 5


def test_the_wait_counts_from_when_the_action_took_effect():
    sim = Sim(par=2, load=lambda t: 4.0, noise=0.0)
    hm = HealthManager(CONF, now=0.0)
    [d] = hm.observe(sim.doc(0.0), 0.0)
    hm.action_applied(100.0)  # the rebalance finished late
    sim.par = 4
    assert hm.observe(sim.doc(120.0), 120.0) == []
    assert hm.observe(sim.doc(180.0), 180.0) == [d] and d.outcome == HELPED


def test_describe_a_log_entry():
    from streammgr.health.manager import describe
    sim = Sim(par=2, load=lambda t: 4.0, noise=0.0)
    hm = HealthManager(CONF, now=0.0)
    sim.run(hm, rounds=2)
    line = describe(hm.decisions()[0])
    assert "UNDER_PROVISIONED split: scale split 2 -> 4 [HELPED]" in line and "BACKPRESSURE" in line
    assert describe({}) == "? ?: - [None] symptoms -"


def test_per_component_caps():
    sim = Sim(par=2, load=lambda t: 8.0, noise=0.0)  # bp 0.75 -> 2 * 4 = 8
    [d] = HealthManager(CONF, now=0.0, caps={"split": 5}).observe(sim.doc(0.0), 0.0)
    assert d.action.parallelism_to == 5
    [d] = HealthManager(CONF, now=0.0).observe(sim.doc(0.0), 0.0)
    assert d.action.parallelism_to == 8


def test_backpressure_anywhere_restarts_the_count_of_low_rounds():
    idle = topo([bolt(cpu=5)] * 4, [bolt(cpu=60)])
    busy = topo([bolt(cpu=5)] * 4, [bolt(bp=0.3, q=9 * MB, cpu=100)], throttled=0.3)
    hm = HealthManager({**CONF, "topology.healthmgr.max.parallelism": 1}, now=0.0)  # count cannot scale up
    t = 0.0
    for d in (idle, idle, busy, idle, idle):
        assert all(x.diagnosis.kind != OVER_PROVISIONED for x in hm.observe(d, t))
        t += 60.0
    assert hm.low_windows == {"split": 2}
    [d] = hm.observe(idle, t)
    assert d.diagnosis.kind == OVER_PROVISIONED
