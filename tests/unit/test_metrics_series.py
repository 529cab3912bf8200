"""The topology master's throughput samples turned into the charts' series
(streammgr/tmmetrics.py): exact rates and latency means per point, per component."""
from streammgr.metrics import MetricsStore
from streammgr.tmmetrics import (SAMPLE_KEYS, SERIES_MAX_POINTS, component_series, point_of, points_of, sample_of,
                                 sample_period, series_points, throughput_series)

KINDS = {"src": "spout", "work": "bolt", "sink": "bolt"}


def totals(emit, execute, xsum, xn, csum, cn):
    return dict(zip(SAMPLE_KEYS, (emit, execute, xsum, xn, csum, cn)))


def test_ten_minutes_of_samples_whatever_the_interval():
    assert sample_period(2.0) == 2.0 and series_points(2.0) == 301
    assert sample_period(10) == 10.0 and series_points(10.0) == 61
    # a short interval is sampled once a second at most: the bound holds 10 minutes
    assert sample_period(0.2) == 1.0 and series_points(1.0) == SERIES_MAX_POINTS == 601
    # an interval of 0, missing or not a number: the default 2 s
    assert sample_period(0) == sample_period(None) == sample_period("x") == sample_period(float("nan")) == 2.0
    assert series_points(7.0) == 87  # ceil(600 / 7) + 1
    assert series_points(10_000.0) == 2


def test_sample_of_component_totals():
    store = MetricsStore({1: "src", 2: "work", 3: "work"})
    store.update(1, {"__emit-count": 10, "__complete-latency-sum-ms": 50.0, "__complete-latency-count": 5})
    store.update(2, {"__emit-count": 4, "__execute-count": 6, "__execute-latency-sum-ms": 3.0,
                     "__execute-latency-count": 6})
    store.update(3, {"__execute-count": 2, "__execute-latency-sum-ms": 1.0, "__execute-latency-count": 2,
                     "__input-watermark": None})
    t, comps = sample_of(7.0, store.component_totals())
    assert t == 7.0
    assert comps == {"src": (10, 0, 0, 0, 50.0, 5), "work": (4, 8, 4.0, 8, 0, 0)}


def samples():
    return [(100.0, {"src": (0, 0, 0, 0, 0, 0), "work": (0, 0, 0, 0, 0, 0), "sink": (0, 0, 0, 0, 0, 0)}),
            (102.0, {"src": (200, 0, 0, 0, 300.0, 100), "work": (150, 180, 90.0, 180, 0, 0),
                     "sink": (0, 100, 10.0, 100, 0, 0)}),
            (104.0, {"src": (400, 0, 0, 0, 300.0, 100), "work": (350, 380, 290.0, 380, 0, 0),
                     "sink": (0, 300, 10.0, 300, 0, 0)})]


def test_throughput_series_rates_and_latency_means():
    got = throughput_series(points_of(samples(), KINDS), now=105.0)
    assert got == [
        {"ago_secs": 3.0, "emit_rate": 100.0, "execute_rate": 140.0,
         "execute_latency_ms": 0.357, "complete_latency_ms": 3.0},  # (90+10)/(180+100); 300/100
        {"ago_secs": 1.0, "emit_rate": 100.0, "execute_rate": 200.0,
         "execute_latency_ms": 0.5, "complete_latency_ms": None}]  # (200+0)/(200+200); no acks


def test_component_series_columns_per_kind():
    got = component_series(points_of(samples(), KINDS), KINDS, now=105.0)
    assert got["src"] == {"ago_secs": [3.0, 1.0], "emit_rate": [100.0, 100.0], "complete_latency_ms": [3.0, None]}
    assert got["work"] == {"ago_secs": [3.0, 1.0], "emit_rate": [75.0, 100.0], "execute_rate": [90.0, 100.0],
                           "execute_latency_ms": [0.5, 1.0]}
    assert got["sink"]["execute_rate"] == [50.0, 100.0] and got["sink"]["execute_latency_ms"] == [0.1, 0.0]


def test_counters_that_go_back_gaps_and_missing_components():
    s = [(0.0, {"src": (100, 0, 0, 0, 0, 0)}),
         (2.0, {"src": (40, 0, 0, 0, 0, 0), "work": (0, 10, 1.0, 10, 0, 0)}),  # reset; work appears
         (2.0, {"src": (50, 0, 0, 0, 0, 0), "work": (0, 20, 2.0, 20, 0, 0)}),  # same time: skipped
         (4.0, {"src": (60, 0, 0, 0, 0, 0), "work": (0, 30, 3.0, 30, 0, 0)})]
    kinds = {"src": "spout", "work": "bolt"}
    tp = throughput_series(points_of(s, kinds), now=4.0)
    assert [(p["ago_secs"], p["emit_rate"], p["execute_rate"], p["execute_latency_ms"]) for p in tp] == \
        [(2.0, 0.0, 0.0, None), (0.0, 5.0, 5.0, 0.1)]
    cs = component_series(points_of(s, kinds), kinds, now=4.0)
    assert cs["work"] == {"ago_secs": [2.0, 0.0], "emit_rate": [None, 0.0], "execute_rate": [None, 5.0],
                          "execute_latency_ms": [None, 0.1]}
    assert point_of(s[1], s[2], kinds) is None and points_of(s[:1], kinds) == []
    assert throughput_series([], 4.0) == [] and component_series([], kinds, 4.0) == \
        {"src": {"ago_secs": [], "emit_rate": [], "complete_latency_ms": []},
         "work": {"ago_secs": [], "emit_rate": [], "execute_rate": [], "execute_latency_ms": []}}


def test_ten_minutes_of_points_stay_small():
    """300 points of a 4-component topology: the series add some tens of kB to a document."""
    import json
    kinds = {"a": "spout", "b": "bolt", "c": "bolt", "d": "bolt"}
    s = [(2.0 * i, {c: (1234567 * i, 7654321 * i, 1000.123 * i, 99999 * i, 5555.5 * i, 3333 * i) for c in kinds})
         for i in range(series_points(2.0))]
    pts = points_of(s, kinds)
    tp, cs = throughput_series(pts, 600.0), component_series(pts, kinds, 600.0)
    assert len(tp) == 300 and all(len(v) == 300 for c in cs.values() for v in c.values())
    assert len(json.dumps(tp)) + len(json.dumps(cs)) < 120_000


def test_master_samples_keep_the_newest_points_only():
    """The topology master's sampling (TmMetrics.sample_throughput): one point per sample
    after the first, computed then, the oldest dropped past the bound."""
    from collections import deque

    from streammgr.tmmetrics import TmMetrics

    class Master(TmMetrics):
        def __init__(self):
            self.metrics = MetricsStore({1: "src", 2: "work"})
            self.kinds = {"src": "spout", "work": "bolt"}
            self.last_sample, self.throughput_points = None, deque(maxlen=3)

    m = Master()
    for i in range(6):
        m.metrics.update(1, {"__emit-count": 10 * i})
        m.metrics.update(2, {"__execute-count": 20 * i, "__execute-latency-sum-ms": 2.0 * i,
                             "__execute-latency-count": 20 * i})
        m.sample_throughput(2.0 * i)
    assert [p[0] for p in m.throughput_points] == [6.0, 8.0, 10.0]
    assert throughput_series(m.throughput_points, now=11.0)[-1] == {
        "ago_secs": 1.0, "emit_rate": 5.0, "execute_rate": 10.0, "execute_latency_ms": 0.1,
        "complete_latency_ms": None}
    assert component_series(m.throughput_points, m.kinds, 11.0)["work"]["execute_rate"] == [10.0, 10.0, 10.0]
