"""Resolvers: Diagnosis -> Action, and the check of an action's outcome.

The diagnosis says *why*; *how much* comes from DS2's true-rate model (ds2.py) when
it has the numbers, with Dhalion's rules as the fallback (and the reason says which):

* UNDER_PROVISIONED -> scale to the model's required parallelism,
  ``ceil(demand / (true rate per task x target.utilization))``, together with every
  other bolt the model finds short of tasks (one rebalance for the whole pipeline),
  leaving out components whose problem more tasks do not fix (data skew, a slow
  instance, a rate skew) and those blacklisted. The model finding the current
  parallelism enough while the component caused backpressure (or knowing the demand
  only as a lower bound) adds one task. Without the model's numbers: Dhalion's
  factor (Heron's ScaleUpResolver): a component that caused backpressure a fraction
  ``bp`` of the time processed only ``1 - bp`` of what was offered, so it needs
  ``new = ceil(par * (1 + bp / (1 - bp)))``, bp / (1 - bp) capped at 4 (Heron's fence);
  queues alone (no backpressure measured): one more instance.
* SLOW_INSTANCE -> restart that instance.
* DATA_SKEW -> report only: more instances do not split a hot key.
* OVER_PROVISIONED -> scale down to the most the model needed over the
  ``scale.down.windows`` calm rounds that found it needed fewer (every such bolt in
  one action), but never so far that its measured busy time would put each task
  above ``target.utilization``. Without the model's numbers (low utilisation for
  ``sustained.windows`` rounds): ``new = max(1, ceil(par * utilization / target))``.
  (Heron's health manager never scales down.)

:func:`evaluate` judges an action against what it promised: a scale up helped when
the component no longer causes backpressure AND executes at the demand the model
measures now; it FELL_SHORT when it improved things (more executed, or less
backpressure) without getting there, which is not blacklisted: the next round acts
again from fresh rates (that action differs: the model's new number, or one more);
an action that changed nothing DID_NOT_HELP and is never repeated (Dhalion).
"""
from __future__ import annotations

import math

from . import ds2
from .model import (DATA_SKEW, DID_NOT_HELP, FELL_SHORT, HELPED, OVER_PROVISIONED, REPORT, RESTART, SCALE,
                    SLOW_INSTANCE, UNDER_PROVISIONED, UNKNOWN, Action)
from .sensors import BP_CLAMP

MAX_UNUSED_CAPACITY = 4.0  # Heron's scale-up fence: never more than 5x in one step
IMPROVEMENT = 0.25  # a symptom that fell by at least this share counts as improved
RATE_GAIN = 0.1  # ... and so does executing at least this share more
MET = 0.9  # executing at least this share of the demand meets it (rates are noisy)


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


def _modeled(model, component):
    """The model's estimate of ``component`` when it has a required parallelism."""
    e = (model or {}).get(component)
    return e if e is not None and e.required is not None and e.true_rate_per_task is not None else None


def _targets(primary, par, new, extra):
    """Action.targets: {} for one component, else component -> [from, to], primary first."""
    if not extra:
        return {}
    return {primary: [par, new], **{n: [f, t] for n, (f, t) in sorted(extra.items())}}


def _others(extra):
    return ", ".join(f"{n} {f} -> {t}" for n, (f, t) in sorted(extra.items()))


def _scale_up(d, m, s, par, limit, model, exclude):
    e = _modeled(model, d.component)
    if e is None:
        why = (model or {}).get(d.component)
        bp, source = _bp_measure(m, d.component)
        new = dhalion_parallelism(par, bp or 0.0, limit)
        if bp is None or bp <= 0:  # under pressure by its queues alone: one more instance
            new = min(par + 1, limit)
        if new <= par:
            return Action(REPORT, d.component, None, par, par,
                          f"under-provisioned, but already at its largest parallelism {limit}")
        rule = (f"caused backpressure {bp:.0%} of the window ({source}): needs 1/(1-bp) = "
                f"{1 / (1 - min(bp, BP_CLAMP)):.2f}x" if bp else "queues large and growing")
        if model is not None:
            rule = f"no model numbers ({why.why if why is not None else 'not measured'}), Dhalion's rule: " + rule
        return Action(SCALE, d.component, None, par, new, f"under-provisioned: {rule}; {par} -> {new}")
    new, why = min(e.required, limit), e.why
    if new <= par or not e.exact:
        bumped = min(max(new, par + 1), limit)
        if new <= par:
            why = f"the model finds {e.required} enough ({e.why}), yet it caused backpressure: one more"
        new = bumped
    if new <= par:
        return Action(REPORT, d.component, None, par, par,
                      f"under-provisioned, but already at its largest parallelism {limit} ({e.why})")
    extra = {n: (x.current, x.required) for n, x in ds2.under(model, set(exclude) | {d.component}).items()}
    reason = f"under-provisioned: {why}; {par} -> {new}" + (f"; with {_others(extra)}" if extra else "")
    return Action(SCALE, d.component, None, par, new, reason, _targets(d.component, par, new, extra))


