"""The Prometheus export of the HTTP API (``GET /metrics``), pure given the documents.

:func:`prometheus_text` turns the rows of ``source.topologies()`` and each answering
topology's metrics document into the exposition (Prometheus text, or OpenMetrics when
the ``Accept`` header asks), from a registry made for the call: never prometheus_client's
global one, so nothing of one scrape outlives it. Per task: Storm's counters
(``__emit-count`` ...) as ``bittern_tuples_*_total``, the window's rates and latencies as
gauges, event time (watermarks, windows, late tuples) as points in time; per stream
manager its queue, backpressure and refusals; per topology its master's. README.md
("HTTP API") lists the families.

prometheus_client is optional (``pip install bittern[metrics]``): without it
``prometheus_client`` here is None and the API answers ``/metrics`` with 501 and
:data:`PROMETHEUS_MISSING`.
"""
from __future__ import annotations

import math

from .metrics_fmt import WATERMARK_KEYS, as_watermark

try:  # optional: pip install bittern[metrics]
    import prometheus_client
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
except ImportError:  # pragma: no cover - exercised by monkeypatching in the tests
    prometheus_client = None

PROMETHEUS_MISSING = ("the Prometheus export needs prometheus_client: "
                      "pip install bittern[metrics] (or pip install prometheus_client)")


class Unavailable(RuntimeError):
    """prometheus_client is not installed (the message says how to install it)."""


# task view key -> (family name, help, kind, scale); counters get "_total" from the client
TASK_METRICS = [
    ("emitted", "bittern_tuples_emitted", "Tuples emitted (__emit-count)", "counter", 1),
    ("transferred", "bittern_tuples_transferred", "Tuples transferred to other tasks (__transfer-count)",
     "counter", 1),
    ("executed", "bittern_tuples_executed", "Tuples executed (__execute-count)", "counter", 1),
    ("acked", "bittern_tuples_acked", "Tuples acked (__ack-count)", "counter", 1),
    ("failed", "bittern_tuples_failed", "Tuples failed (__fail-count)", "counter", 1),
    ("timed_out", "bittern_tuples_timed_out", "Tuple trees timed out (__timeout-count)", "counter", 1),
    ("errors", "bittern_errors", "Exceptions raised by the component's code (__error-count)", "counter", 1),
    ("backpressure_ms", "bittern_backpressure_seconds",
     "Seconds spent in backpressure (__time-in-backpressure-ms)", "counter", 0.001),
    ("emit_rate", "bittern_emit_rate", "Tuples emitted per second over the window", "gauge", 1),
    ("transfer_rate", "bittern_transfer_rate", "Tuples transferred per second over the window", "gauge", 1),
    ("execute_rate", "bittern_execute_rate", "Tuples executed per second over the window", "gauge", 1),
    ("ack_rate", "bittern_ack_rate", "Tuples acked per second over the window", "gauge", 1),
    ("fail_rate", "bittern_fail_rate", "Tuples failed per second over the window", "gauge", 1),
    ("execute_latency_ms", "bittern_execute_latency_ms", "Mean execute latency over the window (ms)",
     "gauge", 1),
    ("execute_latency_p99_ms", "bittern_execute_latency_p99_ms", "99th percentile execute latency (ms)",
     "gauge", 1),
    ("process_latency_ms", "bittern_process_latency_ms", "Mean process latency over the window (ms)",
     "gauge", 1),
    ("complete_latency_ms", "bittern_complete_latency_ms",
     "Mean complete latency of spout tuple trees over the window (ms)", "gauge", 1),
    ("complete_latency_p99_ms", "bittern_complete_latency_p99_ms",
     "99th percentile complete latency of spout tuple trees (ms)", "gauge", 1),
    ("capacity", "bittern_capacity", "Fraction of the window spent executing (Storm's capacity)", "gauge", 1),
    ("backpressure_fraction", "bittern_backpressure", "Fraction of the window spent in backpressure",
     "gauge", 1),
    ("pending", "bittern_pending", "Tuple trees pending (spouts)", "gauge", 1),
    ("cpu_percent", "bittern_process_cpu_percent", "CPU use of the task's process (percent of one core)",
     "gauge", 1),
    ("rss_bytes", "bittern_process_rss_bytes", "Resident memory of the task's process (bytes)", "gauge", 1),
    ("threads", "bittern_process_threads", "Threads of the task's process", "gauge", 1),
]
# event time (DESIGN.md §5b): gauges left out while a task has none (no watermark is
# not 1970) and kept at +Inf once a bounded stream ended; counters like the others
EVENT_TIME_METRICS = [
    ("input_watermark", "bittern_input_watermark_seconds",
     "Input watermark of the task: the minimum over its input channels (epoch seconds)", "gauge", 1),
    ("output_watermark", "bittern_output_watermark_seconds",
     "Watermark the task last sent downstream (epoch seconds)", "gauge", 1),
    ("watermark_lag_secs", "bittern_watermark_lag_seconds",
     "Wall clock minus the input watermark (bolts) or the output watermark (spouts), seconds",
     "gauge", 1),
    ("open_windows", "bittern_open_windows", "Windows held open by a windowed bolt", "gauge", 1),
    ("late", "bittern_tuples_late", "Late tuples within the allowed lateness that updated a fired window "
     "(__late-count)", "counter", 1),
    ("too_late", "bittern_tuples_too_late", "Tuples later than the allowed lateness, sent to the late "
     "stream or counted (__too-late-count)", "counter", 1),
    ("bad_timestamps", "bittern_tuples_bad_timestamp", "Tuples whose timestamp is not a number "
     "(__bad-timestamp-count)", "counter", 1),
]
TASK_LABELS = ["topology", "component", "task", "container"]
STMGR_METRICS = [
    ("queued_bytes", "bittern_stmgr_queued_bytes", "Bytes queued in the stream manager", "gauge", 1),
    ("backpressure", "bittern_stmgr_backpressure", "1 while the stream manager asserts backpressure",
     "gauge", 1),
    ("backpressure_secs", "bittern_stmgr_backpressure_seconds",
     "Seconds the stream manager has asserted backpressure", "counter", 1),
    ("dropped", "bittern_stmgr_dropped", "Messages the stream manager dropped (no route or a vanished peer)",
     "counter", 1),
    ("cpu_percent", "bittern_stmgr_process_cpu_percent", "CPU use of the stream manager (percent of one core)",
     "gauge", 1),
    ("rss_bytes", "bittern_stmgr_process_rss_bytes", "Resident memory of the stream manager (bytes)",
     "gauge", 1),
]
STMGR_LABELS = ["topology", "container"]
# the control ports' refusals (counters; a process that does not report them yet counts 0)
SECURITY_METRICS = [
    ("denied", "Connections the {who} refused: a handshake from no peer of the plan"),
    ("malformed", "Messages the {who} dropped unread: malformed, oversized or from an unknown sender"),
]


