"""The run plan: everything a process of a running topology needs to start.

The supervisor writes one per topology (definition, packing, endpoints, merged
config) and passes its path to the topology master, stream managers and
instances, so none of them needs the state manager to boot.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass

from .api.topology import TopologyDef
from .packing import PackingPlan


@dataclass
class RunPlan:
    name: str
    home: str
    topology: TopologyDef
    packing: PackingPlan
    tmaster: str  # tcp endpoint of the topology master
    stmgrs: dict  # container -> {"tcp": endpoint for peers, "ipc": endpoint for instances}
    config: dict  # merged topology config
    state_url: str | None = None  # where the state manager is; None: LocalStateManager(home)
    keys: dict | None = None  # container -> {"public": z85, "secret": z85 or None} (CURVE)
    hosts: dict | None = None  # container -> host (cluster mode)
    placed: dict | None = None  # container -> the assignment version it was placed at (cluster mode)

    def placed_at(self, container):
        """The assignment version ``container`` was placed at (0: not versioned, local mode)."""
        return int((self.placed or {}).get(container, 0))

    def component_config(self, component):
        """Topology config overlaid with the component's own config."""
        conf = dict(self.config)
        conf.update(self.topology.components[component].config)
        return conf

    def to_dict(self):
        d = {"name": self.name, "home": self.home, "topology": self.topology.to_dict(),
             "packing": self.packing.to_dict(), "tmaster": self.tmaster,
             "stmgrs": {str(c): e for c, e in self.stmgrs.items()}, "config": self.config}
        if self.state_url is not None:
            d["state_url"] = self.state_url
        if self.keys is not None:
            d["keys"] = {str(c): k for c, k in self.keys.items()}
        if self.hosts is not None:
            d["hosts"] = {str(c): h for c, h in self.hosts.items()}
        if self.placed is not None:
            d["placed"] = {str(c): v for c, v in self.placed.items()}
        return d

    @staticmethod
    def from_dict(d):
        keys, hosts, placed = d.get("keys"), d.get("hosts"), d.get("placed")
        return RunPlan(d["name"], d["home"], TopologyDef.from_dict(d["topology"]),
                       PackingPlan.from_dict(d["packing"]), d["tmaster"],
                       {int(c): e for c, e in d["stmgrs"].items()}, d["config"],
                       state_url=d.get("state_url"),
                       keys=None if keys is None else {int(c): k for c, k in keys.items()},
                       hosts=None if hosts is None else {int(c): h for c, h in hosts.items()},
                       placed=None if placed is None else {int(c): int(v) for c, v in placed.items()})

    def save(self, path):
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".plan-")
        with os.fdopen(fd, "w") as f:
            json.dump(self.to_dict(), f)
        os.replace(tmp, path)

    @staticmethod
    def load(path):
        with open(path) as f:
            return RunPlan.from_dict(json.load(f))


def placed_versions(asg):
    """``{container: the assignment version it was placed at}`` of an assignment document
    (docs/CLUSTER.md: each container's ``since``; a document without it: its version)."""
    version = int((asg or {}).get("version") or 0)
    return {int(c): int(w.get("since") or version) for c, w in ((asg or {}).get("containers") or {}).items()}
