"""Metrics a component can register with ``context.register_metric(name, metric)``
(heronpy's metric classes and names). Each is read with ``get_value_and_reset()``
every ``topology.metrics.interval.secs`` and shown per component and per task.
A plain callable returning a number works too."""
from __future__ import annotations


class CountMetric:
    """Counts events; reports the count of the last interval."""

    def __init__(self):
        self.value = 0

    def incr(self, to_add=1):
        self.value += to_add

    def get_value_and_reset(self):
        v, self.value = self.value, 0
        return v


class MultiCountMetric:
    """One count per key."""

    def __init__(self):
        self.value = {}

    def incr(self, key, to_add=1):
        self.value[key] = self.value.get(key, 0) + to_add

    def get_value_and_reset(self):
        v, self.value = self.value, {}
        return v


class MeanReducedMetric:
    """The mean of the values seen in the last interval (None if none)."""

    def __init__(self):
        self.total = 0.0
        self.n = 0

    def update(self, value):
        self.total += value
        self.n += 1

    def get_value_and_reset(self):
        v = self.total / self.n if self.n else None
        self.total, self.n = 0.0, 0
        return v


class AssignableMetric:
    """A gauge: reports the last value set."""

    def __init__(self, init_val=0):
        self.value = init_val

    def update(self, value):
        self.value = value

    def get_value_and_reset(self):
        return self.value


def read_metric(metric):
    if hasattr(metric, "get_value_and_reset"):
        return metric.get_value_and_reset()
    if callable(metric):
        return metric()
    raise TypeError(f"{metric!r} is not a metric (needs get_value_and_reset() or to be callable)")