def _num(v):
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)) and math.isfinite(v):
        return float(v)
    return None


def _event_num(key, v):
    """An event-time value as a sample: infinities kept (+Inf is a legal sample: the
    end of a stream), JSON's ``"inf"`` read back, None (no sample) when absent."""
    if key in WATERMARK_KEYS:
        return as_watermark(v)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
        return None
    return float(v)


def metric_families(rows, docs, window):
    """Prometheus metric families from ``rows`` (``source.topologies()``) and
    ``docs`` (topology name -> its metrics document, or None when it did not
    answer). Pure: the collector calls it on every scrape."""
    if prometheus_client is None:
        raise Unavailable(PROMETHEUS_MISSING)
    fams = []
    info = GaugeMetricFamily("bittern_topology_info", "A topology known to the cluster (always 1)",
                             labels=["topology", "state", "reliability"])
    up = GaugeMetricFamily("bittern_topology_up",
                           "1 if the topology's master answered this scrape, else 0", labels=["topology"])
    uptime = GaugeMetricFamily("bittern_topology_uptime_seconds", "Seconds since the topology master started",
                               labels=["topology"])
    active = GaugeMetricFamily("bittern_topology_active", "1 if the spouts are active, 0 if paused",
                               labels=["topology"])
    bp = GaugeMetricFamily("bittern_topology_backpressure", "1 while any stream manager asserts backpressure",
                           labels=["topology"])
    fams += [info, up, uptime, active, bp]
    task_fams = []
    for key, name, doc, kind, scale in TASK_METRICS:
        cls = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
        task_fams.append((key, scale, cls(name, f"{doc}; window {window}" if kind == "gauge" else doc,
                                          labels=TASK_LABELS)))
    event_fams = []
    for key, name, doc, kind, scale in EVENT_TIME_METRICS:  # points in time: no window
        cls = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
        event_fams.append((key, scale, cls(name, doc, labels=TASK_LABELS)))
    user = GaugeMetricFamily("bittern_user_metric", "Metrics registered by components "
                             "(context.register_metric), value of the last interval",
                             labels=TASK_LABELS + ["metric", "key"])
    stmgr_fams = []
    for key, name, doc, kind, scale in STMGR_METRICS:
        cls = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
        stmgr_fams.append((key, scale, cls(name, doc, labels=STMGR_LABELS)))
    stmgr_sec = [(key, CounterMetricFamily(f"bittern_stmgr_{key}", doc.format(who="stream manager"),
                                           labels=STMGR_LABELS)) for key, doc in SECURITY_METRICS]
    tm_sec = [(key, CounterMetricFamily(f"bittern_tmaster_{key}", doc.format(who="topology master"),
                                        labels=["topology"])) for key, doc in SECURITY_METRICS]
    tm_cpu = GaugeMetricFamily("bittern_tmaster_process_cpu_percent", "CPU use of the topology master",
                               labels=["topology"])
    tm_rss = GaugeMetricFamily("bittern_tmaster_process_rss_bytes", "Resident memory of the topology master",
                               labels=["topology"])
    for row in rows:
        name = row["name"]
        info.add_metric([name, str(row.get("state")), str(row.get("reliability"))], 1)
        doc = docs.get(name)
        up.add_metric([name], 0 if doc is None else 1)
        if doc is None:
            continue
        for fam, key in ((uptime, "uptime_secs"), (active, "active"), (bp, "backpressure")):
            v = _num(doc.get(key))
            if v is not None:
                fam.add_metric([name], v)
        tm = doc.get("tmaster") or {}
        for fam, key in ((tm_cpu, "cpu_percent"), (tm_rss, "rss_bytes")):
            v = _num(tm.get(key))
            if v is not None:
                fam.add_metric([name], v)
        for key, fam in tm_sec:
            fam.add_metric([name], _num(tm.get(key)) or 0.0)
        for task, view in sorted((doc.get("tasks") or {}).items(), key=lambda kv: int(kv[0])):
            labels = [name, str(view.get("component")), str(task), str(view.get("container"))]
            for key, scale, fam in task_fams:
                v = _num(view.get(key))
                if v is not None:
                    fam.add_metric(labels, v * scale)
            for key, scale, fam in event_fams:
                v = _event_num(key, view.get(key))
                if v is not None:
                    fam.add_metric(labels, v * scale)
            for metric, val in sorted((view.get("user") or {}).items()):
                if isinstance(val, dict):
                    for k, x in sorted(val.items(), key=lambda kv: str(kv[0])):
                        if _num(x) is not None:
                            user.add_metric(labels + [str(metric), str(k)], _num(x))
                elif _num(val) is not None:
                    user.add_metric(labels + [str(metric), ""], _num(val))
        for c, s in sorted((doc.get("stmgrs") or {}).items()):
            for key, scale, fam in stmgr_fams:
                v = _num(s.get(key))
                if v is not None:
                    fam.add_metric([name, str(c)], v * scale)
            for key, fam in stmgr_sec:
                fam.add_metric([name, str(c)], _num((s or {}).get(key)) or 0.0)
    fams += [f for _, _, f in task_fams + event_fams] + [user] + [f for _, _, f in stmgr_fams]
    fams += [f for _, f in stmgr_sec] + [tm_cpu, tm_rss] + [f for _, f in tm_sec]
    return fams


