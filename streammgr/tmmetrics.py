"""The topology master's metrics documents (mixed into :class:`streammgr.tmaster.TopologyMaster`):
``metrics_doc`` for the live view, the HTTP API and the health manager, ``metrics_reply``
for the CLI's report, and the throughput series (pure functions, below) and checkpoint
figures they carry."""
from __future__ import annotations

import math
import os
import time

# The throughput series span the last 10 minutes whatever the metrics interval: a sample
# every max(interval, 1 s), at most SERIES_MAX_POINTS - 1 points between them, each a few
# values per component (memory and documents stay small however many tasks there are).
SERIES_SECS = 600.0
SERIES_MAX_POINTS = 601
# per component: emits, executes, execute latency sum (ms) and count, complete latency sum and count
SAMPLE_KEYS = ("__emit-count", "__execute-count", "__execute-latency-sum-ms", "__execute-latency-count",
               "__complete-latency-sum-ms", "__complete-latency-count")


def sample_period(interval_secs):
    """Seconds between two throughput samples for a metrics interval of ``interval_secs``."""
    try:
        secs = float(interval_secs)
    except (TypeError, ValueError):
        secs = 0.0
    if not math.isfinite(secs) or secs <= 0:
        secs = 2.0
    return max(secs, SERIES_SECS / (SERIES_MAX_POINTS - 1))


def series_points(period_secs):
    """How many samples cover SERIES_SECS at one every ``period_secs`` (bounded)."""
    return max(2, min(SERIES_MAX_POINTS, int(math.ceil(SERIES_SECS / period_secs)) + 1))


def sample_of(now, component_totals):
    """One throughput sample: ``(now, {component: (SAMPLE_KEYS totals...)})`` from
    :meth:`MetricsStore.component_totals`."""
    return (now, {c: tuple(v.get(k, 0) or 0 for k in SAMPLE_KEYS) for c, v in component_totals.items()})


def _mean(total, n):
    return round(total / n, 3) if n else None


def point_of(older, newer, kinds):
    """The series' point between two consecutive samples, or None (no time between them):
    ``(time of the newer, topology values, {component: values})``. Topology values:
    ``emit_rate`` (spouts' emits/s), ``execute_rate`` (bolts' executes/s),
    ``execute_latency_ms`` (bolts' mean execute latency over the interval) and
    ``complete_latency_ms`` (spouts' mean complete latency), a latency None when nothing
    was measured. Per component: ``emit_rate``, and for a spout ``complete_latency_ms``,
    for a bolt ``execute_rate`` and ``execute_latency_ms``. Counters that went back count 0."""
    (t0, c0), (t1, c1) = older, newer
    dt = t1 - t0
    if dt <= 0:
        return None
    emit = execute = xsum = xn = csum = cn = 0
    comps = {}
    for comp, b in c1.items():
        a = c0.get(comp)
        if a is None:
            continue
        d = [max(0, y - x) for x, y in zip(a, b)]
        if kinds.get(comp) == "spout":
            emit, csum, cn = emit + d[0], csum + d[4], cn + d[5]
            comps[comp] = {"emit_rate": round(d[0] / dt, 3), "complete_latency_ms": _mean(d[4], d[5])}
        else:
            execute, xsum, xn = execute + d[1], xsum + d[2], xn + d[3]
            comps[comp] = {"emit_rate": round(d[0] / dt, 3), "execute_rate": round(d[1] / dt, 3),
                           "execute_latency_ms": _mean(d[2], d[3])}
    return (t1, {"emit_rate": round(emit / dt, 3), "execute_rate": round(execute / dt, 3),
                 "execute_latency_ms": _mean(xsum, xn), "complete_latency_ms": _mean(csum, cn)}, comps)


def points_of(samples, kinds):
    """:func:`point_of` over each pair of consecutive samples (oldest first)."""
    return [p for p in (point_of(a, b, kinds) for a, b in zip(samples, samples[1:])) if p is not None]


def throughput_series(points, now):
    """The topology's ``throughput`` (a metrics document's): per point, ``ago_secs`` (its
    age at ``now``) and its topology values."""
    return [{"ago_secs": round(now - t, 1), **topo} for t, topo, _ in points]


def component_series(points, kinds, now):
    """Per component, columns over the points: ``ago_secs`` and its values (None where the
    component was not there yet)."""
    cols = {c: ("emit_rate", "complete_latency_ms") if kind == "spout"
            else ("emit_rate", "execute_rate", "execute_latency_ms") for c, kind in kinds.items()}
    ago = [round(now - t, 1) for t, _, _ in points]
    out = {}
    for comp, names in cols.items():
        vals = [p[2].get(comp) or {} for p in points]
        out[comp] = {"ago_secs": ago, **{k: [v.get(k) for v in vals] for k in names}}
    return out


