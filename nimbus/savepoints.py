"""Savepoints in cluster mode, carried out by the leader nimbus (the format and the
logic are bittern/savepoint.py, the same code local mode runs in the CLI).

Why nimbus and not the CLI: the CLI of a cluster holds only the API token, it may
run on a host that neither mounts the shared checkpoint directory nor may reach
ZooKeeper (whose digest credentials stay with the daemons), and the checkpoint
metadata a restore writes is the commit point of that restore: the leader writes it,
checked against its lease, like every other state change. So nimbus reads, checks
and copies the savepoint files itself, from and to ``bittern.checkpoint.dir`` (which
must be an absolute path on storage every host, nimbus included, shares), and the
savepoint directory the CLI names is a path on the nimbus host.

* ``POST /api/v1/topologies/NAME/savepoint`` ``{dir, deactivate}``: :func:`take`.
* A submission whose body has ``savepoint: {path, allow_non_restored_state}``:
  :func:`check_submission` before anything is written (a bad savepoint is a 400
  naming it, the component and the mismatch), then :func:`install` between the
  creation of the topology record (marked ``restoring``, so the scheduler leaves it
  alone) and its scheduling: the savepoint is the new submission's latest complete
  checkpoint before any of its processes starts.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass

from bittern import savepoint as sp
from bittern.api.topology import TopologyDef
from bittern.checkpoint import CheckpointStore, checkpoint_settings
from bittern.client import TMClient
from bittern.errors import BitternError
from bittern.wire import Op

from .daemon import ApiError

log = logging.getLogger("bittern.nimbus.savepoints")

SAVEPOINTS_DIR = "_savepoints"  # under bittern.checkpoint.dir: no topology has this name (NAME_RE)
GONE_PROBE_SECS = 0.5  # one probe of a killed topology master
GONE_WAIT_SECS = 15.0  # a restore waits this long for the killed topology master of its name
KILLED_MEMORY_SECS = 300.0


def shared_store(state, name, conf, status, where, purpose="savepoints", hint=""):
    """``(store, settings)`` of topology ``name`` in its shared checkpoint directory;
    ApiError(status) naming ``where`` when the config has none nimbus can use
    (``purpose``: what goes through it, ``hint``: where else it may be set)."""
    root = os.path.expanduser(str(conf.get("bittern.checkpoint.dir") or ""))
    if not root:
        raise ApiError(status, f"{where}: topology {name!r} sets no bittern.checkpoint.dir; in cluster mode "
                               f"{purpose} go through the checkpoint directory every host and nimbus share "
                               f"(--config bittern.checkpoint.dir=/shared/path{hint})")
    if not os.path.isabs(root):
        raise ApiError(status, f"{where}: bittern.checkpoint.dir {root!r} of topology {name!r} must be an "
                               f"absolute path (every host resolves it)")
    try:
        settings = checkpoint_settings(conf)
        return CheckpointStore(settings.dir, state, name, settings.keep), settings
    except BitternError as e:
        raise ApiError(status, f"{where}: {e}") from None


def _absolute(value, what):
    if not isinstance(value, str) or not value or not os.path.isabs(value) or "\0" in value:
        raise ApiError(400, f"{what} {value!r} must be an absolute path on the nimbus host")
    return os.path.normpath(value)


def take(nimbus, name, body):
    """``POST /api/v1/topologies/NAME/savepoint``: a savepoint of the running topology
    in ``body["dir"]`` (default ``<checkpoint dir>/_savepoints/NAME-<time>``), after
    deactivating it with ``body["deactivate"]`` (``kill --savepoint``)."""
    n = nimbus
    n.require_leader()
    rec = n.state.topology(name)
    if rec is None:
        raise ApiError(404, f"no topology named {name!r}")
    target = body.get("dir")
    if target is not None:
        target = _absolute(target, "savepoint directory")
    deactivate = body.get("deactivate", False)
    if not isinstance(deactivate, bool):
        raise ApiError(400, f"deactivate must be true or false, got {deactivate!r}")
    conf = rec.get("config") or {}
    try:
        sp.require_exactly_once(name, conf)
    except sp.SavepointError as e:
        raise ApiError(409, str(e)) from None
    store, settings = shared_store(n.state, name, conf, 409, f"savepoint of {name!r}")
    phase = n.source.phase(name, rec)
    status = n.state.status(name) or {}
    if phase not in ("RUNNING", "PAUSED") or not status.get("tmaster"):
        raise ApiError(409, f"topology {name!r} is {phase}: a savepoint is taken of a running topology")
    target = target or os.path.join(settings.dir, SAVEPOINTS_DIR, sp.default_name(name))
    try:
        sp.check_target(target)
        tdef = TopologyDef.from_dict(rec["definition"])
        with TMClient(status["tmaster"], curve=n.source.tm_curve(name)) as tm:
            doc = sp.take(tm, store, tdef, conf, settings.key_groups, target,
                          deactivate=(lambda: n.set_active(name, False)) if deactivate else None,
                          say=lambda line: log.info("savepoint of %s: %s", name, line))
    except ApiError:
        raise
    except sp.SavepointError as e:
        hint = "" if os.path.isdir(store.dir) else (f" (nimbus does not see {store.dir}: bittern.checkpoint.dir "
                                                    f"must be shared with the nimbus host)")
        raise ApiError(409, f"{e}{hint}") from None
    except BitternError as e:  # the topology master does not answer
        raise ApiError(409, f"savepoint of {name!r}: {e}") from None
    log.info("topology %s: checkpoint %s saved as savepoint %s", name, doc["checkpoint"], target)
    return {"name": name, "path": target, "checkpoint": doc["checkpoint"],
            "stateful": sorted(c for c, v in doc["components"].items() if v["stateful"])}


@dataclass
class Restore:
    path: str
    doc: dict  # the checked manifest
    store: CheckpointStore


def check_submission(nimbus, name, tdef, conf, req):
    """The savepoint a submission asks to start from (``req``: ``{path,
    allow_non_restored_state}`` or None), read and checked against the topology:
    a :class:`Restore`, or None. Writes nothing."""
    if req is None:
        return None
    if not isinstance(req, dict):
        raise ApiError(400, f"topology {name!r}: savepoint must be {{path, allow_non_restored_state}}")
    path = _absolute(req.get("path"), "savepoint")
    allow = req.get("allow_non_restored_state", False)
    if not isinstance(allow, bool):
        raise ApiError(400, f"allow_non_restored_state must be true or false, got {allow!r}")
    try:
        doc = sp.check_restore(path, tdef, conf, allow)
    except sp.SavepointError as e:
        raise ApiError(400, str(e)) from None
    store, _ = shared_store(nimbus.state, name, conf, 400, f"savepoint {path}")
    return Restore(path, doc, store)


def install(nimbus, name, restore, rec):
    """Put the checked savepoint into the shared store of the just-created submission
    ``rec`` (its record marked ``restoring``), then clear the mark so the scheduler
    places it. On failure everything of the submission is removed."""
    n = nimbus
    try:
        cid = n._write(lambda: sp.install_fresh(restore.path, restore.doc, restore.store, n.state,
                                                rec["submitted_at"]))
        if n.state.topology(name) is None:
            raise ApiError(410, f"topology {name!r} was killed while its savepoint was installed")
        done = {k: v for k, v in rec.items() if k != "restoring"}
        done["restored_from"] = {"savepoint": restore.path, "checkpoint": cid,
                                 "topology": restore.doc["topology"]}
        from .store import prepare
        done["store"] = prepare(n, name, restore.store)  # nimbus's probe, in the store as installed
        n._write(lambda: n.state.put(f"topologies/{name}", done))
    except Exception as e:
        try:
            if n.state.topology(name) is not None:
                n.kill(name)
            restore.store.delete_all()
        except Exception:  # noqa: BLE001 - the leader's next reconcile fails what is left
            log.exception("topology %s: cannot undo its submission", name)
        if isinstance(e, ApiError):
            raise
        raise ApiError(422, f"savepoint {restore.path}: cannot install it for {name!r}: "
                            f"{type(e).__name__}: {e}") from None
    log.info("topology %s starts from savepoint %s (checkpoint %s of %r)", name, restore.path, cid,
             restore.doc["topology"])
    return cid


# -- a killed topology master must be gone before a restore under its name -----------------
# (kill in cluster mode returns once the records are gone; the supervisors stop the
# processes a moment later. A topology master still running could record a checkpoint
# of the old topology, or prune, in the checkpoint metadata of the restored one.)

def remember_killed(nimbus, name, status):
    """Note the topology master of ``name`` (from its status) as it is killed; forget
    notes older than KILLED_MEMORY_SECS."""
    now = time.monotonic()
    for k, v in list(nimbus.killed.items()):
        if now - v[2] > KILLED_MEMORY_SECS:
            nimbus.killed.pop(k, None)
    if status.get("tmaster"):
        nimbus.killed[name] = (status["tmaster"], status.get("pid"), now, nimbus.source.tm_curve(name))


def still_answers(name, endpoint, pid, curve=None):
    """Whether the topology master ``pid`` of ``name`` still answers at ``endpoint``
    (another process answering there, e.g. a new topology's on the same slot, is not it)."""
    try:
        with TMClient(endpoint, curve=curve) as tm:
            doc = tm.request(Op.GET_METRICS, timeout=GONE_PROBE_SECS)
    except BitternError:
        return False
    return doc.get("topology") == name and (pid is None or (doc.get("tmaster") or {}).get("pid") == pid)


def wait_killed(nimbus, name, secs):
    """Wait for the topology master of ``name``, killed by this nimbus lately, to stop
    answering; True when it did (or none is known), False after ``secs``."""
    note = nimbus.killed.get(name)
    if note is None:
        return True
    endpoint, pid, _, keys = note
    deadline = time.monotonic() + secs
    while still_answers(name, endpoint, pid, keys):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    nimbus.killed.pop(name, None)
    return True
