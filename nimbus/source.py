"""What nimbus's HTTP API reads: the monitoring source of local mode, over ZooKeeper.

Local mode tells a live topology by its supervisor's pid; in a cluster that pid is
on another host, so here a topology is live when its assignment's supervisors are
registered and its topology master has written its status. Metrics and errors
come from the topology master over its tcp endpoint, as in local mode.
"""
from __future__ import annotations

import time

from bittern import topostatus
from bittern.api.topology import shown_definition
from bittern.monitor import LocalSource, TopologyGone


class ClusterSource(LocalSource):
    """``keypair``: nimbus's own ``(public, secret)``; topology masters admit it (they
    read nimbus/hosts), and its CURVE server key is container 0's public key."""

    def __init__(self, state, keypair=None, timeout=5.0):
        super().__init__(state, timeout=timeout)
        self.keypair = keypair

    def tm_curve(self, name, asg=None):
        asg = asg if asg is not None else (self.state.assignment(name) or {})
        server = ((asg.get("keys") or {}).get("0") or {}).get("public")
        return (server, *self.keypair) if server and self.keypair else None

    def live_supervisors(self):
        return set(self.state.children("supervisors"))

    def phase(self, name, rec=None, asg=None, status=None, live=None):
        rec = rec if rec is not None else self.state.topology(name)
        if rec is None:
            return None
        if rec.get("state") == "FAILED":
            return "FAILED"
        asg = asg if asg is not None else self.state.assignment(name)
        status = status if status is not None else (self.state.status(name) or {})
        if asg is None:
            return "PENDING" if status.get("phase") != "FAILED" else "FAILED"
        live = live if live is not None else self.live_supervisors()
        if any(w["supervisor"] not in live for w in (asg.get("containers") or {}).values()):
            return "RESCHEDULING"
        if status.get("tmaster") != asg.get("tmaster"):
            return "STARTING"  # the status of an earlier placement
        phase = status.get("phase", "STARTING")
        if phase == "RUNNING" and not status.get("active", True):
            phase = "PAUSED"
        return phase

    def topologies(self):
        rows = []
        live = self.live_supervisors()
        for name in self.state.topologies():
            rec = self.state.topology(name)
            if rec is None:
                continue
            asg = self.state.assignment(name) or None
            status = self.state.status(name) or {}
            rows.append({"name": name, "state": self.phase(name, rec, asg, status, live),
                         "containers": len(((asg or {}).get("packing") or {}).get("containers", {})),
                         "tasks": sum(c["par"] for c in rec["definition"]["components"]),
                         "uptime_secs": time.time() - rec.get("submitted_at", time.time()),
                         "reliability": rec["config"].get("topology.reliability.mode"),
                         "file": (rec.get("code") or {}).get("entry"),
                         "error": (rec.get("error") or {}).get("error")})
            topostatus.annotate(rows[-1], _current(status, asg))  # DEGRADED, with the reason and since when
        return rows

    def _client(self, name):
        phase = self.phase(name)
        status = self.state.status(name) or {}
        if phase not in ("RUNNING", "PAUSED") or not status.get("tmaster"):
            self.drop(name)
            raise TopologyGone(f"topology {name!r} is not running" if phase is None
                               else f"topology {name!r} is {phase}")
        return self._client_for(name, status["tmaster"])

    def topology(self, name):
        rec = self.state.topology(name)
        if rec is None:
            raise TopologyGone(f"topology {name!r} is not running")
        asg = self.state.assignment(name) or {}
        status = self.state.status(name) or {}
        packing = asg.get("packing") or {}
        containers = {}
        for c, tasks in (packing.get("containers") or {}).items():
            where = (asg.get("containers") or {}).get(c) or {}
            containers[c] = {"host": where.get("host"), "supervisor": where.get("supervisor"),
                             "slot": where.get("slot"), "stmgr": (asg.get("stmgrs") or {}).get(c),
                             "tasks": [{"task": t, "component": packing["tasks"][str(t)][0],
                                        "index": packing["tasks"][str(t)][1]} for t in tasks]}
        return topostatus.annotate({
            "name": name, "state": self.phase(name, rec, asg or None, status),
            "submitted_at": rec.get("submitted_at"), "version": asg.get("version"),
            "logical_plan": shown_definition(rec["definition"]), "config": rec["config"], "error": rec.get("error"),
            "physical_plan": {"tmaster": asg.get("tmaster"), "containers": containers}}, _current(status, asg))


def _current(status, asg):
    """``status`` if it is the topology master's of the current placement, else None."""
    return status if status and asg and status.get("tmaster") == asg.get("tmaster") else None
