"""Event-time metrics through the topology master's MetricsStore (task views and their
aggregation per component: minimum watermark, maximum lag, None kept apart from 0,
inf surviving) and out through the machine-facing formats: the JSON convention of the
HTTP API and ``bittern metrics --json``, and the Prometheus exposition."""
from __future__ import annotations

import io
import json
import math
from contextlib import redirect_stdout
from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bittern.cli.metrics import show_metrics
from bittern.httpapi import dump_json, finite
from bittern.promexport import prometheus_text
from bittern.metrics_fmt import as_watermark, json_safe
from streammgr.metrics import MetricsStore, event_gauge

from .event_docs import INF, T0, doc, remote_doc, store

ROWS = [{"name": "ev", "state": "RUNNING", "reliability": "ATLEAST_ONCE"}]


# -- the store ----------------------------------------------------------------------------
def test_task_view_keeps_a_missing_watermark_none_not_1970():
    s = store()
    sink = s.task_view(6, now=12.0)
    for k in ("input_watermark", "output_watermark", "watermark_lag_secs", "open_windows"):
        assert sink[k] is None, k
    for k in ("late", "too_late", "bad_timestamps", "windows_fired", "timers_fired", "late_rate",
              "too_late_rate"):
        assert sink[k] == 0, k
    waiting = s.task_view(5, now=12.0)  # reported None: no watermark yet
    assert waiting["input_watermark"] is None and waiting["open_windows"] == 0


def test_task_view_values_totals_and_rates():
    s = store()
    v = s.task_view(4, now=12.0)
    assert v["input_watermark"] == T0 + 4.75 and v["output_watermark"] == T0
    assert v["watermark_lag_secs"] == 8.0 and v["open_windows"] == 3
    assert (v["late"], v["too_late"], v["windows_fired"], v["timers_fired"]) == (4, 8, 12, 14)
    assert v["late_rate"] == pytest.approx(1.0) and v["too_late_rate"] == pytest.approx(2.0)
    assert s.task_view(2, now=12.0)["output_watermark"] == INF  # the finished source: inf survives


def test_component_views_min_watermark_max_lag_sums():
    comps = doc()["components"]
    events, window, sink = comps["events"], comps["window"], comps["sink"]
    assert events["output_watermark"] == T0  # min(T0, inf): the finished task does not hide the other
    assert events["input_watermark"] is None  # no task has one
    assert events["watermark_lag_secs"] == 2.5 and events["open_windows"] is None
    assert events["bad_timestamps"] == 2
    assert window["input_watermark"] == T0 + 4.75  # task 5 has none yet: the minimum of the others
    assert window["output_watermark"] == T0
    assert window["watermark_lag_secs"] == 8.0
    assert window["open_windows"] == 5
    assert (window["late"], window["too_late"], window["windows_fired"], window["timers_fired"]) == (6, 8, 20, 22)
    assert window["late_rate"] == pytest.approx(1.5) and window["too_late_rate"] == pytest.approx(2.0)
    for k in ("input_watermark", "output_watermark", "watermark_lag_secs", "open_windows"):
        assert sink[k] is None, k
    assert sink["late"] == 0
    # the other fields are aggregated as before
    assert window["executed"] == 2 * 50 * (3 + 4 + 5) and window["tasks"] == 3


def test_component_of_finished_sources_is_at_the_end():
    s = MetricsStore({1: "src", 2: "src"})
    for t in (1, 2):
        s.update(t, {"__output-watermark": INF, "__watermark-lag": -INF}, pid=t, now=1.0)
    views = {t: s.task_view(t, now=1.0) for t in (1, 2)}
    comp = s.component_views(views)["src"]
    assert comp["output_watermark"] == INF
    assert comp["watermark_lag_secs"] == 0.0  # now - inf: behind by nothing


def test_garbage_and_minus_inf_are_no_watermark():
    assert event_gauge("input_watermark", -INF) is None  # how instances hold "not started"
    assert event_gauge("input_watermark", float("nan")) is None
    assert event_gauge("input_watermark", True) is None
    assert event_gauge("input_watermark", "soon") is None
    assert event_gauge("input_watermark", INF) == INF
    assert event_gauge("watermark_lag_secs", -INF) == 0.0
    assert event_gauge("watermark_lag_secs", -1.5) == -1.5  # a watermark ahead of the clock is shown as is
    assert event_gauge("open_windows", 3) == 3 and isinstance(event_gauge("open_windows", 3), int)


def test_restart_folds_counters_but_not_watermarks():
    s = MetricsStore({1: "w"})
    s.update(1, {"__late-count": 5, "__input-watermark": T0}, pid=10, now=1.0)
    s.update(1, {"__late-count": 2, "__input-watermark": T0 + 1}, pid=11, now=2.0)  # a new incarnation
    v = s.task_view(1, now=2.0)
    assert v["late"] == 7 and v["input_watermark"] == T0 + 1
    totals = s.component_totals()["w"]
    assert totals["__late-count"] == 7 and totals["__input-watermark"] == T0 + 1


