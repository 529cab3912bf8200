"""Synthetic metrics documents with event time, built with the topology master's own
MetricsStore (so a renamed view key breaks the tests that use them), in the shape of
TopologyMaster.metrics_doc.

The topology: spout ``events`` (tasks 1, 2: task 2's bounded source has finished, its
watermark is +inf), windowed bolt ``window`` (tasks 3, 4, 5: task 5 has no watermark
yet), and bolt ``sink`` (task 6) on processing time, which reports no event-time metric.
"""
from __future__ import annotations

import json

from bittern.httpapi import dump_json
from bittern.monitor import local_order
from streammgr.metrics import MetricsStore

INF = float("inf")
T0 = 1700000000.5  # 2023-11-14T22:13:20.5Z
TASKS = {1: "events", 2: "events", 3: "window", 4: "window", 5: "window", 6: "sink"}
KINDS = {"events": "spout", "window": "bolt", "sink": "bolt"}

# what each task reports besides the usual counters (scaled by the report number
# for counters); a name left out is absent, as an instance without event time leaves it
EVENT_METRICS = {
    1: {"__output-watermark": T0, "__watermark-lag": 2.5, "__bad-timestamp-count": 1},
    2: {"__output-watermark": INF, "__watermark-lag": None, "__bad-timestamp-count": 0},
    3: {"__input-watermark": T0 + 10, "__output-watermark": T0 + 10, "__watermark-lag": 3.0,
        "__open-windows": 2, "__late-count": 1, "__too-late-count": 0, "__windows-fired-count": 4,
        "__timers-fired-count": 4},
    4: {"__input-watermark": T0 + 4.75, "__output-watermark": T0, "__watermark-lag": 8.0,
        "__open-windows": 3, "__late-count": 2, "__too-late-count": 4, "__windows-fired-count": 6,
        "__timers-fired-count": 7},
    5: {"__input-watermark": None, "__output-watermark": None, "__watermark-lag": None,
        "__open-windows": 0, "__late-count": 0, "__too-late-count": 0},
    6: {},
}


def task_metrics(task, scale, event_time=True):
    m = {"__emit-count": 100 * task * scale, "__execute-count": 50 * task * scale,
         "__ack-count": 10 * scale, "__execute-latency-count": 50 * task * scale,
         "__execute-latency-sum-ms": 5.0 * task * scale, "__cpu-percent": 1.5 * task, "__rss-bytes": 1000 * task}
    if event_time:
        for k, v in EVENT_METRICS[task].items():
            m[k] = v * scale if k.endswith("-count") else v
    return m


def store(event_time=True):
    """A MetricsStore after two reports of every task, 2 s apart."""
    s = MetricsStore(TASKS, started=0.0)
    for scale, now in ((1, 10.0), (2, 12.0)):
        for t in TASKS:
            s.update(t, task_metrics(t, scale, event_time), pid=100 + t, now=now)
    return s


def doc(event_time=True, window="1m", name="ev"):
    """A metrics document as the topology master sends it (floats, infinities kept)."""
    s = store(event_time)
    tasks = {}
    for t in TASKS:
        v = s.task_view(t, window, now=12.0)
        v["container"], v["index"] = t % 2, 0
        tasks[t] = v
    comps = s.component_views(tasks)
    for c, v in comps.items():
        v["kind"] = KINDS[c]
    stmgrs = {str(c): {"alive": True, "pid": 200 + c, "backpressure": False, "backpressure_secs": 0.0,
                       "queued_bytes": 0, "dropped": 0, "cpu_percent": 1.0, "rss_bytes": 2 ** 20}
              for c in (0, 1)}
    return {"topology": name, "phase": "RUNNING", "active": True, "window": window,
            "reliability": "ATLEAST_ONCE", "containers": 2, "uptime_secs": 12.0, "started_at": 1.7e9,
            "backpressure": False, "components": comps, "tasks": {str(t): v for t, v in tasks.items()},
            "stmgrs": stmgrs, "tmaster": {"pid": 99, "cpu_percent": 0.5, "rss_bytes": 2 ** 21},
            "throughput": [], "errors": 0}


def remote_doc(event_time=True, window="1m"):
    """The same document as a RemoteSource gets it: through the HTTP API's JSON."""
    return local_order(json.loads(dump_json(doc(event_time, window))))