def _down_to(m, s, name, required, floors):
    """The parallelism a bolt is scaled down to: the most the model needed in the
    rounds counted, no fewer than its measured busy time needs at the target, and
    above any parallelism it was under pressure at for as much demand as now."""
    c = m.components.get(name)
    par = c.parallelism
    busy = scale_down_parallelism(par, c.utilization, s.target_utilization) if c.utilization is not None else 1
    return max(1, max(required), busy, (floors or {}).get(name, 1))


def _scale_down(d, m, s, c, par, model, down, exclude, floors):
    required = d.evidence.get("required")
    if required:  # the model's: required < par for scale.down.windows rounds
        new = _down_to(m, s, d.component, required, floors)
        if new >= par:
            return None
        extra = {}
        for n, reqs in sorted((down or {}).items()):
            x = m.components.get(n)
            if n == d.component or n in exclude or x is None or len(reqs) < s.scale_down_windows:
                continue
            to = _down_to(m, s, n, reqs, floors)
            if to < x.parallelism:
                extra[n] = (x.parallelism, to)
        e = (model or {}).get(d.component)
        reason = (f"over-provisioned: the model needed at most {max(required)} task(s) in the last "
                  f"{len(required)} calm rounds ({e.why if e is not None else 'no current numbers'}); "
                  f"{par} -> {new}" + (f"; with {_others(extra)}" if extra else ""))
        return Action(SCALE, d.component, None, par, new, reason, _targets(d.component, par, new, extra))
    if c is None or c.utilization is None:
        return None
    new = scale_down_parallelism(par, c.utilization, s.target_utilization)
    if new >= par:
        return None
    return Action(SCALE, d.component, None, par, new,
                  f"over-provisioned: {c.utilization:.0%} busy for {d.evidence.get('windows')} rounds; "
                  f"{par} -> {new} puts each at about {c.utilization * par / new:.0%} "
                  f"(target {s.target_utilization:.0%})")


def resolve(d, m, s, cap=None, model=None, exclude=(), down=None, floors=None):
    """The action for a diagnosis (None: nothing to do). ``cap``: this component's own
    largest parallelism, if lower than max.parallelism (a stateful component cannot
    have more instances than key groups). ``model``: ds2.estimate's numbers (None: not
    available); ``exclude``: components that may not be scaled along with this one;
    ``down``: component -> the model's required parallelism in each calm round that
    found it over-provisioned (the manager's count); ``floors``: component -> the
    fewest tasks it may be scaled down to (it was under pressure with fewer, at as
    much demand as now)."""
    c = m.components.get(d.component)
    par = c.parallelism if c is not None else None
    if d.kind == UNDER_PROVISIONED:
        limit = min(s.max_parallelism, cap) if cap else s.max_parallelism
        return _scale_up(d, m, s, par, limit, model, exclude)
    if d.kind == SLOW_INSTANCE:
        return Action(RESTART, d.component, d.task, par, par,
                      f"task {d.task} is slow: its {d.evidence.get('metric', 'queue')} is far above its peers' "
                      "while the processing rates are alike")
    if d.kind == DATA_SKEW:
        return Action(REPORT, d.component, d.task, par, par,
                      f"data skew: task {d.task} executes the most and queues the most; scaling does not "
                      "split a hot key (change the grouping or the key)")
    if d.kind == OVER_PROVISIONED:
        return _scale_down(d, m, s, c, par, model, down, exclude, floors)
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