class TmMetrics:
    def metrics_doc(self, window="1m"):
        """The topology's metrics over ``window``: per component, per task, per stream
        manager, and the recent throughput (for the live view and the HTTP API): the
        topology's ``throughput`` points and each component view's ``series`` (columns)
        over the last 10 minutes."""
        now = time.monotonic()
        packing = self.plan.packing
        tasks = {}
        for t in sorted(self.all_tasks):
            v = self.metrics.task_view(t, window, now)
            v["container"] = packing.task_container[t]
            v["index"] = packing.task_index[t]
            # what its stream manager measures of it: bytes queued toward it, seconds its
            # queue held the stream manager in backpressure (cumulative; the health manager's)
            by = self.stmgrs.get(v["container"]) or {}
            v["queued_bytes"] = (by.get("queued_by_task") or {}).get(str(t))
            v["backpressure_initiated_secs"] = (by.get("backpressure_secs_by_task") or {}).get(str(t))
            tasks[t] = v
        comps = self.metrics.component_views(tasks)
        for name, c in comps.items():
            c["kind"] = self.kinds.get(name)
        stmgrs = {}
        for c in sorted(self.containers):
            s = self.stmgrs.get(c) or {}
            proc, counters = s.get("proc") or {}, s.get("counters") or {}
            stmgrs[str(c)] = {"alive": c in self.stmgrs, "pid": s.get("pid"),
                              "backpressure": bool(s.get("backpressure")),
                              "backpressure_secs": s.get("backpressure_secs") or 0.0,
                              "queued_bytes": s.get("queued") or 0,
                              "queued_by_task": s.get("queued_by_task") or {},
                              "backpressure_secs_by_task": s.get("backpressure_secs_by_task") or {},
                              "dropped": counters.get("dropped", 0),
                              # what it refused at its tcp port: handshakes (denied), messages (malformed)
                              "malformed": counters.get("malformed", 0), "denied": counters.get("denied", 0),
                              "cpu_percent": proc.get("__cpu-percent", 0.0),
                              "rss_bytes": proc.get("__rss-bytes", 0)}
        points = list(self.throughput_points)
        series = throughput_series(points, now)
        for name, s in component_series(points, self.kinds, now).items():
            if name in comps:
                comps[name]["series"] = s
        mine = self.procstats.read()
        return {"topology": self.name, "phase": self.phase, "active": self.active, "window": window,
                "health": self.health_doc,
                "reliability": self.plan.config["topology.reliability.mode"],
                "containers": len(self.containers), "uptime_secs": now - self.started,
                "started_at": self.started_wall,
                "backpressure": any(s["backpressure"] for s in stmgrs.values()),
                "components": comps, "tasks": {str(t): v for t, v in tasks.items()}, "stmgrs": stmgrs,
                "tmaster": {"pid": os.getpid(), "cpu_percent": mine["__cpu-percent"],
                            "rss_bytes": mine["__rss-bytes"], "malformed": self.counters["malformed"],
                            "denied": self.counters["denied"]},
                "throughput": series, "errors": len(self.errors),
                **({"checkpoints": self.checkpoint_report()} if self.ckpt is not None else {}),
                **({"healthmgr": self.health.describe()} if self.health is not None else {})}

    def sample_throughput(self, now):
        """A sample of the components' totals, and the series' point since the last one
        (computed once here, not at every metrics document)."""
        sample = sample_of(now, self.metrics.component_totals())
        if self.last_sample is not None:
            point = point_of(self.last_sample, sample, self.kinds)
            if point is not None:
                self.throughput_points.append(point)
        self.last_sample = sample

    def checkpoint_report(self):
        """The coordinator's metrics, plus what a bounded run waits for: ``committed``,
        the newest checkpoint whose output every sink task made visible (the last complete
        one when there is no sink), and who holds up the one in flight."""
        m = self.ckpt.metrics()
        if self.sinks:
            m["committed"] = min(self.sink_commits.get(t, 0) for t in self.sinks) or None
            m["uncommitted_sinks"] = sorted(t for t in self.sinks
                                            if self.sink_commits.get(t, 0) < (m["last_complete"] or 0))
        else:
            m["committed"], m["uncommitted_sinks"] = m["last_complete"], []
        comp = self.plan.packing.task_component
        m["waiting_for"] = [[t, comp.get(t)] for t in m["waiting_for"]]
        m["uncommitted_sinks"] = [[t, comp.get(t)] for t in m["uncommitted_sinks"]]
        return m

    def metrics_reply(self):
        def total(key):
            return sum((s.get("counters") or {}).get(key, 0) for s in self.stmgrs.values())
        rep = {"tasks": {str(t): m for t, m in self.metrics.task_totals().items()},
               "components": self.metrics.component_totals(), "stmgr_dropped": total("dropped"),
               "stmgr_malformed": total("malformed"), "stmgr_denied": total("denied"),
               "tmaster_malformed": self.counters["malformed"], "tmaster_denied": self.counters["denied"],
               "stmgr_queued": sum(s.get("queued") or 0 for s in self.stmgrs.values()),
               "errors": self.errors[-20:]}
        if self.ckpt is not None:
            rep["checkpoints"] = self.checkpoint_report()
        return rep
