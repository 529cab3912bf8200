"""Health manager detectors and diagnosers on synthetic metrics documents."""
from __future__ import annotations

from streammgr.health import Settings, measure
from streammgr.health import detectors as det
from streammgr.health.diagnosers import diagnose
from streammgr.health.model import (BACKPRESSURE, DATA_SKEW, GROWING_QUEUE, INSTANCE_BACKPRESSURE, LARGE_QUEUE,
                                    LOW_UTILIZATION, OVER_PROVISIONED, PROCESSING_RATE_SKEW, QUEUE_SKEW,
                                    SLOW_INSTANCE, UNATTRIBUTED_BACKPRESSURE, UNDER_PROVISIONED)

from .health_docs import bolt, doc, spout, topo

S = Settings()
MB = 1 << 20


def kinds(symptoms):
    return sorted((x.kind, x.component, x.task) for x in symptoms)


# -- detectors ------------------------------------------------------------------------------

def test_backpressure_above_the_noise_threshold_only():
    m = measure(topo([bolt(bp=0.3), bolt(bp=0.01)], [bolt(bp=0.01)], throttled=0.3))
    assert kinds(det.detect_backpressure(m, S)) == [
        (BACKPRESSURE, "split", None), (INSTANCE_BACKPRESSURE, "split", 2)]
    bp = det.detect_backpressure(m, S)[0]
    assert bp.evidence["backpressure"] == 0.31 and bp.evidence["by_task"] == {2: 0.3, 3: 0.01}
    # count: 0.01 < 0.02, noise
    calm = measure(topo([bolt(bp=0.01)], [bolt(bp=0.015)]))
    assert det.detect_backpressure(calm, S) == []


def test_throttled_spouts_without_a_measured_cause_are_reported_as_unattributed():
    d = doc({"spout": [spout(throttled=0.4)], "b": [{"kind": "bolt", "execute_rate": 10.0}]})
    [x] = det.detect_backpressure(measure(d), S)
    assert x.kind == UNATTRIBUTED_BACKPRESSURE and x.component is None
    assert "backpressure_initiated_fraction" in x.evidence["why"]
    # the spout itself is never a backpressure symptom
    assert all(x.component != "spout" for x in det.detect(measure(d), S))


def test_large_and_growing_queue():
    prev = topo([bolt(q=2 * MB), bolt(q=100)], [bolt(q=0)], uptime=540.0)
    cur = topo([bolt(q=5 * MB), bolt(q=200)], [bolt(q=2 * MB)], uptime=600.0)
    m = measure(cur, prev)
    assert kinds(det.detect_large_queue(m, S)) == [(LARGE_QUEUE, "count", 4), (LARGE_QUEUE, "split", 2)]
    assert kinds(det.detect_growing_queue(m, S)) == [(GROWING_QUEUE, "count", 4), (GROWING_QUEUE, "split", 2)]
    # not growing: same sizes as before
    assert det.detect_growing_queue(measure(cur, cur), S) == []


def test_processing_rate_skew():
    m = measure(topo([bolt(rate=100), bolt(rate=400), bolt(rate=390)], [bolt(rate=100), bolt(rate=120)]))
    [x] = det.detect_processing_rate_skew(m, S)
    assert (x.kind, x.component) == (PROCESSING_RATE_SKEW, "split")
    assert x.evidence["high_tasks"] == [3, 4] and x.evidence["max"] == 400 and x.evidence["min"] == 100
    # an idle component's "skew" (0.5 vs 0.1 tuples/s) is noise
    assert det.detect_processing_rate_skew(measure(topo([bolt(rate=0.5), bolt(rate=0.1)], [bolt()])), S) == []
    # a single instance cannot be skewed
    assert det.detect_processing_rate_skew(measure(topo([bolt(rate=9)], [bolt(rate=1)])), S) == []


def test_queue_skew_on_queues_or_else_on_backpressure():
    m = measure(topo([bolt(q=9 * MB), bolt(q=1 * MB), bolt(q=1 * MB)], [bolt(q=100), bolt(q=900)]))
    [x] = det.detect_queue_skew(m, S)
    assert (x.component, x.evidence["metric"], x.evidence["high_tasks"]) == ("split", "queue_bytes", [2])
    # small queues are no skew however unequal (count: 900 B vs 100 B)
    no_queues = doc({"b": [{"kind": "bolt", "backpressure_initiated_fraction": 0.4},
                           {"kind": "bolt", "backpressure_initiated_fraction": 0.0}]})
    [y] = det.detect_queue_skew(measure(no_queues), S)
    assert (y.evidence["metric"], y.evidence["high_tasks"]) == ("backpressure", [1])


def test_low_utilization_of_every_instance():
    m = measure(topo([bolt(cpu=5), bolt(cpu=8)], [bolt(cpu=5), bolt(cpu=30)]))
    [x] = det.detect_low_utilization(m, S)
    assert (x.kind, x.component, x.evidence["peak"]) == (LOW_UTILIZATION, "split", 0.08)
    # a single instance cannot be scaled down; busy capacity counts though CPU is low
    assert det.detect_low_utilization(measure(topo([bolt(cpu=1)], [bolt(cpu=1, capacity=0.5),
                                                                    bolt(cpu=1, capacity=0.5)])), S) == []
    # unknown utilisation is not low utilisation
    d = doc({"b": [{"kind": "bolt"}, {"kind": "bolt"}]}, window=0.0)
    assert det.detect_low_utilization(measure(d), S) == []


# -- diagnosers -----------------------------------------------------------------------------

