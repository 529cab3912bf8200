"""Synthetic metrics documents for the health manager's tests (the shape of
TopologyMaster.metrics_doc, plus the per-instance backpressure and queue fields
the health manager reads)."""
from __future__ import annotations


def spout(throttled=0.0, rate=1000.0, cpu=30.0):
    return {"kind": "spout", "backpressure_fraction": throttled, "emit_rate": rate, "cpu_percent": cpu}


def bolt(bp=0.0, q=0, rate=100.0, cpu=50.0, capacity=None, **extra):
    v = {"kind": "bolt", "backpressure_initiated_fraction": bp, "queued_bytes": q, "execute_rate": rate,
         "cpu_percent": cpu}
    if capacity is not None:
        v.update(capacity=capacity, execute_latency_count=100)
    v.update(extra)
    return v


def doc(comps, uptime=600.0, window=60.0):
    """``comps``: {component: [instance view, ...]} -> a metrics document; tasks are
    numbered in order from 1, all in container 0, pid 1000 + task."""
    tasks, components, task = {}, {}, 0
    for name, insts in comps.items():
        kind = insts[0].get("kind", "bolt") if insts else "bolt"
        components[name] = {"kind": kind, "tasks": len(insts)}
        for v in insts:
            task += 1
            view = {"component": name, "container": 0, "index": task, "pid": 1000 + task,
                    "window_secs": window, "backpressure_fraction": 0.0, "capacity": 0.0,
                    "execute_latency_count": 0}
            view.update({k: x for k, x in v.items() if k != "kind"})
            tasks[str(task)] = view
    return {"topology": "t", "window": "1m", "uptime_secs": uptime, "components": components, "tasks": tasks,
            "stmgrs": {"0": {"alive": True, "backpressure": False, "backpressure_secs": 0.0,
                             "queued_bytes": 0}}}


def topo(split, count, throttled=0.0, uptime=600.0):
    """spout -> split -> count, the bolts given as instance views."""
    return doc({"spout": [spout(throttled)], "split": split, "count": count}, uptime=uptime)


CONF = {"topology.healthmgr.enabled": True, "topology.healthmgr.interval.secs": 60.0,
        "topology.healthmgr.post.action.wait.secs": 60.0}
