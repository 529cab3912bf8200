"""Where monitoring clients (``bittern metrics/errors/top``, the HTTP API) get their
data: one small interface, so the same views work on a local state directory now
and on a cluster later."""
from __future__ import annotations

import time

from .client import TMClient
from .errors import BitternError
from .proc import pid_alive
from .wire import Op


class TopologyGone(BitternError):
    """The topology is not running (never was, was killed, or its processes died)."""


class LocalSource:
    """Reads topologies from a local state manager and asks their topology masters."""

    def __init__(self, state, timeout=5.0):
        self.state = state
        self.timeout = timeout
        self._clients = {}  # name -> (endpoint, TMClient)

    def topologies(self):
        rows = []
        for name in self.state.topologies():
            rec = self.state.topology(name)
            if rec is None:
                continue
            asg = self.state.assignment(name) or {}
            status = self.state.status(name) or {}
            sup = asg.get("supervisor")
            phase = "DEAD" if sup and not pid_alive(sup) else status.get("phase", "STARTING")
            if phase == "RUNNING" and not status.get("active", True):
                phase = "PAUSED"
            rows.append({"name": name, "state": phase,
                         "containers": len((asg.get("packing") or {}).get("containers", {})),
                         "tasks": sum(c["par"] for c in rec["definition"]["components"]),
                         "uptime_secs": time.time() - rec.get("submitted_at", time.time()),
                         "reliability": rec["config"].get("topology.reliability.mode"),
                         "file": rec.get("file")})
        return rows

    def _client(self, name):
        rec = self.state.topology(name)
        status = self.state.status(name) or {}
        sup = (self.state.assignment(name) or {}).get("supervisor")
        if rec is None or not status.get("tmaster") or (sup and not pid_alive(sup)):
            self.drop(name)
            raise TopologyGone(f"topology {name!r} is not running")
        endpoint = status["tmaster"]
        cached = self._clients.get(name)
        if cached and cached[0] == endpoint:
            return cached[1]
        self.drop(name)
        client = TMClient(endpoint)
        self._clients[name] = (endpoint, client)
        return client

    def _ask(self, name, op, **fields):
        client = self._client(name)
        try:
            return client.request(op, timeout=self.timeout, **fields)
        except BitternError:
            self.drop(name)  # a fresh socket next time (the master may have restarted)
            if self.state.topology(name) is None:
                raise TopologyGone(f"topology {name!r} is not running") from None
            raise

    def metrics(self, name, window="1m"):
        doc = self._ask(name, Op.GET_METRICS, window=window)
        doc.pop("req", None)
        doc.pop("op", None)
        return doc

    def errors(self, name, component=None, limit=20):
        return self._ask(name, Op.ERRORS, component=component, limit=limit)["errors"]

    def topology(self, name):
        """Logical plan, physical plan, config and state of one topology."""
        rec = self.state.topology(name)
        if rec is None:
            raise TopologyGone(f"topology {name!r} is not running")
        asg = self.state.assignment(name) or {}
        procs = (self.state.processes(name) or {}).get("procs", {})
        status = self.state.status(name) or {}
        packing = asg.get("packing") or {}
        containers = {}
        for c, tasks in (packing.get("containers") or {}).items():
            containers[c] = {"host": "127.0.0.1", "stmgr": (asg.get("stmgrs") or {}).get(c),
                             "stmgr_pid": (procs.get(f"stmgr-{c}") or {}).get("pid"),
                             "tasks": [{"task": t, "component": packing["tasks"][str(t)][0],
                                        "index": packing["tasks"][str(t)][1],
                                        "pid": (procs.get(f"instance-{t}") or {}).get("pid"),
                                        "restarts": (procs.get(f"instance-{t}") or {}).get("restarts", 0)}
                                       for t in tasks]}
        phase = status.get("phase", "STARTING")
        if phase == "RUNNING" and not status.get("active", True):
            phase = "PAUSED"
        if asg.get("supervisor") and not pid_alive(asg["supervisor"]):
            phase = "DEAD"
        return {"name": name, "state": phase, "submitted_at": rec.get("submitted_at"),
                "logical_plan": rec["definition"], "config": rec["config"],
                "physical_plan": {"tmaster": status.get("tmaster"), "containers": containers}}

    def drop(self, name):
        cached = self._clients.pop(name, None)
        if cached:
            cached[1].close()

    def close(self):
        for name in list(self._clients):
            self.drop(name)