def test_under_provisioned_is_the_backpressured_bolt_not_the_throttled_spout():
    m = measure(topo([bolt(bp=0.25, q=9 * MB, rate=100), bolt(bp=0.25, q=9 * MB, rate=105)],
                     [bolt(rate=200)], throttled=0.5))
    [d] = diagnose(det.detect(m, S), m, S)
    assert (d.kind, d.component, d.task) == (UNDER_PROVISIONED, "split", None)
    assert BACKPRESSURE in {x.kind for x in d.symptoms}
    assert d.evidence["component"]["parallelism"] == 2


def test_under_provisioned_from_large_growing_queues_without_backpressure_data():
    def d(q, uptime):
        return doc({"spout": [spout()], "b": [{"kind": "bolt", "queued_bytes": q, "execute_rate": 50.0},
                                              {"kind": "bolt", "queued_bytes": q, "execute_rate": 52.0}]},
                   uptime=uptime)
    m = measure(d(6 * MB, 600.0), d(2 * MB, 540.0))
    [x] = diagnose(det.detect(m, S), m, S)
    assert (x.kind, x.component) == (UNDER_PROVISIONED, "b")
    # large but not growing: no diagnosis
    m2 = measure(d(6 * MB, 600.0), d(6 * MB, 540.0))
    assert diagnose(det.detect(m2, S), m2, S) == []


def test_slow_instance_similar_rates_one_queue_far_above():
    m = measure(topo([bolt(bp=0.4, q=9 * MB, rate=100), bolt(q=MB // 2, rate=102), bolt(q=MB // 4, rate=98)],
                     [bolt()], throttled=0.4))
    [d] = diagnose(det.detect(m, S), m, S)
    assert (d.kind, d.component, d.task) == (SLOW_INSTANCE, "split", 2)
    assert d.evidence["slow_tasks"] == [2]


def test_data_skew_one_instance_executes_and_queues_far_more():
    m = measure(topo([bolt(bp=0.4, q=9 * MB, rate=400), bolt(q=MB // 2, rate=100), bolt(q=MB // 4, rate=110)],
                     [bolt()], throttled=0.4))
    [d] = diagnose(det.detect(m, S), m, S)
    assert (d.kind, d.component, d.task) == (DATA_SKEW, "split", 2)
    assert d.evidence["under_pressure"] is True


def test_data_skew_is_reported_without_backpressure_too():
    m = measure(topo([bolt(q=3 * MB, rate=400), bolt(q=MB // 4, rate=100)], [bolt()]))
    [d] = diagnose(det.detect(m, S), m, S)
    assert (d.kind, d.task, d.evidence["under_pressure"]) == (DATA_SKEW, 2, False)
    # rate skew alone, without pressure or queues: harmless, no diagnosis
    m2 = measure(topo([bolt(rate=400), bolt(rate=100)], [bolt()]))
    assert diagnose(det.detect(m2, S), m2, S) == []


def test_most_instances_backed_up_is_under_provisioning_not_a_slow_instance():
    m = measure(topo([bolt(bp=0.2, q=9 * MB), bolt(bp=0.2, q=8 * MB), bolt(bp=0.2, q=MB)], [bolt()],
                     throttled=0.6))
    [d] = diagnose(det.detect(m, S), m, S)
    assert d.kind == UNDER_PROVISIONED and QUEUE_SKEW in {x.kind for x in d.symptoms}


def test_the_worst_bottleneck_comes_first():
    m = measure(topo([bolt(bp=0.1), bolt(bp=0.1)], [bolt(bp=0.3), bolt(bp=0.3)], throttled=0.8))
    assert [d.component for d in diagnose(det.detect(m, S), m, S)] == ["count", "split"]


def test_over_provisioned_needs_sustained_rounds_and_calm():
    m = measure(topo([bolt(cpu=5), bolt(cpu=5), bolt(cpu=5)], [bolt(cpu=60)]))
    symptoms = det.detect(m, S)
    assert diagnose(symptoms, m, S, {"split": 2}) == []
    [d] = diagnose(symptoms, m, S, {"split": 3})
    assert (d.kind, d.component, d.evidence["windows"]) == (OVER_PROVISIONED, "split", 3)
    # not while spouts are throttled (the cause is elsewhere, and scaling down cannot help)
    m2 = measure(topo([bolt(cpu=5), bolt(cpu=5), bolt(cpu=5)], [{"kind": "bolt", "cpu_percent": 90.0}],
                      throttled=0.3))
    assert all(d.kind != OVER_PROVISIONED for d in diagnose(det.detect(m2, S), m2, S, {"split": 9}))


def test_no_data_skew_where_every_input_is_round_robin():
    """A shuffle-fed bolt cannot get more data on one instance: a slow instance that
    catches up on its backlog executes the most for a while, and is still slow."""
    m = measure(topo([bolt(bp=0.4, q=9 * MB, rate=400), bolt(q=MB // 2, rate=100), bolt(q=MB // 4, rate=110)],
                     [bolt()], throttled=0.4))
    [d] = diagnose(det.detect(m, S), m, S, even={"split"})
    assert (d.kind, d.component, d.task) == (SLOW_INSTANCE, "split", 2)
    # no pressure: a catching-up instance alone is nothing to diagnose
    m2 = measure(topo([bolt(q=3 * MB, rate=400), bolt(q=MB // 4, rate=100)], [bolt()]))
    assert diagnose(det.detect(m2, S), m2, S, even={"split"}) == []


def test_evenly_fed_bolts_are_those_with_only_round_robin_inputs():
    from streammgr.health.ds2 import Graph
    g = Graph.of(("spout", "split"), ("split", "count", "fields"), ("spout", "mixed"), ("split", "mixed", "fields"),
                 ("count", "sink", "none"))
    assert g.evenly_fed() == {"split", "sink"}
