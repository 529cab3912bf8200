"""Metrics as the topology master keeps them (pure logic).

Instances report cumulative counters (names ending in ``-count`` or ``-ms``) and
gauges (anything else: pending trees, latencies). A restarted instance (a new
pid) starts its counters again from zero, so the store folds the last values of
the previous incarnation into a per-task base and totals never go backwards;
gauges are simply the latest value.
"""
from __future__ import annotations


def is_counter(name):
    return name.endswith(("-count", "-ms"))


class MetricsStore:
    def __init__(self, task_component):
        self.task_component = dict(task_component)
        self.latest = {}  # task -> {name: value}
        self.base = {}  # task -> {name: value} carried over from earlier incarnations
        self.pid = {}  # task -> pid of the incarnation that reported last
        self.seq = {}  # task -> last report sequence number

    def update(self, task, metrics, seq=0, pid=None):
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

    def missing(self, seq):
        return {t for t in self.task_component if self.seq.get(t, 0) < seq}

    def task_totals(self):
        out = {}
        for task in self.task_component:
            cur = dict(self.latest.get(task, {}))
            for k, v in self.base.get(task, {}).items():
                cur[k] = cur.get(k, 0) + v
            out[task] = cur
        return out

    def component_totals(self):
        """Per component: counters and numeric gauges summed over its tasks."""
        comps = {}
        for task, m in self.task_totals().items():
            c = comps.setdefault(self.task_component[task], {"tasks": 0})
            c["tasks"] += 1
            for k, v in m.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    c[k] = c.get(k, 0) + v
        return comps
