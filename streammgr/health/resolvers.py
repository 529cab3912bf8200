"""Resolvers: Diagnosis -> Action, and the check of an action's outcome.

* UNDER_PROVISIONED -> scale up by the factor the measured backpressure implies
  (Dhalion; Heron's ScaleUpResolver): a component that caused backpressure a
  fraction ``bp`` of the time processed only ``1 - bp`` of what was offered, so it
  needs ``1 / (1 - bp) = 1 + bp / (1 - bp)`` times its instances:
  ``new = ceil(par * (1 + bp / (1 - bp)))``, with bp / (1 - bp) capped at 4 (at most
  5x, Heron's fence) and the result at ``max.parallelism``.
* SLOW_INSTANCE -> restart that instance.
* DATA_SKEW -> report only: more instances do not split a hot key.
* OVER_PROVISIONED -> scale down so that the instances would be ``scale.down.target``
  busy: ``new = max(1, ceil(par * utilization / target))``. With utilization below
  ``low.utilization`` < target < 1, the smaller component is still well short of
  saturation, so it does not cause backpressure and is not scaled back up.
  (Heron's health manager never scales down.)
"""
from __future__ import annotations

import math

from .model import (DATA_SKEW, DID_NOT_HELP, HELPED, OVER_PROVISIONED, REPORT, RESTART, SCALE,
                    SLOW_INSTANCE, UNDER_PROVISIONED, UNKNOWN, Action)
from .sensors import BP_CLAMP

MAX_UNUSED_CAPACITY = 4.0  # Heron's scale-up fence: never more than 5x in one step
IMPROVEMENT = 0.25  # a symptom that fell by at least this share counts as improved


def dhalion_parallelism(par, bp, cap=None):
    """``ceil(par * (1 + bp / (1 - bp)))``, the factor fenced at 5x, the result at ``cap``."""
    bp = min(BP_CLAMP, max(0.0, float(bp)))
    unused = min(MAX_UNUSED_CAPACITY, bp / (1.0 - bp))
    new = math.ceil(round(par * (1.0 + unused), 9))  # (rounding: 2 * 1.5 must be 3, not 4)
    return min(new, cap) if cap else new


def scale_down_parallelism(par, utilization, target):
    """The smallest parallelism at which ``par`` instances' load keeps each under ``target``."""
    return max(1, math.ceil(round(par * max(0.0, utilization) / target, 9)))


def _bp_measure(m, component):
    """The backpressure fraction a component caused: the sum over its instances
    (Heron), no more than the time the spouts were paused (all spouts are paused
    while anything holds backpressure, so that is the topology's total); the
    spouts' paused time alone when no instance measures what it caused."""
    c = m.components.get(component)
    bp = c.backpressure if c is not None else None
    if bp is None:
        return m.throttled, "spouts_throttled"
    if m.throttled is not None and m.throttled < bp:
        return m.throttled, "instances, bounded by spouts_throttled"
    return bp, "instances"


def resolve(d, m, s, cap=None):
    """The action for a diagnosis (None: nothing to do). ``cap``: this component's own
    largest parallelism, if lower than max.parallelism (a stateful component cannot
    have more instances than key groups)."""
    c = m.components.get(d.component)
    par = c.parallelism if c is not None else None
    if d.kind == UNDER_PROVISIONED:
        limit = min(s.max_parallelism, cap) if cap else s.max_parallelism
        bp, source = _bp_measure(m, d.component)
        new = dhalion_parallelism(par, bp or 0.0, limit)
        if bp is None or bp <= 0:  # under pressure by its queues alone: one more instance
            new = min(par + 1, limit)
        if new <= par:
            return Action(REPORT, d.component, None, par, par,
                          f"under-provisioned, but already at its largest parallelism {limit}")
        why = (f"caused backpressure {bp:.0%} of the window ({source}): needs 1/(1-bp) = "
               f"{1 / (1 - min(bp, BP_CLAMP)):.2f}x" if bp else "queues large and growing")
        return Action(SCALE, d.component, None, par, new, f"under-provisioned: {why}; {par} -> {new}")
    if d.kind == SLOW_INSTANCE:
        return Action(RESTART, d.component, d.task, par, par,
                      f"task {d.task} is slow: its {d.evidence.get('metric', 'queue')} is far above its peers' "
                      "while the processing rates are alike")
    if d.kind == DATA_SKEW:
        return Action(REPORT, d.component, d.task, par, par,
                      f"data skew: task {d.task} executes the most and queues the most; scaling does not "
                      "split a hot key (change the grouping or the key)")
    if d.kind == OVER_PROVISIONED:
        if c is None or c.utilization is None:
            return None
        new = scale_down_parallelism(par, c.utilization, s.scale_down_target)
        if new >= par:
            return None
        return Action(SCALE, d.component, None, par, new,
                      f"over-provisioned: {c.utilization:.0%} busy for {d.evidence.get('windows')} rounds; "
                      f"{par} -> {new} puts each at about {c.utilization * par / new:.0%} "
                      f"(target {s.scale_down_target:.0%})")
    return None


def _pressure_of(m, component, task=None):
    """(value, metric) of the symptom an action was meant to relieve, or (None, why)."""
    if task is not None and task in m.instances:
        i = m.instances[task]
        if i.backpressure is not None:
            return i.backpressure, "backpressure"
        if i.queue_bytes is not None:
            return i.queue_bytes, "queue_bytes"
    c = m.components.get(component)
    if c is not None and c.backpressure is not None:  # bounded as in _bp_measure
        return (c.backpressure if m.throttled is None else min(c.backpressure, m.throttled)), "backpressure"
    if c is not None and c.queue_bytes_max is not None:
        return c.queue_bytes_max, "queue_bytes"
    if m.throttled is not None:
        return m.throttled, "spouts_throttled"
    return None, None


def evaluate(action, diagnosis, before, after, s):
    """(outcome, evidence) of an action, from the measurements before it and after the wait."""
    comp = action.component
    c_after = after.components.get(comp)
    ev = {"parallelism_now": c_after.parallelism if c_after else None}
    if diagnosis.kind in (UNDER_PROVISIONED, SLOW_INSTANCE):
        task = action.task if diagnosis.kind == SLOW_INSTANCE else None
        b, metric = _pressure_of(before, comp, task)
        a, metric_after = _pressure_of(after, comp, task)
        ev.update({"metric": metric, "before": b, "after": a})
        if a is None or b is None or metric != metric_after:
            return UNKNOWN, ev
        limit = s.backpressure_threshold if metric != "queue_bytes" else s.queue_bytes_threshold
        if a <= limit or a <= (1 - IMPROVEMENT) * b:
            return HELPED, ev
        return DID_NOT_HELP, ev
    if diagnosis.kind == OVER_PROVISIONED:
        # it helped if the smaller component copes: no pressure on it, spouts not paused
        a, metric = _pressure_of(after, comp)
        ev.update({"metric": metric, "after": a, "utilization": c_after.utilization if c_after else None})
        if a is None:
            return UNKNOWN, ev
        limit = s.backpressure_threshold if metric != "queue_bytes" else s.queue_bytes_threshold
        return (HELPED if a <= limit else DID_NOT_HELP), ev
    return UNKNOWN, ev


__all__ = ["dhalion_parallelism", "evaluate", "resolve", "scale_down_parallelism"]
