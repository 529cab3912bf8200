"""Metrics as the topology master keeps them (pure logic: no I/O, time passed in).

Instances report cumulative *counters* (names ending in ``-count`` or ``-ms``)
and *gauges* (anything else: pending trees, CPU, RSS, latency percentiles). A
restarted instance (a new pid) starts its counters from zero again, so the store
folds the last values of the previous incarnation into a per-task base: totals
never go backwards. Each update is also kept in a bounded per-task history, from
which rates and latencies over a window (last interval, 1 min, 10 min, since
start) are derived.

Event time (DESIGN.md §5b) adds gauges that are not amounts: a watermark is a point
in time (epoch seconds), so a task without one reports it absent or None, and the
views keep None: a 0 would read as 1970, and summing or averaging timestamps means
nothing. A component's watermark is the *minimum* over its tasks that have one (how
far all of it has got, as a downstream task would see it), its lag the *maximum*
(its slowest task). ``inf`` (a bounded source finished: the end of time) survives
the views. ``-inf`` as a watermark (not started yet, as instances hold it inside)
becomes None; as a lag (now − the end of time) it becomes 0: a task past the end of
its input is behind by nothing.
"""
from __future__ import annotations

import math
from collections import deque

WINDOWS = {"interval": 0.0, "1m": 60.0, "10m": 600.0, "all": float("inf")}
HISTORY_SECS = 660.0
HISTORY_MAX = 2000
# Reports closer together than this replace the newest history point instead of adding
# one: an instance (or a forged stream of reports) cannot grow the history faster.
HISTORY_MIN_GAP_SECS = 0.5

# counter name -> rate name in window views
RATES = {"__emit-count": "emit_rate", "__transfer-count": "transfer_rate",
         "__execute-count": "execute_rate", "__ack-count": "ack_rate", "__fail-count": "fail_rate",
         "__timeout-count": "timeout_rate"}
TOTALS = {"__emit-count": "emitted", "__transfer-count": "transferred", "__execute-count": "executed",
          "__ack-count": "acked", "__fail-count": "failed", "__timeout-count": "timed_out",
          "__error-count": "errors", "__time-in-backpressure-ms": "backpressure_ms"}
LATENCIES = {"__execute-latency": "execute_latency", "__process-latency": "process_latency",
             "__complete-latency": "complete_latency"}
GAUGES = {"__pending": "pending", "__cpu-percent": "cpu_percent", "__rss-bytes": "rss_bytes",
          "__threads": "threads", "__exhausted": "exhausted", "__in-flight": "in_flight"}
# event time: counters (0 when never reported, like the totals above) and their rates
EVENT_TOTALS = {"__late-count": "late", "__too-late-count": "too_late",
                "__bad-timestamp-count": "bad_timestamps", "__windows-fired-count": "windows_fired",
                "__timers-fired-count": "timers_fired"}
EVENT_RATES = {"__late-count": "late_rate", "__too-late-count": "too_late_rate"}
# event time: gauges that stay None when absent, and how a component folds its tasks' values
WATERMARKS = {"__input-watermark": "input_watermark", "__output-watermark": "output_watermark"}
EVENT_GAUGES = {**WATERMARKS, "__watermark-lag": "watermark_lag_secs", "__open-windows": "open_windows"}
EVENT_FOLD = {"input_watermark": min, "output_watermark": min, "watermark_lag_secs": max,
              "open_windows": lambda a, b: a + b}


def is_counter(name):
    return name.endswith(("-count", "-ms"))