def _limit(s, metric):
    return s.backpressure_threshold if metric != "queue_bytes" else s.queue_bytes_threshold


def _judge_up(comp, before, after, s, model, promise):
    """(met, improved, evidence) of one component a scale up was for; met/improved None: cannot tell."""
    b, metric = _pressure_of(before, comp)
    a, metric_after = _pressure_of(after, comp)
    cb, ca = before.components.get(comp), after.components.get(comp)
    rb = cb.execute_rate if cb is not None else None
    ra = ca.execute_rate if ca is not None else None
    e = (model or {}).get(comp)
    demand = e.demand if e is not None and e.demand is not None else (promise.get(comp) or {}).get("demand")
    ev = {"metric": metric, "before": b, "after": a, "executed_before": rb, "executed_after": ra,
          "demand": demand, "parallelism_now": ca.parallelism if ca is not None else None}
    relieved = None if a is None or metric != metric_after else a <= _limit(s, metric)
    at_demand = None if demand is None or ra is None else ra >= MET * demand
    # the demand unknown (no model numbers): backpressure gone is all it promised
    met = relieved if at_demand is None or relieved is None else (relieved and at_demand)
    gained = None if rb is None or ra is None else ra >= (1 + RATE_GAIN) * rb and ra > 0
    eased = None if relieved is None or b is None else (relieved or a <= (1 - IMPROVEMENT) * b)
    improved = None if gained is None and eased is None else bool(gained or eased)
    return met, improved, ev


def evaluate(action, diagnosis, before, after, s, model=None, promise=None):
    """(outcome, evidence) of an action, from the measurements before it and after the
    wait. ``model``: ds2.estimate of ``after`` (None: Dhalion's judgement only, less
    backpressure than before); ``promise``: the decision's model numbers (component ->
    dict). Evidence ``blacklist``: the components a DID_NOT_HELP blacklists."""
    comp = action.component
    c_after = after.components.get(comp)
    ev = {"parallelism_now": c_after.parallelism if c_after else None}
    scales = action.scales() or {comp: action.parallelism_to}
    if diagnosis.kind == UNDER_PROVISIONED and (model is not None or promise):
        judged = {c: _judge_up(c, before, after, s, model, promise or {}) for c in scales}
        ev.update({"by_component": {c: j[2] for c, j in judged.items()}, **judged[comp][2]})
        met = [j[0] for j in judged.values()]
        improved = [j[1] for j in judged.values()]
        if all(x is True for x in met):
            return HELPED, ev
        if any(x is True for x in improved):
            fresh = {c: e.required for c, e in (model or {}).items() if c in scales}
            ev["required_now"] = fresh
            return FELL_SHORT, ev
        if all(x is False for x in improved):
            ev["blacklist"] = sorted(scales)
            return DID_NOT_HELP, ev
        return UNKNOWN, ev
    if diagnosis.kind in (UNDER_PROVISIONED, SLOW_INSTANCE):
        task = action.task if diagnosis.kind == SLOW_INSTANCE else None
        b, metric = _pressure_of(before, comp, task)
        a, metric_after = _pressure_of(after, comp, task)
        ev.update({"metric": metric, "before": b, "after": a})
        if a is None or b is None or metric != metric_after:
            return UNKNOWN, ev
        if a <= _limit(s, metric) or a <= (1 - IMPROVEMENT) * b:
            return HELPED, ev
        return DID_NOT_HELP, ev
    if diagnosis.kind == OVER_PROVISIONED:
        # it helped if the smaller components cope: no pressure on them, spouts not paused
        worst, hurt = None, []
        for c in scales:
            a, metric = _pressure_of(after, c)
            if a is None:
                continue
            worst = a if worst is None else max(worst, a)
            if a > _limit(s, metric):
                hurt.append(c)
            if c == comp:
                ev.update({"metric": metric, "after": a})
        ev["utilization"] = c_after.utilization if c_after else None
        if worst is None:
            return UNKNOWN, ev
        if hurt:
            ev["blacklist"] = sorted(hurt)
            return DID_NOT_HELP, ev
        return HELPED, ev
    return UNKNOWN, ev


__all__ = ["dhalion_parallelism", "evaluate", "resolve", "scale_down_parallelism"]
