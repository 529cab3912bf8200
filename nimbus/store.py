"""The shared checkpoint store of exactly-once topologies in cluster mode, nimbus's side.

The checkpoints of an EFFECTIVELY_ONCE topology on a cluster must live where every
container reaches them: a task saves its state on its own host and the topology
master, in container 0, checks every task's file before it records a checkpoint
complete. So nimbus:

* refuses (400, naming ``bittern.checkpoint.dir``) an exactly-once submission that
  has no absolute ``bittern.checkpoint.dir`` of its own and finds no cluster-wide one
  in nimbus's configuration (``--config-file`` / ``--config``, :func:`load_cluster_config`);
  the cluster's default is written into the recorded config, so every process, the
  savepoints and ``kill`` use the same directory;
* prepares the store before the topology record exists (:func:`prepare`): whatever
  the name left there goes, the epoch record names this submission (so the topology
  master does not wipe the store, probes included, at its first start), and nimbus
  writes and reads back its own probe (it must see the store too: it removes the
  files at ``kill`` and copies savepoints); the probe's nonce goes into the record
  (``store: {probe}``) for the topology master to check;
* at start, the stream manager of every container writes its probe and the topology
  master reads them all back before the topology is RUNNING (streammgr/); a failure
  fails the start-up, which the submission answers as a 422 in one line;
* at ``kill``, waits for the topology master to stop answering and then removes the
  checkpoint files and their metadata (:func:`remove`).

See docs/CHECKPOINT_STORE.md for what the store must guarantee.
"""
from __future__ import annotations

import logging
import os
import time
import tomllib

from bittern.ckptprobe import check_probe, write_probe
from bittern.config import EFFECTIVELY_ONCE, parse_overrides
from bittern.errors import ConfigError

from .daemon import ApiError
from .savepoints import shared_store

log = logging.getLogger("bittern.nimbus.store")

KEY = "bittern.checkpoint.dir"
CLUSTER_KEYS = (KEY,)  # what nimbus's configuration may set
CLIENT_KEYS = ("nimbus", "token_file")  # the CLI's keys, when one cluster.toml serves both: ignored
QUIET_SECS = 0.5  # kill: how long after the removal nothing may reappear (a task's last write)
HINT = ", or bittern.checkpoint.dir in nimbus's --config-file for the whole cluster"


def _flatten(doc, prefix=""):
    out = {}
    for k, v in doc.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def load_cluster_config(path=None, overrides=()):
    """Nimbus's cluster-wide settings: the TOML file ``path`` (dotted keys, quoted or as
    tables), then ``overrides`` (``K=V`` strings). Raises ConfigError in one line."""
    conf = {}
    if path:
        try:
            with open(path, "rb") as f:
                conf = _flatten(tomllib.load(f))
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise ConfigError(f"nimbus config file {path!r}: {e}") from None
    conf.update(parse_overrides(overrides))
    out = {}
    for key, val in conf.items():
        if key in CLIENT_KEYS:
            continue
        if key not in CLUSTER_KEYS:
            raise ConfigError(f"nimbus config: unknown key {key!r} (nimbus takes {', '.join(CLUSTER_KEYS)})")
        if not isinstance(val, str) or not os.path.isabs(val) or "\0" in val:
            raise ConfigError(f"nimbus config: {key} must be an absolute path on storage every host and nimbus "
                              f"share, got {val!r}")
        out[key] = os.path.normpath(val)
    return out


def exactly_once(conf):
    return conf.get("topology.reliability.mode") == EFFECTIVELY_ONCE


def use_default(nimbus, conf):
    """An exactly-once submission's ``conf`` without a ``bittern.checkpoint.dir`` of its own
    gets the cluster's (the topology's own wins)."""
    default = nimbus.cluster_conf.get(KEY)
    if exactly_once(conf) and not conf.get(KEY) and default:
        conf[KEY] = default


def resolve(nimbus, name, conf):
    """The checkpoint store an exactly-once submission will use (a CheckpointStore), or None
    for another mode (:func:`use_default` first). ApiError 400 naming the key when there is
    no absolute directory."""
    if not exactly_once(conf):
        return None
    use_default(nimbus, conf)
    return shared_store(nimbus.state, name, conf, 400, "exactly once", purpose="exactly-once checkpoints",
                        hint="" if nimbus.cluster_conf.get(KEY) else HINT)[0]


def prepare(nimbus, name, store, submitted_at=None):
    """Make ``store`` ready for a new submission of ``name`` before its record exists (or, from
    a savepoint, once the savepoint is installed: ``submitted_at`` None keeps what is there):
    what the name left is deleted, the epoch record names this submission, and nimbus's
    probe is written and read back. Returns ``{"probe": nonce}`` for the record; ApiError
    400 naming the path when nimbus cannot write or read the store."""
    if submitted_at is not None:
        store.delete_all()
        nimbus.state.put(f"{store.meta}/epoch", {"epoch": 0, "submitted_at": submitted_at})
    probe = write_probe(store.root, name, "nimbus", by=f"nimbus {nimbus.url}")
    why = probe.get("error") or check_probe(probe["path"], probe["nonce"])
    if why:
        if submitted_at is not None:
            store.delete_all()
        raise ApiError(400, f"topology {name!r}: nimbus cannot {'write' if probe.get('error') else 'read back'} "
                            f"its probe {probe['path']} in the checkpoint store: {why} ({KEY} must be a "
                            f"directory every host and nimbus can write)")
    return {"probe": probe["nonce"]}


def of_record(nimbus, name, rec):
    """The shared store of a recorded topology (a CheckpointStore), or None: not exactly
    once, or no absolute directory (a record from before nimbus required one)."""
    conf = (rec or {}).get("config") or {}
    if not exactly_once(conf):
        return None
    try:
        return shared_store(nimbus.state, name, conf, 500, f"kill {name!r}")[0]
    except ApiError:
        return None


def remove(nimbus, name, store, stopped):
    """``kill``: the checkpoint files and metadata of ``name``, once its topology master has
    stopped answering (``stopped``: it has) and so no checkpoint of it starts any more; a
    file a task was still writing, which reappears within QUIET_SECS, goes too. Nothing
    is removed once a new topology has this name. Returns what the answer says of it."""
    out = {"dir": store.dir, "removed": False}
    if not stopped:
        out["error"] = "its topology master still answers; the next submission under this name removes them"
        return out
    for attempt in range(2):
        with nimbus.store_lock:
            if nimbus.state.topology(name) is not None:
                out["error"] = "a topology of that name was submitted again meanwhile"
                return out
            store.delete_all()
        if attempt == 0:
            time.sleep(QUIET_SECS)
            if not os.path.lexists(store.dir):
                break
    if os.path.lexists(store.dir):
        out["error"] = f"nimbus could not remove {store.dir}"
        log.warning("topology %s: %s", name, out["error"])
        return out
    out["removed"] = True
    log.info("topology %s: its checkpoints in %s removed", name, store.dir)
    return out
