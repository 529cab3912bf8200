"""Where monitoring clients (``bittern metrics/errors/top``, the HTTP API) get their
data: one small interface, so the same views work on a local state directory
(:class:`LocalSource`) and on a cluster (:class:`RemoteSource`, through nimbus)."""
from __future__ import annotations

import time

from .api.topology import shown_definition
from .client import TMClient
from .cluster_client import NoSuchTopology, topology_path
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
        return self._client_for(name, status["tmaster"])

    def tm_curve(self, name):
        """The CURVE keys to reach ``name``'s topology master (None: local mode, no CURVE)."""
        return None

    def _client_for(self, name, endpoint):
        """The cached client of ``name``'s topology master, anew if it moved."""
        cached = self._clients.get(name)
        if cached and cached[0] == endpoint:
            return cached[1]
        self.drop(name)
        client = TMClient(endpoint, curve=self.tm_curve(name))
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
                "logical_plan": shown_definition(rec["definition"]), "config": rec["config"],
                "physical_plan": {"tmaster": status.get("tmaster"), "containers": containers}}

    def drop(self, name):
        cached = self._clients.pop(name, None)
        if cached:
            cached[1].close()

    def close(self):
        for name in list(self._clients):
            self.drop(name)


class RemoteSource:
    """The :class:`LocalSource` interface over nimbus's read API (``/api/v1/...``,
    bittern/httpapi.py), through a :class:`~bittern.cluster_client.ClusterClient`.
    It returns what LocalSource returns: the API sorts JSON keys, so the order of
    components (by first task), tasks and stream managers is put back. A topology
    nimbus does not know raises :class:`TopologyGone`; one that exists but does not
    answer (503) raises a plain :class:`BitternError`."""

    MAX_ERRORS = 100  # the API's limit (the topology master keeps the last 100)

    def __init__(self, client):
        self.client = client

    def _get(self, name, *rest, query=None):
        try:
            return self.client.get(topology_path(name, *rest), query=query, topology=name)
        except NoSuchTopology as e:
            raise TopologyGone(f"topology {name!r} is not running ({e})") from None

    def topologies(self):
        return self.client.get("/api/v1/topologies")["topologies"]

    def topology(self, name):
        return self._get(name)

    def metrics(self, name, window="1m"):
        return local_order(self._get(name, "metrics", query={"window": window}))

    def errors(self, name, component=None, limit=20):
        limit = min(max(int(limit or 20), 1), self.MAX_ERRORS)
        doc = self._get(name, "errors", query={"component": component, "limit": limit})
        errs = [e for lst in (doc.get("components") or {}).values() for e in lst]
        errs.sort(key=lambda e: e.get("time") or 0, reverse=True)  # newest first, as the master does
        return errs[:limit]

    def drop(self, name):
        pass  # no connection per topology to drop

    def close(self):
        pass


def _by_number(d):
    return dict(sorted(d.items(), key=lambda kv: (0, int(kv[0])) if str(kv[0]).isdigit() else (1, kv[0])))


def local_order(doc):
    """A metrics document whose keys came back sorted by name, in the topology
    master's order: tasks and stream managers by number, components by their first
    task (what ``bittern metrics`` prints rows in)."""
    tasks = doc.get("tasks")
    if isinstance(tasks, dict):
        doc["tasks"] = tasks = _by_number(tasks)
    if isinstance(doc.get("stmgrs"), dict):
        doc["stmgrs"] = _by_number(doc["stmgrs"])
    comps = doc.get("components")
    if isinstance(comps, dict) and isinstance(tasks, dict):
        first = {}
        for i, view in enumerate(tasks.values()):
            first.setdefault(view.get("component") if isinstance(view, dict) else None, i)
        doc["components"] = dict(sorted(comps.items(), key=lambda kv: first.get(kv[0], len(first))))
    return doc
