"""Health manager resolvers: Dhalion's scale-up factor, the scale-down margin, outcomes."""
from __future__ import annotations

import pytest

from streammgr.health import Settings, measure
from streammgr.health import detectors as det
from streammgr.health.diagnosers import diagnose
from streammgr.health.model import (DATA_SKEW, DID_NOT_HELP, HELPED, OVER_PROVISIONED, REPORT, RESTART, SCALE,
                                    SLOW_INSTANCE, UNDER_PROVISIONED, UNKNOWN, Action, Diagnosis)
from streammgr.health.resolvers import dhalion_parallelism, evaluate, resolve, scale_down_parallelism

from .health_docs import bolt, doc, spout, topo

S = Settings()
MB = 1 << 20


@pytest.mark.parametrize("par,bp,cap,new", [
    (2, 0.5, None, 4),  # bp 0.5: it processed half of what was offered -> twice the instances
    (2, 0.5, 3, 3),  # capped at max.parallelism
    (4, 1 / 3, None, 6),
    (2, 0.2, None, 3),
    (3, 0.0, None, 3),
    (1, 1.0, None, 5),  # clamped to 0.999 and fenced at 5x (Heron)
    (2, 0.9, 32, 10),
    (10, 0.9, 32, 32),
])
def test_dhalion_formula(par, bp, cap, new):
    assert dhalion_parallelism(par, bp, cap) == new


def test_scale_down_keeps_a_margin_below_saturation():
    assert scale_down_parallelism(4, 0.1, 0.5) == 1
    assert scale_down_parallelism(10, 0.15, 0.5) == 3  # 10 x 15% = 1.5 instances' work -> 3 at 50%
    assert scale_down_parallelism(5, 0.0, 0.5) == 1  # never below 1
    assert scale_down_parallelism(2, 0.19, 0.5) == 1
    for par in range(2, 40):
        for u in (0.01, 0.05, 0.1, 0.19):
            new = scale_down_parallelism(par, u, 0.5)
            assert 1 <= new < par and u * par / new <= 0.5  # projected load stays under the target


def _one(m):
    [d] = diagnose(det.detect(m, S), m, S, {c: 99 for c in m.components})
    return d, resolve(d, m, S)


def test_scale_up_uses_the_measured_backpressure():
    d, a = _one(measure(topo([bolt(bp=0.25, q=9 * MB), bolt(bp=0.25, q=9 * MB)], [bolt()], throttled=0.5)))
    assert d.kind == UNDER_PROVISIONED
    assert (a.kind, a.component, a.parallelism_from, a.parallelism_to) == (SCALE, "split", 2, 4)
    assert "50%" in a.reason and "2.00x" in a.reason


def test_summed_backpressure_is_bounded_by_the_spouts_paused_time():
    # both instances held backpressure at the same time: the sum (0.999) overstates it;
    # the spouts were paused half the time, so that is the most it can have been
    _, a = _one(measure(topo([bolt(bp=0.5, q=9 * MB), bolt(bp=0.5, q=9 * MB)], [bolt()], throttled=0.5)))
    assert a.parallelism_to == 4


def test_scale_up_without_backpressure_numbers_adds_one_instance():
    def d(q, uptime):
        return doc({"b": [{"kind": "bolt", "queued_bytes": q, "execute_rate": 50.0}]}, uptime=uptime)
    m = measure(d(6 * MB, 600.0), d(2 * MB, 540.0))
    _, a = _one(m)
    assert (a.kind, a.parallelism_from, a.parallelism_to) == (SCALE, 1, 2)
    assert "growing" in a.reason


def test_at_max_parallelism_it_only_reports():
    s = Settings(max_parallelism=2)
    m = measure(topo([bolt(bp=0.3, q=9 * MB), bolt(bp=0.3, q=9 * MB)], [bolt()], throttled=0.6))
    [d] = diagnose(det.detect(m, s), m, s)
    a = resolve(d, m, s)
    assert a.kind == REPORT and "largest parallelism 2" in a.reason
    # a component's own cap (a stateful one's key groups) below max.parallelism
    assert resolve(d, m, Settings(), cap=3).parallelism_to == 3
    assert resolve(d, m, Settings(), cap=None).parallelism_to == 5  # bp 0.6: 2 x 2.5


def test_restart_a_slow_instance_report_data_skew():
    d, a = _one(measure(topo([bolt(bp=0.4, q=9 * MB, rate=100), bolt(q=MB // 4, rate=100),
                              bolt(q=MB // 4, rate=100)], [bolt()], throttled=0.4)))
    assert d.kind == SLOW_INSTANCE and (a.kind, a.task, a.parallelism_to) == (RESTART, 2, 3)
    d, a = _one(measure(topo([bolt(bp=0.4, q=9 * MB, rate=500), bolt(q=MB // 4, rate=100),
                              bolt(q=MB // 4, rate=100)], [bolt()], throttled=0.4)))
    assert d.kind == DATA_SKEW and (a.kind, a.task) == (REPORT, 2)
    assert "does not split a hot key" in a.reason


def test_scale_down_an_over_provisioned_bolt():
    d, a = _one(measure(topo([bolt(cpu=10)] * 4, [bolt(cpu=70)])))
    assert d.kind == OVER_PROVISIONED
    assert (a.kind, a.component, a.parallelism_from, a.parallelism_to) == (SCALE, "split", 4, 1)


def test_evaluate_scale_up():
    before = measure(topo([bolt(bp=0.25, q=9 * MB)] * 2, [bolt()], throttled=0.5))
    d = Diagnosis(UNDER_PROVISIONED, "split")
    a = Action(SCALE, "split", None, 2, 4)
    better = measure(topo([bolt(bp=0.0, q=0)] * 4, [bolt()]))
    same = measure(topo([bolt(bp=0.22, q=9 * MB)] * 4, [bolt()], throttled=0.5))
    blind = measure(doc({"spout": [{"kind": "spout"}], "split": [{"kind": "bolt"}] * 4}))
    assert evaluate(a, d, before, better, S)[0] == HELPED
    outcome, ev = evaluate(a, d, before, same, S)
    assert outcome == DID_NOT_HELP and ev["metric"] == "backpressure" and ev["parallelism_now"] == 4
    assert evaluate(a, d, before, blind, S)[0] == UNKNOWN


def test_evaluate_restart_and_scale_down():
    before = measure(topo([bolt(bp=0.4, q=9 * MB), bolt(), bolt()], [bolt()], throttled=0.4))
    r = Action(RESTART, "split", 2, 3, 3)
    assert evaluate(r, Diagnosis(SLOW_INSTANCE, "split", 2), before,
                    measure(topo([bolt(), bolt(), bolt()], [bolt()])), S)[0] == HELPED
    assert evaluate(r, Diagnosis(SLOW_INSTANCE, "split", 2), before, before, S)[0] == DID_NOT_HELP
    down = Action(SCALE, "split", None, 4, 1)
    od = Diagnosis(OVER_PROVISIONED, "split")
    ok = measure(topo([bolt(cpu=40)], [bolt()]))
    hurt = measure(topo([bolt(bp=0.3, q=9 * MB, cpu=100)], [bolt()], throttled=0.3))
    assert evaluate(down, od, before, ok, S)[0] == HELPED
    assert evaluate(down, od, before, hurt, S)[0] == DID_NOT_HELP


def test_spouts_are_never_scaled():
    m = measure(doc({"spout": [spout(throttled=0.9, cpu=1)] * 3, "b": [bolt(cpu=70)]}))
    for d in diagnose(det.detect(m, S), m, S, {"spout": 99}):
        assert d.component != "spout"
