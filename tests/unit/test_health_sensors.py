"""Health manager sensors: measurements of one metrics document, missing data tolerated."""
from __future__ import annotations

import json

import pytest

from bittern.errors import ConfigError
from streammgr.health import Settings, measure

from .health_docs import bolt, doc, spout, topo


def test_per_instance_and_component_measurements():
    m = measure(topo([bolt(bp=0.3, q=5e6, rate=100, cpu=80), bolt(bp=0.2, q=4e6, rate=120, cpu=60)],
                     [bolt(rate=220, cpu=10)], throttled=0.45))
    assert set(m.components) == {"spout", "split", "count"}
    split = m.components["split"]
    assert (split.kind, split.parallelism, split.tasks) == ("bolt", 2, [2, 3])
    assert split.backpressure == pytest.approx(0.5)  # Heron: summed over the instances
    assert split.backpressure_max == pytest.approx(0.3)
    assert split.queue_bytes_max == 5e6 and split.queue_bytes_total == 9e6
    assert split.execute_rate == 220
    assert split.utilization == pytest.approx(0.7)
    assert m.instances[2].cpu_percent == 80 and m.instances[2].queue_bytes == 5e6
    assert m.throttled == pytest.approx(0.45)
    assert m.window_secs == 60.0


def test_a_spouts_backpressure_is_being_throttled_not_causing_it():
    m = measure(doc({"spout": [spout(throttled=0.8)], "b": [bolt()]}))
    assert m.instances[1].backpressure is None
    assert m.instances[1].throttled == pytest.approx(0.8)
    assert m.instances[1].execute_rate is None  # spouts do not execute
    assert m.components["spout"].backpressure is None
    assert m.bolts() == [m.components["b"]]


def test_a_bolts_backpressure_fraction_is_not_read_as_the_backpressure_it_caused():
    # bolts are never paused in Bittern; only the explicit initiated field counts
    d = doc({"b": [{"kind": "bolt", "backpressure_fraction": 0.9, "execute_rate": 5.0}]})
    m = measure(d)
    assert m.instances[1].backpressure is None
    assert "backpressure" in m.missing


def test_component_backpressure_is_clamped_below_one():
    m = measure(doc({"b": [bolt(bp=0.8), bolt(bp=0.9)]}))
    assert m.components["b"].backpressure == pytest.approx(0.999)


def test_queue_growth_against_the_previous_document():
    prev = doc({"b": [bolt(q=1000), bolt(q=5000)]}, uptime=100.0)
    cur = doc({"b": [bolt(q=61000), bolt(q=5000)]}, uptime=160.0)
    m = measure(cur, prev)
    assert m.instances[1].queue_growth == pytest.approx(1000.0)
    assert m.instances[2].queue_growth == 0.0
    assert "growth" not in m.missing
    assert measure(cur).instances[1].queue_growth is None
    assert "previous round" in measure(cur).missing["growth"]


def test_growth_uses_elapsed_when_the_documents_have_no_uptime():
    prev, cur = doc({"b": [bolt(q=0)]}), doc({"b": [bolt(q=3000)]})
    del prev["uptime_secs"], cur["uptime_secs"]
    assert measure(cur, prev, elapsed=30.0).instances[1].queue_growth == pytest.approx(100.0)
    assert measure(cur, prev).instances[1].queue_growth is None


def test_per_task_values_from_the_stream_managers():
    def d(secs, queued, uptime):
        x = doc({"b": [{"kind": "bolt", "execute_rate": 10.0}, {"kind": "bolt", "execute_rate": 10.0}]},
                uptime=uptime)
        x["stmgrs"]["0"].update(backpressure_secs_by_task={"1": secs, "2": 0.0}, queued_by_task=queued,
                                backpressure_secs=secs)
        return x
    prev, cur = d(10.0, {"1": 100}, 100.0), d(40.0, {"1": 9e6, "2": 10}, 160.0)
    m = measure(cur, prev)
    assert m.instances[1].backpressure == pytest.approx(0.5)
    assert m.instances[2].backpressure == 0.0
    assert m.instances[1].queue_bytes == 9e6 and m.instances[2].queue_bytes == 10
    assert m.instances[1].queue_growth == pytest.approx((9e6 - 100) / 60)
    assert m.stmgr_backpressure["0"] == pytest.approx(0.5)
    # without the previous document the cumulative seconds cannot be a fraction
    assert measure(cur).instances[1].backpressure is None


def test_capacity_counts_only_with_execute_latencies():
    m = measure(doc({"b": [bolt(cpu=5.0, capacity=0.9), bolt(cpu=5.0)]}))
    assert m.instances[1].capacity == pytest.approx(0.9)
    assert m.instances[1].utilization == pytest.approx(0.9)  # busy executing though light on CPU
    assert m.instances[2].capacity is None
    assert m.instances[2].utilization == pytest.approx(0.05)


def test_no_window_yet_means_no_rates_and_no_utilization():
    m = measure(doc({"b": [bolt(rate=50, cpu=0.0), bolt(rate=50, cpu=0.0)]}, window=0.0))
    assert m.instances[1].execute_rate is None and m.instances[1].utilization is None
    assert m.components["b"].utilization is None
    assert {"execute_rate", "utilization"} <= set(m.missing)


@pytest.mark.parametrize("bad", [
    None, {}, [], "x", {"tasks": None, "components": None, "stmgrs": None},
    {"tasks": {"1": None, "x": {"component": "a"}, "2": {"component": 5}, "3": {}}},
    {"tasks": {"1": {"component": "a", "execute_rate": "fast", "cpu_percent": float("nan"),
                     "queued_bytes": True, "backpressure_initiated_fraction": None}},
     "components": {"a": "not a dict"}, "stmgrs": {"0": None}},
])
def test_missing_or_garbage_fields_never_crash(bad):
    m = measure(bad, prev=bad, elapsed=10.0)
    for i in m.instances.values():
        assert i.execute_rate is None and i.queue_bytes is None and i.backpressure is None
    assert m.missing
    json.dumps({k: v for k, v in m.missing.items()})


def test_a_sensor_without_data_says_so():
    m = measure(doc({"b": [{"kind": "bolt", "execute_rate": 10.0, "cpu_percent": 20.0}]}))
    assert m.instances[1].queue_bytes is None
    assert set(m.missing) == {"backpressure", "queue", "growth", "throttled"}
    assert "queued_bytes" in m.missing["queue"]


def test_settings_from_config_and_validation():
    s = Settings.from_config({"topology.healthmgr.skew.ratio": 2, "topology.healthmgr.max.parallelism": 8})
    assert (s.skew_ratio, s.max_parallelism, s.enabled, s.post_action_wait_secs) == (2.0, 8, False, 60.0)
    assert Settings.from_config(None) == Settings()
    for key, val in [("topology.healthmgr.skew.ratio", 1.0), ("topology.healthmgr.backpressure.threshold", 1.5),
                     ("topology.healthmgr.low.utilization", 0.8),  # above target.utilization (0.7)
                     ("topology.healthmgr.target.utilization", 1.5), ("topology.healthmgr.target.utilization", 0),
                     ("topology.healthmgr.scale.down.windows", 0),
                     ("topology.healthmgr.sustained.windows", 0), ("topology.healthmgr.max.parallelism", 0)]:
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            Settings.from_config({key: val})
