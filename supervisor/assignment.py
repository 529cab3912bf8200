"""From a cluster assignment to this host's run plan (pure logic, no I/O).

Nimbus writes ``assignments/NAME`` (docs/CLUSTER.md)::

    {"version": 3, "packing": {...PackingPlan.to_dict()...},
     "containers": {"0": {"supervisor": "h1-6700", "host": "h1", "slot": 0}, ...},
     "tmaster": "tcp://h1:6701",
     "stmgrs": {"0": {"tcp": "tcp://h1:6700"}, "1": {"tcp": "tcp://h2:6702"}, ...},
     "keys": {"0": {"public": z85, "sealed": b64, "to": "h1-6700"}, ...}}   (keys: optional)

and ``topologies/NAME`` holds ``definition``, the merged ``config`` and
``code: {digest, entry}``. A supervisor builds one run plan per assignment
version from those two documents:

* every endpoint that crosses hosts comes from the assignment as it is: the
  topology master and the ``tcp`` endpoint of *every* container;
* the ``ipc``/``ctl`` endpoints of its own containers are local socket files in
  a directory of its choosing (they never leave the host);
* ``home`` is the supervisor's data directory (logs in ``home/logs/NAME``),
  ``state_url`` the ZooKeeper the supervisor uses (the topology master writes
  ``status/NAME`` there);
* ``keys`` keeps every public key and only the secrets of its own containers, which
  nimbus sealed to this supervisor's public key (``sealed``; bittern/curve.py): no
  secret is in ZooKeeper in the clear;
* ``placed`` is each container's fencing token: the assignment version it was placed
  at (``since``; streammgr/fencing.py);
* the definition's ``source`` is pointed at the extracted code archive, so
  instances import the component classes from this host's copy.
"""
from __future__ import annotations

import copy
import os

from bittern import curve
from bittern.api.topology import TopologyDef
from bittern.loader import code_paths
from bittern.packing import PackingPlan
from bittern.runplan import RunPlan, placed_versions


class AssignmentError(ValueError):
    """The assignment or topology record cannot be turned into a plan."""


def own_containers(asg, sup_id):
    """The containers of ``asg`` placed on supervisor ``sup_id``, sorted."""
    out = []
    for c, where in ((asg or {}).get("containers") or {}).items():
        if isinstance(where, dict) and where.get("supervisor") == sup_id:
            out.append(int(c))
    return sorted(out)


def version_of(asg):
    return (asg or {}).get("version", 0)


def code_of(rec):
    """``(digest, entry)`` of a topology record."""
    code = (rec or {}).get("code") or {}
    digest, entry = code.get("digest"), code.get("entry")
    if not digest or not entry:
        raise AssignmentError("the topology record names no code archive (code.digest, code.entry)")
    return digest, entry


def entry_path(code_dir, entry):
    """The topology file inside an extracted archive; refuses an entry that
    would leave the archive."""
    parts = [p for p in str(entry).split("/") if p not in ("", ".")]
    if not parts or ".." in parts or str(entry).startswith("/"):
        raise AssignmentError(f"code entry {entry!r} is not a path inside the archive")
    path = os.path.join(code_dir, *parts)
    real, root = os.path.realpath(path), os.path.realpath(code_dir)
    if not real.startswith(root + os.sep):
        raise AssignmentError(f"code entry {entry!r} leaves the archive")
    if not os.path.isfile(path):
        raise AssignmentError(f"code entry {entry!r} is not in the archive")
    return path


def localize_source(definition, topology_file):
    """A copy of the definition dict whose ``source`` points at ``topology_file``."""
    d = copy.deepcopy(definition)
    src = dict(d.get("source") or {})
    src["file"] = topology_file
    src["sys_path"] = code_paths(topology_file)
    src.setdefault("module", "bittern_topology")
    d["source"] = src
    return d


def build_plan(name, rec, asg, sup_id, home, topology_file, ipc, state_url, own_secret=None):
    """The run plan of this supervisor's part of ``asg`` (see the module docstring).
    ``ipc`` is the directory of its local sockets; ``own_secret`` this supervisor's
    secret key, which opens its containers' sealed CURVE secrets. Returns ``(plan, own
    containers)``."""
    own = own_containers(asg, sup_id)
    if not own:
        raise AssignmentError(f"assignment of {name!r} gives supervisor {sup_id!r} no container")
    try:
        packing = PackingPlan.from_dict(asg["packing"])
        tdef = TopologyDef.from_dict(localize_source(rec["definition"], topology_file))
        tmaster = asg["tmaster"]
        remote = {int(c): e for c, e in asg["stmgrs"].items()}
        config = rec["config"]
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise AssignmentError(f"malformed assignment or topology record: {type(e).__name__}: {e}") from None
    stmgrs = {}
    for c in packing.containers:
        if c not in remote or not (remote[c] or {}).get("tcp"):
            raise AssignmentError(f"the assignment has no tcp endpoint for container {c}")
        stmgrs[c] = {"tcp": remote[c]["tcp"]}
        if c in own:
            stmgrs[c].update(ipc=f"ipc://{ipc}/c{c}", ctl=f"ipc://{ipc}/k{c}")
    missing = [c for c in own if c not in packing.containers]
    if missing:
        raise AssignmentError(f"containers {missing} are placed but not in the packing plan")
    keys = None
    if asg.get("keys"):
        keys = {}
        for c, k in asg["keys"].items():
            c, k = int(c), k if isinstance(k, dict) else {}
            secret = None
            if c in own:
                if not k.get("sealed") or own_secret is None:
                    raise AssignmentError(f"the assignment carries no sealed key for container {c}")
                try:
                    secret = curve.unseal(k["sealed"], own_secret)
                except curve.CurveError as e:
                    raise AssignmentError(f"container {c}: {e}") from None
                if curve.public_of(secret) != k.get("public"):
                    raise AssignmentError(f"container {c}: its sealed secret key does not match its public key")
            keys[c] = {"public": k.get("public"), "secret": secret}
    hosts = {int(c): w.get("host") for c, w in asg["containers"].items()}
    plan = RunPlan(name, home, tdef, packing, tmaster, stmgrs, config,
                   state_url=state_url, keys=keys, hosts=hosts, placed=placed_versions(asg))
    return plan, own