def event_gauge(name, v):
    """The value of event-time gauge ``name`` (a view key) as a view holds it: a float,
    ``inf``, or None for absent, not a number, NaN, or a watermark at ``-inf``."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
        return None
    if v == -math.inf:
        return 0.0 if name == "watermark_lag_secs" else None
    return v if isinstance(v, int) else float(v)


def _fold(fold, a, b):
    """``fold(a, b)`` where None means "this task has none" (not zero)."""
    return b if a is None else a if b is None else fold(a, b)


class MetricsStore:
    def __init__(self, task_component, started=0.0):
        self.task_component = dict(task_component)
        self.started = started
        self.latest = {}  # task -> {name: value} as last reported
        self.base = {}  # task -> {name: value} carried over from earlier incarnations
        self.pid = {}  # task -> pid of the incarnation that reported last
        self.seq = {}  # task -> last report sequence number
        self.history = {}  # task -> deque[(time, folded metrics)]

    # -- input ----------------------------------------------------------------------------
    def update(self, task, metrics, seq=0, pid=None, now=None):
        prev = self.latest.get(task)
        if prev and pid is not None and self.pid.get(task) not in (None, pid):
            base = self.base.setdefault(task, {})
            for k, v in prev.items():
                if is_counter(k) and isinstance(v, (int, float)):
                    base[k] = base.get(k, 0) + v
        if pid is not None:
            self.pid[task] = pid
        self.latest[task] = dict(metrics)
        if seq == -1:  # final report of a stopping instance
            self.seq[task] = float("inf")
        elif seq is not None:
            self.seq[task] = max(self.seq.get(task, 0), seq)
        if now is not None:
            h = self.history.get(task)
            if h is None:
                self.history[task] = h = deque(maxlen=HISTORY_MAX)
            if h and now - h[-1][0] < HISTORY_MIN_GAP_SECS:
                h[-1] = (now, self.folded(task))
            else:
                h.append((now, self.folded(task)))
            while h and now - h[0][0] > HISTORY_SECS:
                h.popleft()

    def missing(self, seq):
        return {t for t in self.task_component if self.seq.get(t, 0) < seq}

    # -- totals ---------------------------------------------------------------------------
    def folded(self, task):
        cur = dict(self.latest.get(task, {}))
        for k, v in self.base.get(task, {}).items():
            cur[k] = cur.get(k, 0) + v
        return cur

    def task_totals(self):
        return {task: self.folded(task) for task in self.task_component}

    def component_totals(self):
        """Per component: counters and numeric gauges summed over its tasks."""
        comps = {}
        for task, m in self.task_totals().items():
            c = comps.setdefault(self.task_component[task], {"tasks": 0})
            c["tasks"] += 1
            for k, v in m.items():
                if k in EVENT_GAUGES:  # points in time fold as in component_views, never summed
                    name = EVENT_GAUGES[k]
                    c[k] = _fold(EVENT_FOLD[name], c.get(k), event_gauge(name, v))
                elif isinstance(v, (int, float)) and not isinstance(v, bool):
                    c[k] = c.get(k, 0) + v
        return comps

    # -- windows --------------------------------------------------------------------------
    def _pair(self, task, secs, now):
        """(old, new) history points spanning the window; None without two points."""
        h = self.history.get(task)
        if not h:
            return None
        new = h[-1]
        if secs == float("inf"):
            return ((self.started, {}), new) if self.started < new[0] else None
        if secs <= 0:  # the last interval
            return (h[-2], new) if len(h) >= 2 else None
        cutoff = now - secs
        old = None
        for point in h:
            if point[0] >= cutoff:
                old = point
                break
        if old is None or old is new:
            old = h[-2] if len(h) >= 2 else None
        return (old, new) if old is not None else None

    def task_view(self, task, window="1m", now=0.0):
        """Totals, rates and latencies of one task over a window."""
        secs = WINDOWS[window]
        cur = self.folded(task)
        view = {"component": self.task_component.get(task), "pid": self.pid.get(task)}
        for k, name in TOTALS.items():
            view[name] = cur.get(k, 0)
        for k, name in GAUGES.items():
            view[name] = cur.get(k, 0)
        for k, name in EVENT_TOTALS.items():
            view[name] = cur.get(k, 0)
        for k, name in EVENT_GAUGES.items():
            view[name] = event_gauge(name, cur.get(k))
        pair = self._pair(task, secs, now)
        span = (pair[1][0] - pair[0][0]) if pair else 0.0
        delta = {}
        if pair and span > 0:
            old, new = pair[0][1], pair[1][1]
            for k in set(new) | set(old):
                if is_counter(k):
                    delta[k] = max(0, new.get(k, 0) - old.get(k, 0))
        for k, name in list(RATES.items()) + list(EVENT_RATES.items()):
            view[name] = delta.get(k, 0) / span if span > 0 else 0.0
        for prefix, name in LATENCIES.items():
            n = delta.get(prefix + "-count", 0)
            view[name + "_ms"] = delta.get(prefix + "-sum-ms", 0) / n if n else 0.0
            view[name + "_count"] = n
            view[name + "_p50_ms"] = cur.get(prefix + "-p50", 0.0)
            view[name + "_p99_ms"] = cur.get(prefix + "-p99", 0.0)
        # Storm's capacity: the fraction of the window spent executing
        view["capacity"] = (delta.get("__execute-latency-sum-ms", 0) / (1000 * span)) if span > 0 else 0.0
        # (capped: the instance's clock and the master's differ a little)
        view["backpressure_fraction"] = (min(1.0, delta.get("__time-in-backpressure-ms", 0) / (1000 * span))
                                         if span > 0 else 0.0)
        view["window_secs"] = span
        view["user"] = cur.get("user", {}) if isinstance(cur.get("user"), dict) else {}
        return view

    def component_views(self, task_views):
        """Aggregate task views per component: sums for counts and rates, weighted
        means for latencies, the maximum for capacity and p99, sums for CPU and RSS;
        for event time, the minimum watermark and the maximum lag over the tasks that
        have one, the sum of open windows (each None when no task has one)."""
        comps = {}
        for task, v in sorted(task_views.items()):
            c = comps.get(v["component"])
            if c is None:
                c = comps[v["component"]] = {"tasks": 0, "user": {}, **dict.fromkeys(EVENT_FOLD)}
            c["tasks"] += 1
            for name in list(TOTALS.values()) + list(RATES.values()) + \
                    ["pending", "cpu_percent", "rss_bytes", "threads", "exhausted"] + \
                    list(EVENT_TOTALS.values()) + list(EVENT_RATES.values()):
                c[name] = c.get(name, 0) + v.get(name, 0)
            for name, fold in EVENT_FOLD.items():
                c[name] = _fold(fold, c[name], event_gauge(name, v.get(name)))
            for name in LATENCIES.values():
                n = v[name + "_count"]
                c[name + "_count"] = c.get(name + "_count", 0) + n
                c["_" + name + "_sum"] = c.get("_" + name + "_sum", 0.0) + v[name + "_ms"] * n
                c[name + "_p50_ms"] = max(c.get(name + "_p50_ms", 0.0), v[name + "_p50_ms"])
                c[name + "_p99_ms"] = max(c.get(name + "_p99_ms", 0.0), v[name + "_p99_ms"])
            c["capacity"] = max(c.get("capacity", 0.0), v["capacity"])
            c["backpressure_fraction"] = max(c.get("backpressure_fraction", 0.0), v["backpressure_fraction"])
            for k, val in v.get("user", {}).items():
                if isinstance(val, (int, float)) and not isinstance(val, bool):
                    c["user"][k] = c["user"].get(k, 0) + val
        for c in comps.values():
            for name in LATENCIES.values():
                total = c.pop("_" + name + "_sum")
                n = c[name + "_count"]
                c[name + "_ms"] = total / n if n else 0.0
        return comps