class Collector:
    """A prometheus_client collector that reads the source on every scrape."""

    def __init__(self, read, window):
        self.read = read  # () -> (rows, docs)
        self.window = window

    def collect(self):
        rows, docs = self.read()
        return iter(metric_families(rows, docs, self.window))

    def describe(self):
        return []  # nothing to declare up front: families depend on what runs


class HttpCollector:
    """The serving HTTP server's refusals (bittern/httpsafe.py ``Refusals.snapshot()``)."""

    def __init__(self, snapshot):
        self.snapshot = snapshot

    def collect(self):
        refused = CounterMetricFamily("bittern_http_refused", "Requests the API server answered with a status "
                                      "of 400 or more, by status", labels=["status"])
        for status, n in self.snapshot["refused"].items():
            refused.add_metric([status], n)
        away = CounterMetricFamily("bittern_http_turned_away", "Connections the API server turned away "
                                   "(all its connection slots taken)")
        away.add_metric([], self.snapshot["turned_away"])
        return iter([refused, away])

    def describe(self):
        return []


def prometheus_text(rows, docs, window, accept=None, http=None):
    """``(content type, body)``: the exposition of ``rows``/``docs`` in the format
    the ``Accept`` header asks for (Prometheus text by default, OpenMetrics on
    request), from a registry made for the call (never prometheus_client's global one)."""
    if prometheus_client is None:
        raise Unavailable(PROMETHEUS_MISSING)
    from prometheus_client.exposition import choose_encoder
    registry = prometheus_client.CollectorRegistry(auto_describe=False)
    registry.register(Collector(lambda: (rows, docs), window))
    if http is not None:
        registry.register(HttpCollector(http))
    encoder, content_type = choose_encoder(accept or "")
    return content_type, encoder(registry)
