"""The topology master's metrics documents (mixed into :class:`streammgr.tmaster.TopologyMaster`):
``metrics_doc`` for the live view, the HTTP API and the health manager, ``metrics_reply``
for the CLI's report, and the throughput samples and checkpoint figures they carry."""
from __future__ import annotations

import os
import time


class TmMetrics:
    def metrics_doc(self, window="1m"):
        """The topology's metrics over ``window``: per component, per task, per stream
        manager, and the recent throughput (for the live view and the HTTP API)."""
        now = time.monotonic()
        packing = self.plan.packing
        tasks = {}
        for t in sorted(self.all_tasks):
            v = self.metrics.task_view(t, window, now)
            v["container"] = packing.task_container[t]
            v["index"] = packing.task_index[t]
            # what its stream manager measures of it: bytes queued toward it, seconds its
            # queue held the stream manager in backpressure (cumulative; the health manager's)
            by = self.stmgrs.get(v["container"]) or {}
            v["queued_bytes"] = (by.get("queued_by_task") or {}).get(str(t))
            v["backpressure_initiated_secs"] = (by.get("backpressure_secs_by_task") or {}).get(str(t))
            tasks[t] = v
        comps = self.metrics.component_views(tasks)
        for name, c in comps.items():
            c["kind"] = self.kinds.get(name)
        stmgrs = {}
        for c in sorted(self.containers):
            s = self.stmgrs.get(c) or {}
            proc, counters = s.get("proc") or {}, s.get("counters") or {}
            stmgrs[str(c)] = {"alive": c in self.stmgrs, "pid": s.get("pid"),
                              "backpressure": bool(s.get("backpressure")),
                              "backpressure_secs": s.get("backpressure_secs") or 0.0,
                              "queued_bytes": s.get("queued") or 0,
                              "queued_by_task": s.get("queued_by_task") or {},
                              "backpressure_secs_by_task": s.get("backpressure_secs_by_task") or {},
                              "dropped": counters.get("dropped", 0),
                              # what it refused at its tcp port: handshakes (denied), messages (malformed)
                              "malformed": counters.get("malformed", 0), "denied": counters.get("denied", 0),
                              "cpu_percent": proc.get("__cpu-percent", 0.0),
                              "rss_bytes": proc.get("__rss-bytes", 0)}
        points = list(self.throughput)
        series = []
        for (t0, e0, x0), (t1, e1, x1) in zip(points, points[1:]):
            dt = t1 - t0
            if dt > 0:
                series.append({"ago_secs": round(now - t1, 1), "emit_rate": max(0, e1 - e0) / dt,
                               "execute_rate": max(0, x1 - x0) / dt})
        mine = self.procstats.read()
        return {"topology": self.name, "phase": self.phase, "active": self.active, "window": window,
                "health": self.health_doc,
                "reliability": self.plan.config["topology.reliability.mode"],
                "containers": len(self.containers), "uptime_secs": now - self.started,
                "started_at": self.started_wall,
                "backpressure": any(s["backpressure"] for s in stmgrs.values()),
                "components": comps, "tasks": {str(t): v for t, v in tasks.items()}, "stmgrs": stmgrs,
                "tmaster": {"pid": os.getpid(), "cpu_percent": mine["__cpu-percent"],
                            "rss_bytes": mine["__rss-bytes"], "malformed": self.counters["malformed"],
                            "denied": self.counters["denied"]},
                "throughput": series, "errors": len(self.errors),
                **({"checkpoints": self.checkpoint_report()} if self.ckpt is not None else {}),
                **({"healthmgr": self.health.describe()} if self.health is not None else {})}

    def sample_throughput(self, now):
        emitted = executed = 0
        for task, m in self.metrics.task_totals().items():
            if self.kinds.get(self.metrics.task_component[task]) == "spout":
                emitted += m.get("__emit-count", 0)
            else:
                executed += m.get("__execute-count", 0)
        self.throughput.append((now, emitted, executed))

    def checkpoint_report(self):
        """The coordinator's metrics, plus what a bounded run waits for: ``committed``,
        the newest checkpoint whose output every sink task made visible (the last complete
        one when there is no sink), and who holds up the one in flight."""
        m = self.ckpt.metrics()
        if self.sinks:
            m["committed"] = min(self.sink_commits.get(t, 0) for t in self.sinks) or None
            m["uncommitted_sinks"] = sorted(t for t in self.sinks
                                            if self.sink_commits.get(t, 0) < (m["last_complete"] or 0))
        else:
            m["committed"], m["uncommitted_sinks"] = m["last_complete"], []
        comp = self.plan.packing.task_component
        m["waiting_for"] = [[t, comp.get(t)] for t in m["waiting_for"]]
        m["uncommitted_sinks"] = [[t, comp.get(t)] for t in m["uncommitted_sinks"]]
        return m

    def metrics_reply(self):
        def total(key):
            return sum((s.get("counters") or {}).get(key, 0) for s in self.stmgrs.values())
        rep = {"tasks": {str(t): m for t, m in self.metrics.task_totals().items()},
               "components": self.metrics.component_totals(), "stmgr_dropped": total("dropped"),
               "stmgr_malformed": total("malformed"), "stmgr_denied": total("denied"),
               "tmaster_malformed": self.counters["malformed"], "tmaster_denied": self.counters["denied"],
               "stmgr_queued": sum(s.get("queued") or 0 for s in self.stmgrs.values()),
               "errors": self.errors[-20:]}
        if self.ckpt is not None:
            rep["checkpoints"] = self.checkpoint_report()
        return rep
