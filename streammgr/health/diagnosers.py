"""Diagnosers: Symptoms -> Diagnoses (Heron's UnderProvisioningDiagnoser,
SlowInstanceDiagnoser and DataSkewDiagnoser, plus over-provisioning).

A bolt is *under pressure* when its instances caused backpressure (BACKPRESSURE), or,
where backpressure is not measured per instance, when one of its queues is both
large and growing (it is on its way to the high watermark). Which diagnosis follows
depends on the two skews, as in Heron:

=====================  ===============  ==========================================
processing-rate skew   queue skew       diagnosis
=====================  ===============  ==========================================
no                     no               UNDER_PROVISIONED: every instance is equally
                                        overloaded, so more instances help
no                     yes              SLOW_INSTANCE: same input rate, but one
                                        instance's queue (or the backpressure it
                                        causes) is far above its peers' (Heron: at
                                        least half the maximum); only when those are
                                        a minority, else it is under-provisioning
yes                    yes              DATA_SKEW: the instance that executes the
yes                    no               most gets the most data (a hot key); more
                                        instances do not split a key, so report only
=====================  ===============  ==========================================

Data skew is diagnosed without pressure as well, when both skews point at it, and
never for a bolt whose every input is spread evenly (shuffle, none: round robin, so
no instance can get more data than another over time): there a rate skew is an
instance catching up on its own backlog, and the queue skew decides as if there
were none (a slow instance just restarted or unblocked looks like that).
OVER_PROVISIONED, while nothing in the topology is under pressure and no spout is
throttled: the true-rate model (ds2.py) needed fewer tasks than the bolt has
(EXCESS_PARALLELISM) for ``scale.down.windows`` rounds in a row; for a bolt the
model has no numbers for, low utilisation for ``sustained.windows`` rounds in a row.
"""
from __future__ import annotations

from .model import (BACKPRESSURE, DATA_SKEW, EXCESS_PARALLELISM, GROWING_QUEUE, LARGE_QUEUE, LOW_UTILIZATION,
                    OVER_PROVISIONED, PROCESSING_RATE_SKEW, QUEUE_SKEW, SLOW_INSTANCE,
                    UNATTRIBUTED_BACKPRESSURE, UNDER_PROVISIONED, Diagnosis)

SLOW_SHARE = 0.5  # Heron: an instance is slow when its queue is at least half the largest


def _pressure(symptoms, m, component):
    """The symptoms that put a component under pressure (empty: none)."""
    bp = [x for x in symptoms if x.kind == BACKPRESSURE and x.component == component]
    if bp:
        return bp
    large = {x.task: x for x in symptoms if x.kind == LARGE_QUEUE and x.component == component}
    growing = [x for x in symptoms if x.kind == GROWING_QUEUE and x.component == component and x.task in large]
    return [large[x.task] for x in growing] + growing


def _severity(m, component):
    c = m.components.get(component)
    if c is None:
        return 0.0
    return (c.backpressure or 0.0) + (c.queue_bytes_max or 0.0) / 1e12  # bp first, queues break ties


def _evidence(m, component):
    c = m.components.get(component)
    if c is None:
        return {}
    return {"component": c.to_dict(), "instances": {i.task: i.to_dict() for i in m.of(component)},
            "spouts_throttled": m.throttled}


def diagnose(symptoms, m, s, low_windows=None, down=None, modeled=(), even=()):
    """Diagnoses, most severe first. ``low_windows``: component -> rounds in a row
    with LOW_UTILIZATION; ``down``: component -> the model's required parallelism in
    each of the calm rounds in a row that found it over-provisioned (both kept by the
    manager); ``modeled``: components the model has numbers for (only it scales them
    down); ``even``: bolts whose every input is spread evenly (no data skew there)."""
    low_windows, down = low_windows or {}, down or {}
    out = []
    pressured = set()
    for c in m.bolts():
        name = c.name
        mine = [x for x in symptoms if x.component == name]
        pressure = _pressure(symptoms, m, name)
        rate_skew = next((x for x in mine if x.kind == PROCESSING_RATE_SKEW and name not in even), None)
        q_skew = next((x for x in mine if x.kind == QUEUE_SKEW), None)
        if pressure:
            pressured.add(name)
        if not pressure and not (rate_skew and q_skew):
            continue
        ev = _evidence(m, name)
        if rate_skew:
            rates, hot = rate_skew.evidence["by_task"], rate_skew.evidence["high_tasks"]
            if q_skew:  # the hot instance should hold one of the larger queues
                qs = q_skew.evidence["by_task"]
                both = [t for t in hot if (qs.get(t) or 0) >= SLOW_SHARE * q_skew.evidence["max"]]
                hot = both or hot
            task = max(hot, key=lambda t: rates.get(t) or 0)
            out.append(Diagnosis(DATA_SKEW, name, task, tuple(pressure + [x for x in (rate_skew, q_skew) if x]),
                                 {**ev, "hot_tasks": hot, "under_pressure": bool(pressure)}))
            continue
        if q_skew:
            vals = q_skew.evidence["by_task"]
            slow = sorted((t for t, v in vals.items() if v is not None and v >= SLOW_SHARE * q_skew.evidence["max"]),
                          key=lambda t: -vals[t])
            if slow and 2 * len(slow) < len(vals):
                out.append(Diagnosis(SLOW_INSTANCE, name, slow[0], tuple(pressure + [q_skew]),
                                     {**ev, "slow_tasks": slow, "metric": q_skew.evidence["metric"]}))
                continue
        out.append(Diagnosis(UNDER_PROVISIONED, name, None, tuple(pressure + ([q_skew] if q_skew else [])), ev))
    out.sort(key=lambda d: -_severity(m, d.component))

    calm = not pressured and not any(x.kind == UNATTRIBUTED_BACKPRESSURE for x in symptoms) \
        and (m.throttled or 0.0) <= s.backpressure_threshold
    if calm:
        for x in symptoms:
            if x.kind == EXCESS_PARALLELISM and len(down.get(x.component, ())) >= s.scale_down_windows:
                reqs = list(down[x.component])
                out.append(Diagnosis(OVER_PROVISIONED, x.component, None, (x,),
                                     {**_evidence(m, x.component), "windows": len(reqs), "required": reqs}))
        for x in symptoms:
            if x.kind == LOW_UTILIZATION and x.component not in modeled \
                    and low_windows.get(x.component, 0) >= s.sustained_windows:
                out.append(Diagnosis(OVER_PROVISIONED, x.component, None, (x,),
                                     {**_evidence(m, x.component), "windows": low_windows[x.component]}))
    return out