def test_component_totals_fold_watermarks_instead_of_summing_them():
    totals = store().component_totals()
    assert totals["window"]["__input-watermark"] == T0 + 4.75
    assert totals["window"]["__watermark-lag"] == 8.0
    assert totals["events"]["__output-watermark"] == T0
    assert totals["window"]["__late-count"] == 6


# -- JSON ---------------------------------------------------------------------------------
def test_json_convention_inf_watermark_is_the_string_inf():
    body = dump_json(doc())
    back = json.loads(body)  # strict JSON: dump_json refuses NaN/Infinity
    assert back["tasks"]["2"]["output_watermark"] == "inf"
    assert back["tasks"]["6"]["input_watermark"] is None
    assert back["components"]["window"]["input_watermark"] == T0 + 4.75
    assert as_watermark(back["tasks"]["2"]["output_watermark"]) == INF
    assert as_watermark(None) is None and as_watermark(-INF) is None


def test_json_convention_other_infinities_are_null():
    got = finite({"window_secs": INF, "x": float("nan"), "output_watermark": float("nan"),
                  "input_watermark": -INF, "l": [INF], "output_watermark_not": INF})
    assert got == {"window_secs": None, "x": None, "output_watermark": None, "input_watermark": None,
                   "l": [None], "output_watermark_not": None}
    assert json_safe({"tasks": {"1": {"input_watermark": INF}}}) == {"tasks": {"1": {"input_watermark": "inf"}}}


def test_metrics_cli_json_is_strict_json():
    class Src:
        def metrics(self, name, window):
            return doc()

        def close(self):
            pass
    out = io.StringIO()
    with redirect_stdout(out):
        assert show_metrics(SimpleNamespace(name="ev", window="1m", json=True), Src()) == 0
    text = out.getvalue()
    assert "Infinity" not in text and "NaN" not in text
    back = json.loads(text)
    assert back["tasks"]["2"]["output_watermark"] == "inf"
    assert back["components"]["window"]["late"] == 6


# -- Prometheus ---------------------------------------------------------------------------
def samples(d):
    _, body = prometheus_text(ROWS, {"ev": d}, "1m")
    out = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            out[(s.name, s.labels.get("task"))] = s.value
    return out, body.decode()


@pytest.mark.parametrize("make", [doc, remote_doc], ids=["master", "json"])
def test_prometheus_event_time(make):
    got, text = samples(make())
    assert got[("bittern_input_watermark_seconds", "3")] == T0 + 10
    assert got[("bittern_input_watermark_seconds", "4")] == T0 + 4.75
    assert ("bittern_input_watermark_seconds", "5") not in got  # none yet: no sample, not 0
    assert ("bittern_input_watermark_seconds", "6") not in got
    assert ("bittern_input_watermark_seconds", "1") not in got  # spouts have no input
    assert got[("bittern_output_watermark_seconds", "1")] == T0
    assert got[("bittern_output_watermark_seconds", "2")] == math.inf
    assert 'bittern_output_watermark_seconds{component="events",container="0",task="2",topology="ev"} +Inf' \
        in text
    assert got[("bittern_watermark_lag_seconds", "4")] == 8.0
    assert ("bittern_watermark_lag_seconds", "2") not in got
    assert got[("bittern_open_windows", "4")] == 3.0 and ("bittern_open_windows", "6") not in got
    assert got[("bittern_tuples_late_total", "4")] == 4.0
    assert got[("bittern_tuples_too_late_total", "4")] == 8.0
    assert got[("bittern_tuples_bad_timestamp_total", "1")] == 2.0
    assert "# TYPE bittern_tuples_late_total counter" in text
    assert "# TYPE bittern_watermark_lag_seconds gauge" in text


def test_prometheus_without_event_time_has_no_watermark_samples():
    got, _ = samples(doc(event_time=False))
    assert not [k for k in got if "watermark" in k[0] or k[0] == "bittern_open_windows"]
    assert got[("bittern_tuples_late_total", "3")] == 0.0  # counters start at 0, as the others do


def test_a_flood_of_reports_does_not_grow_the_history():
    """Reports closer than HISTORY_MIN_GAP_SECS replace the newest point (a forged flood of
    METRICS for a task cannot fill the topology master's memory), and the rates stay right."""
    from streammgr.metrics import HISTORY_MIN_GAP_SECS, MetricsStore
    store = MetricsStore({1: "count"}, started=0.0)
    for i in range(10_000):  # 10 s of reports, one a millisecond
        store.update(1, {"__execute-count": i}, seq=i, now=i / 1000)
    assert len(store.history[1]) <= 10 / HISTORY_MIN_GAP_SECS + 1
    assert store.history[1][-1] == (9.999, {"__execute-count": 9999})
