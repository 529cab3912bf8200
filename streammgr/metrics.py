"""Metrics as the topology master keeps them (pure logic).

Instances report cumulative counters; a restarted instance starts again from
zero, so the store folds the last value before a reset into a per-task base and
totals never go backwards.
"""
from __future__ import annotations


class MetricsStore:
    def __init__(self, task_component):
        self.task_component = dict(task_component)
        self.latest = {}  # task -> {name: value}
        self.base = {}  # task -> {name: value} carried over from earlier incarnations
        self.seq = {}  # task -> last report sequence number

    def update(self, task, metrics, seq=0):
        prev = self.latest.get(task)
        if prev:
            for k, v in prev.items():
                if isinstance(v, (int, float)) and metrics.get(k, 0) < v:
                    base = self.base.setdefault(task, {})
                    base[k] = base.get(k, 0) + v
        self.latest[task] = dict(metrics)
        if seq is not None and seq >= 0:
            self.seq[task] = max(self.seq.get(task, 0), seq)
        elif seq == -1:  # final report of a stopping instance
            self.seq[task] = float("inf")

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
        comps = {}
        for task, m in self.task_totals().items():
            c = comps.setdefault(self.task_component[task], {"tasks": 0})
            c["tasks"] += 1
            for k, v in m.items():
                if isinstance(v, (int, float)):
                    c[k] = c.get(k, 0) + v
        return comps
