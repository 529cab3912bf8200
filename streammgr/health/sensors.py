"""Sensors: what the health manager measures, read from one metrics document.

The document is the topology master's ``metrics_doc(window)`` (streammgr/tmaster.py):
``tasks`` (per task views of the window), ``components`` (with ``kind``), ``stmgrs``.
Pass the previous round's document too, for what grows between rounds.

Per instance (task):

* ``backpressure``: the fraction of the window the stream manager held backpressure
  *because of this instance* (its queue rose above the high watermark). This is
  Heron's ``__time_spent_back_pressure_by_compid/<instance>``, which the stream
  manager reports for the instance that initiated it. Read from the task field
  ``backpressure_initiated_fraction``, or from ``stmgrs[c]["backpressure_secs_by_task"]``
  (cumulative seconds per task, differenced against the previous document).
  Not from ``backpressure_fraction``: in Bittern only spouts report
  ``__time-in-backpressure-ms``, and for them it is the time they were *paused*,
  i.e. the victims, not the cause. A spout's value is kept as ``throttled``.
* ``queue_bytes``: bytes the stream manager holds toward the instance (task field
  ``queued_bytes`` or ``stmgrs[c]["queued_by_task"]``), and ``queue_growth`` in bytes/s
  since the previous document.
* ``execute_rate`` (tuples/s), ``cpu_percent``, ``capacity`` (the fraction of the
  window spent executing) and ``utilization`` = max(cpu share of one core, capacity):
  the fraction of the window it was busy, so ``execute_rate / utilization`` is its
  *true* processing rate (tuples per busy second: DS2's, see ds2.py).
* ``emit_rate`` (tuples/s emitted, on all streams: the metrics have no per-stream
  counts), for spouts (what they offered) and bolts (their output, for selectivity).

A sensor without data leaves the value ``None`` and records why in ``missing``:
nothing downstream mistakes "not measured" for "zero".
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

# Heron clamps a component's backpressure below a whole second per second, so that
# the scale-up factor bp / (1 - bp) stays finite.
BP_CLAMP = 0.999


def num(d, key):
    """``d[key]`` as a float, or None when absent, not a number, or not finite."""
    if not isinstance(d, dict):
        return None
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def _frac(v):
    return None if v is None else min(1.0, max(0.0, v))


@dataclass
class Instance:
    task: int
    component: str
    kind: str | None = None  # "spout" | "bolt" | None (unknown)
    container: int | None = None
    pid: int | None = None
    backpressure: float | None = None
    throttled: float | None = None
    queue_bytes: float | None = None
    queue_growth: float | None = None
    execute_rate: float | None = None
    emit_rate: float | None = None
    cpu_percent: float | None = None
    capacity: float | None = None
    utilization: float | None = None

    def to_dict(self):
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


@dataclass
class Component:
    name: str
    kind: str | None
    parallelism: int
    tasks: list
    backpressure: float | None = None  # Heron: the sum over its instances, clamped below 1
    backpressure_max: float | None = None
    queue_bytes_max: float | None = None
    queue_bytes_total: float | None = None
    execute_rate: float | None = None  # summed over instances
    emit_rate: float | None = None  # summed over instances
    utilization: float | None = None  # mean over instances, None unless every instance has one

    def to_dict(self):
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


@dataclass
class Measurements:
    time: float | None
    window_secs: float | None
    instances: dict = field(default_factory=dict)  # task -> Instance
    components: dict = field(default_factory=dict)  # name -> Component
    throttled: float | None = None  # the largest fraction of the window a spout was paused
    stmgr_backpressure: dict = field(default_factory=dict)  # container -> fraction or None
    missing: dict = field(default_factory=dict)  # sensor -> why it has no data

    def of(self, component):
        """The instances of a component, by task."""
        return [self.instances[t] for t in self.components[component].tasks] if component in self.components else []

    def bolts(self):
        return [c for c in self.components.values() if c.kind != "spout"]


def _elapsed(doc, prev, elapsed):
    if prev is None:
        return None
    a, b = num(prev, "uptime_secs"), num(doc, "uptime_secs")
    if a is not None and b is not None and b > a:
        return b - a
    return elapsed if elapsed and elapsed > 0 else None


def _by_task(doc, key, task, container):
    """A per-task value the stream manager of ``container`` reports in a dict ``key``."""
    s = (doc.get("stmgrs") or {}).get(str(container)) if container is not None else None
    d = s.get(key) if isinstance(s, dict) else None
    return num(d, str(task)) if isinstance(d, dict) else None


def measure(doc, prev=None, elapsed=None):
    """Measurements of one metrics document (``prev``: the previous round's, or None;
    ``elapsed``: seconds between them when the documents carry no ``uptime_secs``)."""
    doc = doc if isinstance(doc, dict) else {}
    prev = prev if isinstance(prev, dict) else None
    dt = _elapsed(doc, prev, elapsed)
    comps_doc = doc.get("components") if isinstance(doc.get("components"), dict) else {}
    tasks_doc = doc.get("tasks") if isinstance(doc.get("tasks"), dict) else {}
    prev_tasks = (prev or {}).get("tasks") if isinstance((prev or {}).get("tasks"), dict) else {}
    m = Measurements(time=num(doc, "uptime_secs"), window_secs=None)
    seen = {"backpressure": False, "queue": False, "growth": False, "execute_rate": False,
            "utilization": False, "throttled": False}
    windows = []
    for key, v in tasks_doc.items():
        try:
            task = int(key)
        except (TypeError, ValueError):
            continue
        if not isinstance(v, dict) or not isinstance(v.get("component"), str):
            continue
        comp = v["component"]
        kind = (comps_doc.get(comp) or {}).get("kind") if isinstance(comps_doc.get(comp), dict) else None
        inst = Instance(task, comp, kind, container=v.get("container"), pid=v.get("pid"))
        ws = num(v, "window_secs")
        has_window = ws is None or ws > 0  # a view without two reports has no rates yet
        if ws:
            windows.append(ws)
        # backpressure caused by this instance
        bp = num(v, "backpressure_initiated_fraction")
        if bp is None and dt:
            now_s = _by_task(doc, "backpressure_secs_by_task", task, inst.container)
            old_s = _by_task(prev, "backpressure_secs_by_task", task,
                             (prev_tasks.get(key) or {}).get("container", inst.container))
            if now_s is not None and old_s is not None:
                bp = max(0.0, now_s - old_s) / dt
        if kind != "spout":
            inst.backpressure = _frac(bp)
        elif has_window:
            inst.throttled = _frac(num(v, "backpressure_fraction"))
        # queue toward it, and its growth
        q = num(v, "queued_bytes")
        if q is None:
            q = _by_task(doc, "queued_by_task", task, inst.container)
        inst.queue_bytes = q
        if q is not None and dt and key in prev_tasks:
            pv = prev_tasks[key]
            pq = num(pv, "queued_bytes")
            if pq is None:
                pq = _by_task(prev, "queued_by_task", task, pv.get("container", inst.container))
            if pq is not None:
                inst.queue_growth = (q - pq) / dt
        if has_window:
            if kind != "spout":
                inst.execute_rate = num(v, "execute_rate")
            inst.emit_rate = num(v, "emit_rate")
            inst.cpu_percent = num(v, "cpu_percent")
            cap = num(v, "capacity")
            # capacity comes from execute latencies; without any it is unknown, not 0
            if cap is not None and (num(v, "execute_latency_count") or 0) > 0:
                inst.capacity = _frac(cap)
            parts = [p for p in (None if inst.cpu_percent is None else inst.cpu_percent / 100.0,
                                 inst.capacity) if p is not None]
            inst.utilization = _frac(max(parts)) if parts else None
        for name, val in (("backpressure", inst.backpressure), ("queue", inst.queue_bytes),
                          ("growth", inst.queue_growth), ("execute_rate", inst.execute_rate),
                          ("utilization", inst.utilization), ("throttled", inst.throttled)):
            seen[name] = seen[name] or val is not None
        m.instances[task] = inst
    m.window_secs = max(windows) if windows else None

    by_comp = {}
    for t in sorted(m.instances):
        by_comp.setdefault(m.instances[t].component, []).append(t)
    for name, tasks in sorted(by_comp.items()):
        cd = comps_doc.get(name) if isinstance(comps_doc.get(name), dict) else {}
        insts = [m.instances[t] for t in tasks]
        c = Component(name, cd.get("kind"), len(tasks), tasks)
        bps = [i.backpressure for i in insts if i.backpressure is not None]
        if bps:
            c.backpressure = min(BP_CLAMP, sum(bps))
            c.backpressure_max = max(bps)
        qs = [i.queue_bytes for i in insts if i.queue_bytes is not None]
        if qs:
            c.queue_bytes_max, c.queue_bytes_total = max(qs), sum(qs)
        rates = [i.execute_rate for i in insts if i.execute_rate is not None]
        if rates:
            c.execute_rate = sum(rates)
        emits = [i.emit_rate for i in insts if i.emit_rate is not None]
        if emits:
            c.emit_rate = sum(emits)
        us = [i.utilization for i in insts if i.utilization is not None]
        if us and len(us) == len(insts):
            c.utilization = sum(us) / len(us)
        m.components[name] = c

    throttled = [i.throttled for i in m.instances.values() if i.throttled is not None]
    m.throttled = max(throttled) if throttled else None
    for c, s in ((doc.get("stmgrs") or {}).items() if isinstance(doc.get("stmgrs"), dict) else ()):
        ps = ((prev or {}).get("stmgrs") or {}).get(c) if prev else None
        a, b = num(ps, "backpressure_secs"), num(s, "backpressure_secs")
        m.stmgr_backpressure[c] = _frac(max(0.0, b - a) / dt) if (a is not None and b is not None and dt) else None

    if not m.instances:
        m.missing["tasks"] = "the document has no task views"
    reasons = {
        "backpressure": "no instance reports the backpressure it caused (backpressure_initiated_fraction, "
                        "or the stream managers' backpressure_secs_by_task)",
        "queue": "no queue bytes per instance (queued_bytes, or the stream managers' queued_by_task)",
        "growth": "no previous round to compare queues with" if dt is None else "no queue bytes per instance",
        "execute_rate": "no execute rates (fewer than two reports in the window)",
        "utilization": "no CPU or capacity per instance",
        "throttled": "no spout reports time paused by backpressure",
    }
    for name, ok in seen.items():
        if not ok and m.instances:
            m.missing[name] = reasons[name]
    return m
