"""Detectors: Measurements -> Symptoms, one pure function each (Heron's healthmgr
detectors: BackPressureDetector, LargeWaitQueueDetector, GrowingWaitQueueDetector,
ProcessingRateSkewDetector, WaitQueueSkewDetector, and one Heron lacks: low
utilisation). Only bolts can be a bottleneck: spouts are paused by backpressure,
they do not cause it, so their paused time is evidence, never a cause.
"""
from __future__ import annotations

from .model import (BACKPRESSURE, GROWING_QUEUE, INSTANCE_BACKPRESSURE, LARGE_QUEUE, LOW_UTILIZATION,
                    PROCESSING_RATE_SKEW, QUEUE_SKEW, UNATTRIBUTED_BACKPRESSURE, Symptom)

MIN_SKEW_RATE = 1.0  # tuples/s: below this a rate "skew" is noise (an idle component)
POSITIVE = 0.9  # Heron's SkewDetector: instances within 10% of the maximum are the "high" ones


def _r(v, n=4):
    return None if v is None else round(v, n)


def detect_backpressure(m, s):
    """Components (and instances) that caused backpressure above the noise threshold."""
    out = []
    for c in m.bolts():
        if c.backpressure is None:
            continue
        by_task = {i.task: _r(i.backpressure) for i in m.of(c.name) if i.backpressure is not None}
        if c.backpressure > s.backpressure_threshold:
            out.append(Symptom(BACKPRESSURE, c.name, None, {
                "backpressure": _r(c.backpressure), "by_task": by_task, "threshold": s.backpressure_threshold,
                "spouts_throttled": _r(m.throttled)}))
        for i in m.of(c.name):
            if i.backpressure is not None and i.backpressure > s.backpressure_threshold:
                out.append(Symptom(INSTANCE_BACKPRESSURE, c.name, i.task, {"backpressure": _r(i.backpressure)}))
    if not any(x.kind == BACKPRESSURE for x in out) and m.throttled is not None \
            and m.throttled > s.backpressure_threshold:
        measured = any(c.backpressure is not None for c in m.bolts())
        out.append(Symptom(UNATTRIBUTED_BACKPRESSURE, None, None, {
            "spouts_throttled": _r(m.throttled),
            "why": ("the instances measured caused less than the threshold" if measured
                    else m.missing.get("backpressure", "no instance-level backpressure"))}))
    return out


def detect_large_queue(m, s):
    """Instances whose queue holds more than queue.bytes.threshold bytes."""
    return [Symptom(LARGE_QUEUE, i.component, i.task, {"queue_bytes": i.queue_bytes,
                                                       "threshold": s.queue_bytes_threshold})
            for c in m.bolts() for i in m.of(c.name)
            if i.queue_bytes is not None and i.queue_bytes > s.queue_bytes_threshold]


def detect_growing_queue(m, s):
    """Instances whose queue grew faster than queue.growth.bytes.per.sec since the last round."""
    return [Symptom(GROWING_QUEUE, i.component, i.task, {"growth_bytes_per_sec": _r(i.queue_growth, 1),
                                                         "queue_bytes": i.queue_bytes,
                                                         "threshold": s.queue_growth_threshold})
            for c in m.bolts() for i in m.of(c.name)
            if i.queue_growth is not None and i.queue_growth > s.queue_growth_threshold]


def _skew(values, ratio, floor):
    """(max, min, high tasks) when max > ratio * min and max >= floor, else None."""
    if len(values) < 2:
        return None
    hi, lo = max(values.values()), min(values.values())
    if hi < floor or hi <= ratio * lo:
        return None
    return hi, lo, sorted(t for t, v in values.items() if v >= POSITIVE * hi)


def detect_processing_rate_skew(m, s):
    """Components whose instances' execute rates differ by more than skew.ratio."""
    out = []
    for c in m.bolts():
        rates = {i.task: i.execute_rate for i in m.of(c.name) if i.execute_rate is not None}
        sk = _skew(rates, s.skew_ratio, MIN_SKEW_RATE)
        if sk:
            out.append(Symptom(PROCESSING_RATE_SKEW, c.name, None, {
                "max": _r(sk[0], 1), "min": _r(sk[1], 1), "high_tasks": sk[2], "ratio": s.skew_ratio,
                "by_task": {t: _r(v, 1) for t, v in rates.items()}}))
    return out


def detect_queue_skew(m, s):
    """Components whose instances' queues differ by more than skew.ratio (the largest
    above queue.bytes.threshold); without queue sizes, the backpressure they caused."""
    out = []
    for c in m.bolts():
        insts = m.of(c.name)
        queues = {i.task: i.queue_bytes for i in insts if i.queue_bytes is not None}
        if len(queues) >= 2:
            metric, values, floor = "queue_bytes", queues, s.queue_bytes_threshold
        else:
            metric = "backpressure"
            values = {i.task: i.backpressure for i in insts if i.backpressure is not None}
            floor = s.backpressure_threshold
        sk = _skew(values, s.skew_ratio, floor)
        if sk:
            out.append(Symptom(QUEUE_SKEW, c.name, None, {
                "metric": metric, "max": _r(sk[0]), "min": _r(sk[1]), "high_tasks": sk[2],
                "ratio": s.skew_ratio, "by_task": {t: _r(v) for t, v in values.items()}}))
    return out


def detect_low_utilization(m, s):
    """Bolts (parallelism > 1) every instance of which is busy less than low.utilization,
    with neither backpressure nor a large queue. One round's worth: the manager counts
    the rounds in a row ("sustained")."""
    out = []
    for c in m.bolts():
        insts = m.of(c.name)
        if c.parallelism < 2 or c.utilization is None:
            continue
        peak = max(i.utilization for i in insts)
        if peak >= s.low_utilization:
            continue
        if (c.backpressure or 0) > s.backpressure_threshold or (c.queue_bytes_max or 0) > s.queue_bytes_threshold:
            continue
        out.append(Symptom(LOW_UTILIZATION, c.name, None, {
            "utilization": _r(c.utilization), "peak": _r(peak), "threshold": s.low_utilization,
            "parallelism": c.parallelism}))
    return out


DETECTORS = (detect_backpressure, detect_large_queue, detect_growing_queue, detect_processing_rate_skew,
             detect_queue_skew, detect_low_utilization)


def detect(m, s):
    """Every detector's symptoms."""
    return [x for d in DETECTORS for x in d(m, s)]
